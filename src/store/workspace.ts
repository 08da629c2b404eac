// The user's workspace in IndexedDB (the 'meta' store, one record per part under "workspace/<part>"):
// what the panels were set to (model choice, data settings and the loaded rows, reward terms,
// Train and Eval forms, the open tab), so a reload or a closed tab comes back as it was left.
// Each part is a plain structured-cloneable value; the UI checks its shape when it reads it.
import { openStore } from './db';

const PREFIX = 'workspace/';

/** Every stored part by name; unreadable storage (private mode, quota) reads as empty. */
export async function loadWorkspace(): Promise<Map<string, unknown>> {
  const db = await openStore();
  const keys = (await db.getAllKeys('meta')).map(String).filter((k) => k.startsWith(PREFIX));
  const out = new Map<string, unknown>();
  for (const k of keys) out.set(k.slice(PREFIX.length), await db.get('meta', k));
  return out;
}

export async function saveWorkspacePart(part: string, value: unknown): Promise<void> {
  await (await openStore()).put('meta', value, PREFIX + part);
}

export async function deleteWorkspacePart(part: string): Promise<void> {
  await (await openStore()).delete('meta', PREFIX + part);
}
