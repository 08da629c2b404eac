// The app shell: a tab list of panels with URL hash routing (#data, #rewards, ...) and the WAI-ARIA
// tabs keyboard model (arrow keys, Home and End move between tabs and open them; Tab goes into the
// open panel). Panels are built once, on first visit, and kept, so their state survives switching.
import { h } from './dom';

export interface PanelDef {
  id: string;
  title: string;
  build(): HTMLElement;
}

export interface Shell {
  element: HTMLElement;
  /** Opens a panel by id (unknown ids open the default). */
  show(id: string): void;
  /** Builds a panel without opening it (one whose work starts by itself, e.g. a model reload). */
  build(id: string): void;
}

/**
 * `initialId` opens when the URL names no panel (the tab the user last had open); `onShow` hears
 * every panel opened.
 */
export function createShell(panels: readonly PanelDef[], defaultId: string, initialId = defaultId, onShow?: (id: string) => void): Shell {
  const tabs = panels.map((p) =>
    h('button', { type: 'button', role: 'tab', id: `tab-${p.id}`, 'aria-controls': `panel-${p.id}`, 'aria-selected': 'false', tabindex: '-1', 'data-panel': p.id }, p.title),
  );
  const views = panels.map((p) => h('div', { role: 'tabpanel', id: `panel-${p.id}`, 'aria-labelledby': `tab-${p.id}`, tabindex: '0', hidden: true }));
  const built = new Set<string>();
  const tablist = h('div', { role: 'tablist', 'aria-label': 'Panels', class: 'tabs' }, ...tabs);

  const indexOf = (id: string) => {
    const i = panels.findIndex((p) => p.id === id);
    return i >= 0 ? i : panels.findIndex((p) => p.id === defaultId);
  };

  const build = (id: string) => {
    const i = panels.findIndex((p) => p.id === id);
    if (i < 0 || built.has(id)) return;
    built.add(id);
    views[i].append(panels[i].build());
  };

  const show = (id: string) => {
    const active = indexOf(id);
    panels.forEach((p, i) => {
      const on = i === active;
      tabs[i].setAttribute('aria-selected', String(on));
      tabs[i].tabIndex = on ? 0 : -1;
      views[i].hidden = !on;
      if (on) build(p.id);
    });
    document.title = `${panels[active].title} · vlrl`;
    onShow?.(panels[active].id);
  };

  // Clicks and keys show the panel at once and record it in the hash (a history entry, so Back
  // works); hashchange shows whatever the hash names, which is a no-op after our own change.
  const open = (id: string) => {
    show(id);
    if (location.hash !== `#${id}`) location.hash = id;
  };
  window.addEventListener('hashchange', () => show(location.hash.slice(1)));

  tabs.forEach((tab, i) => tab.addEventListener('click', () => open(panels[i].id)));
  tablist.addEventListener('keydown', (e: KeyboardEvent) => {
    const current = tabs.indexOf(e.target as HTMLButtonElement);
    if (current < 0) return;
    const n = tabs.length;
    const next = { ArrowRight: current + 1, ArrowLeft: current - 1 + n, Home: 0, End: n - 1 }[e.key];
    if (next === undefined) return;
    e.preventDefault();
    const target = next % n;
    open(panels[target].id);
    tabs[target].focus();
  });

  show(location.hash.slice(1) || initialId);
  return { element: h('div', { class: 'shell' }, h('nav', { 'aria-label': 'Panels' }, tablist), h('main', { id: 'app' }, ...views)), show, build };
}
