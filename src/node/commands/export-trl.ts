// `npm run cli -- export-trl --config run.json --out DIR [--adapter DIR] [--overwrite]`: the training
// run of a `train` config (the same file, "data" entry included) as a runnable TRL project for one
// or many GPUs (src/node/trl/project.ts says what goes where): train.py, rewards.py +
// vlrl_rewards.py, data/train.parquet in the geo3k layout, accelerate_zero2.yaml, launch.sh,
// requirements.txt, README.md, run_config.json, and adapter/ when --adapter names one to start from.
// --demo instead of --config exports the demo's run (its RL rows and settings).
import { cpSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { DEMO_TRAIN_CONFIG, demoRows } from '../../data/demo';
import type { DatasetRow } from '../../data/types';
import { readModelConfig } from '../../model/qwen3vl';
import { resolveConfig, type TrainConfigInput } from '../../rl/config';
import { resolveEngineConfig } from '../../rl/engineConfig';
import type { CliArgs } from '../args';
import { checkAdapterFits, checkOutputFree, readAdapterDir, replaceDir } from '../adapterDir';
import { geo3kParquet } from '../trl/geo3kParquet';
import { ACCELERATE_ZERO2, LAUNCH_SH, projectReadme, REQUIREMENTS, rewardsPy, trainPy } from '../trl/project';
import VLRL_REWARDS_PY from '../trl/vlrl_rewards.py?raw';
import { decodedDatasetRows, modelFilesAt, readConfigFile } from './train';

export const summary = 'the run of a train config as a TRL project for many GPUs (--config FILE.json|--demo --out DIR [--adapter DIR] [--overwrite])';

export async function run(args: CliArgs): Promise<void> {
  const out = args.str('out');
  const demo = args.bool('demo');
  const file = args.optStr('config');
  if (demo === (file !== undefined)) throw new Error('export-trl: give exactly one of --config FILE.json or --demo');
  let input: TrainConfigInput;
  let engineInput: unknown;
  if (demo) input = { ...DEMO_TRAIN_CONFIG };
  else {
    // Of the "engine" entry, TRL has a counterpart for gradient_checkpointing only.
    const { engine, ...rest } = readConfigFile(file!, `--config ${file}`);
    input = rest as TrainConfigInput;
    engineInput = engine;
  }
  const { config, warnings, engine: fromConfig } = resolveConfig(input);
  const engine = resolveEngineConfig(engineInput ?? {}, 'engine', fromConfig);
  for (const w of warnings) console.error(`warning: ${w}`);
  const warn = (line: string) => console.error(line);
  const rows: DatasetRow[] = demo ? demoRows('rl') : await decodedDatasetRows(config.dataset, warn);
  const model = existsSync(config.model_name_or_path) ? resolve(config.model_name_or_path) : config.model_name_or_path;
  const adapterDir = args.optStr('adapter');
  if (adapterDir !== undefined) {
    const adapter = await readAdapterDir(adapterDir);
    if (existsSync(config.model_name_or_path)) checkAdapterFits(adapter, await readModelConfig(modelFilesAt(config.model_name_or_path)), { engine: false });
  }
  const files: Record<string, string> = {
    'train.py': trainPy({ config, engine, model, adapter: adapterDir !== undefined }),
    'rewards.py': rewardsPy(config.rewards),
    'vlrl_rewards.py': VLRL_REWARDS_PY,
    'accelerate_zero2.yaml': ACCELERATE_ZERO2,
    'launch.sh': LAUNCH_SH,
    'requirements.txt': REQUIREMENTS,
    'README.md': projectReadme({ config, engine, model, rows: rows.length, adapter: adapterDir ?? null, source: demo ? 'train --demo' : file! }),
    'run_config.json': `${JSON.stringify({ ...config, engine }, null, 2)}\n`,
  };
  const parquet = await geo3kParquet(rows);
  checkOutputFree(out, args.bool('overwrite'));
  const tmp = join(dirname(out), `.${basename(out)}.tmp`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(join(tmp, 'data'), { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(tmp, name), text, { mode: name.endsWith('.sh') ? 0o755 : 0o644 });
  writeFileSync(join(tmp, 'data', 'train.parquet'), new Uint8Array(parquet));
  if (adapterDir !== undefined) cpSync(adapterDir, join(tmp, 'adapter'), { recursive: true });
  replaceDir(tmp, out);
  const custom = config.rewards.filter((t) => t.source !== undefined).map((t) => t.name);
  console.log(JSON.stringify({ out, rows: rows.length, files: [...Object.keys(files), 'data/train.parquet', ...(adapterDir ? ['adapter/'] : [])], custom_rewards_to_port: custom }));
  if (custom.length) warn(`export-trl: custom reward term(s) ${custom.join(', ')} raise NotImplementedError in ${join(out, 'rewards.py')} until ported to Python`);
}
