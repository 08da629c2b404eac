// The weight cache's storage in Node: a directory with one folder per entry (tools/device/
// loadMemory.ts, the unit tests; the CLI loads without a cache). Files are written to a temporary name and renamed, so a process
// killed mid-write leaves no file that looks whole.
import { mkdir, readdir, readFile, rename, rm, statfs, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CacheStorage } from './weightCache';

export function directoryStorage(dir: string): CacheStorage {
  return {
    async entries() {
      try {
        return (await readdir(dir, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
        throw e;
      }
    },
    async read(entry, file) {
      try {
        return new Uint8Array(await readFile(join(dir, entry, file)));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw e;
      }
    },
    async write(entry, file, data) {
      await mkdir(join(dir, entry), { recursive: true });
      const path = join(dir, entry, file);
      await writeFile(`${path}.tmp`, data);
      await rename(`${path}.tmp`, path);
    },
    async remove(entry) {
      await rm(join(dir, entry), { recursive: true, force: true });
    },
    async estimate() {
      await mkdir(dir, { recursive: true });
      const s = await statfs(dir);
      // Free space is what matters: report it as quota over zero usage.
      return { usage: 0, quota: s.bavail * s.bsize };
    },
  };
}
