// The page's copy of the stored workspace (src/store/workspace.ts): read once before the panels are
// built, so each panel starts from what the user left; each panel then saves its part when it
// changes (debounced, one write per part in flight). A part that fails to save is reported once
// on the console and the page goes on: losing a form value must never stop the work.
import { deleteWorkspacePart, loadWorkspace, saveWorkspacePart } from '../store/workspace';

/** Typing in a form writes at most this often. */
const SAVE_DELAY_MS = 300;

let parts = new Map<string, unknown>();
const timers = new Map<string, ReturnType<typeof setTimeout>>();

/** Reads the stored workspace; call once before building the panels. */
export async function restoreWorkspace(): Promise<void> {
  parts = await loadWorkspace().catch((e: unknown) => {
    console.warn('workspace: could not read the stored workspace', e);
    return new Map<string, unknown>();
  });
}

/** The stored part if it is an object (a panel checks the fields it uses). */
export function workspacePart<T extends object>(part: string): Partial<T> | undefined {
  const v = parts.get(part);
  return typeof v === 'object' && v !== null ? (v as Partial<T>) : undefined;
}

/** Records a part (now in memory, in IndexedDB after a short delay); null deletes it. */
export function saveWorkspace(part: string, value: object | null, delay = SAVE_DELAY_MS): void {
  if (value === null) parts.delete(part);
  else parts.set(part, value);
  clearTimeout(timers.get(part));
  timers.set(
    part,
    setTimeout(() => {
      timers.delete(part);
      const v = parts.get(part);
      (v === undefined ? deleteWorkspacePart(part) : saveWorkspacePart(part, v)).catch((e: unknown) => console.warn(`workspace: could not save '${part}'`, e));
    }, delay),
  );
}

/** Writes every pending part now (before the page unloads, and in tests). */
export async function flushWorkspace(): Promise<void> {
  const pending = [...timers.keys()];
  for (const t of timers.values()) clearTimeout(t);
  timers.clear();
  await Promise.all(pending.map((part) => {
    const v = parts.get(part);
    return v === undefined ? deleteWorkspacePart(part) : saveWorkspacePart(part, v);
  }));
}

type FormControl = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

/**
 * Restores the controls' values from the stored part (checkboxes and radios by `checked`, others by
 * `value`; a select only to one of its options), then saves them whenever one changes. Returns
 * whether a stored part was found. File inputs cannot be restored and must not be passed.
 */
export function persistControls(part: string, controls: Record<string, FormControl>): boolean {
  const stored = workspacePart<Record<string, string | boolean>>(part);
  const checkable = (c: FormControl): c is HTMLInputElement => c instanceof HTMLInputElement && (c.type === 'checkbox' || c.type === 'radio');
  if (stored) {
    for (const [k, c] of Object.entries(controls)) {
      const v = stored[k];
      if (checkable(c)) {
        if (typeof v === 'boolean') c.checked = v;
      } else if (typeof v === 'string' && (!(c instanceof HTMLSelectElement) || [...c.options].some((o) => o.value === v))) c.value = v;
    }
  }
  const save = () => saveWorkspace(part, Object.fromEntries(Object.entries(controls).map(([k, c]) => [k, checkable(c) ? c.checked : c.value])));
  for (const c of Object.values(controls)) {
    c.addEventListener('input', save);
    c.addEventListener('change', save);
  }
  return stored !== undefined;
}
