// Headless entry: `npm run cli -- <command> [flags]`. Each command lives in src/node/commands/<name>.ts
// and exports `run(args: CliArgs): Promise<void>` plus a one-line `summary`.
import { parseArgs, type CliArgs } from './args';

const COMMANDS = import.meta.glob<{ run: (a: CliArgs) => Promise<void>; summary: string }>('./commands/*.ts');

function commandNames(): string[] {
  return Object.keys(COMMANDS).map((p) => p.slice('./commands/'.length, -'.ts'.length)).sort();
}

async function main(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === 'help') {
    const lines = await Promise.all(
      commandNames().map(async (n) => `  ${n.padEnd(14)} ${(await COMMANDS[`./commands/${n}.ts`]()).summary}`),
    );
    console.log(`usage: npm run cli -- <command> [flags]\n\ncommands:\n${lines.join('\n')}`);
    return;
  }
  const load = COMMANDS[`./commands/${name}.ts`];
  if (!load) throw new Error(`unknown command '${name}' (commands: ${commandNames().join(', ')})`);
  await (await load()).run(parseArgs(rest));
}

// Top-level await: vite-node closes its module server once this module has evaluated.
try {
  await main(process.argv.slice(2).filter((a) => a !== '--'));
  process.exit(0);
} catch (e) {
  // A named error (DivergenceError, CheckpointError, DataFileError...) says its name.
  const named = e instanceof Error && e.name !== 'Error' ? `${e.name}: ` : '';
  console.error(`error: ${named}${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}
