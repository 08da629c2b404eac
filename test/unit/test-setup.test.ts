// tools/test-setup.sh, which `npm test` runs first: it passes where the system has what the tests
// need, and where it lacks something and may not install it (not root), it fails naming the exact
// apt commands. Run as an unprivileged user so that it can never install anything from here.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

function setup(env: Record<string, string>, asNobody: boolean): Promise<{ code: number; stderr: string }> {
  const root = process.getuid?.() === 0;
  const [cmd, args] = asNobody && root ? ['setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'bash', 'tools/test-setup.sh']] : ['bash', ['tools/test-setup.sh']];
  return new Promise((resolve) =>
    execFile(cmd, args, { env: { ...process.env, VLRL_SKIP_SETUP: '', ...env } }, (err, _out, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, stderr })),
  );
}

describe('npm test setup (tools/test-setup.sh)', () => {
  it('is what npm test runs first, and .ci/run is the README commands only', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };
    expect(pkg.scripts.test.startsWith('npm run test:setup && ')).toBe(true);
    expect(pkg.scripts['test:setup']).toBe('bash tools/test-setup.sh');
    const ci = readFileSync('.ci/run', 'utf8').split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
    expect(ci.filter((l) => l.startsWith('npm'))).toEqual(['npm ci --no-audit --no-fund', 'npm test']);
    expect(ci.some((l) => l.includes('apt'))).toBe(false);
  });

  it('passes on this machine, which has what the tests need', async () => {
    expect((await setup({}, false)).code).toBe(0);
  });

  it('names the exact install command when Chromium is missing and it may not install', async () => {
    if (process.platform !== 'linux') return;
    const r = await setup({ CHROMIUM_PATH: '/nonexistent/chromium' }, true);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('missing chromium');
    expect(r.stderr).toContain('apt-get install -y chromium');
    expect(r.stderr).not.toContain('mesa-vulkan-drivers');
  });
});
