// Browser tests: serve the app with Vite on localhost (WebGPU needs a secure context, and
// localhost is one) and drive Debian's Chromium headless through playwright-core, with WebGPU on
// SwiftShader. CHROMIUM_PATH overrides /usr/bin/chromium.
import { chromium, type Browser, type Locator, type Page } from 'playwright-core';
import { createServer, type ViteDevServer } from 'vite';
import { mkdirSync, rmSync } from 'node:fs';
import { afterAll, beforeAll } from 'vitest';
import { tinyModelFolder } from './tinyModelFolder';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Flags for a closed network (no background connections) and WebGPU on the CPU. */
export const CHROMIUM_FLAGS = [
  '--no-sandbox',
  '--headless=new',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-quic',
  '--no-first-run',
  '--disable-default-apps',
  '--enable-unsafe-webgpu',
  '--enable-unsafe-swiftshader',
];

export interface AppSession {
  server: ViteDevServer;
  browser: Browser;
  url: string;
  /**
   * A new page. The app's Content-Security-Policy is bypassed unless `enforceCsp` is set:
   * Playwright's waitForFunction evaluates its predicate with eval, which the policy forbids.
   */
  page(options?: { enforceCsp?: boolean }): Promise<Page>;
  close(): Promise<void>;
}

export async function startApp(): Promise<AppSession> {
  // No file watching and no HMR: a test's page must not reload because a file changed meanwhile.
  const server = await createServer({ logLevel: 'error', server: { port: 0, host: '127.0.0.1', strictPort: false, hmr: false, watch: null } });
  await server.listen();
  const addr = server.httpServer?.address();
  if (!addr || typeof addr === 'string') throw new Error('vite did not report a port');
  const url = `http://127.0.0.1:${addr.port}/`;
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS });
  const pages: Page[] = [];
  return {
    server,
    browser,
    url,
    async page(options = {}) {
      const p = await browser.newPage({ bypassCSP: !options.enforceCsp });
      p.on('pageerror', (e) => console.error(`[page error] ${e.message}`));
      pages.push(p);
      return p;
    },
    async close() {
      await browser.close();
      await server.close();
    },
  };
}

/** Screenshots go to test-results/ (kept as CI artifacts). */
export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync('test-results', { recursive: true });
  await page.screenshot({ path: `test-results/${name}.png`, fullPage: true });
}

/**
 * Inside a describe: the app served and a browser started before its tests, with a tiny model
 * folder written at `modelDir` (test/helpers/tinyModelFolder.ts, copied so the server can serve it);
 * closed after them. The returned session is filled in by the beforeAll hook.
 */
export function appWithTinyModel(modelDir: string): AppSession {
  const session = {} as AppSession;
  beforeAll(async () => {
    rmSync(modelDir, { recursive: true, force: true });
    tinyModelFolder(modelDir, 'tiny-a', true);
    Object.assign(session, await startApp());
  });
  afterAll(async () => {
    await session.close?.();
  });
  return session;
}

/** Inside a describe: the app served and a browser started before its tests, closed after them. */
export function servedApp(): AppSession {
  const session = {} as AppSession;
  beforeAll(async () => {
    Object.assign(session, await startApp());
  });
  afterAll(async () => {
    await session.close?.();
  });
  return session;
}

/**
 * Every request the page's browser context makes from now on (the page and its workers), by URL.
 * Attach before the first navigation to see them all.
 */
export function recordRequests(page: Page): string[] {
  const urls: string[] = [];
  page.context().on('request', (r) => urls.push(r.url()));
  return urls;
}

/** The URLs of `urls` that go anywhere but `appUrl`'s origin (data: URLs go nowhere). */
export function offOrigin(urls: readonly string[], appUrl: string): string[] {
  const origin = new URL(appUrl).origin;
  return urls.filter((u) => !u.startsWith('data:') && new URL(u).origin !== origin);
}

/** Roles a user operates; each needs an accessible name. */
const OPERABLE_ROLES = new Set(['button', 'checkbox', 'combobox', 'link', 'listbox', 'menuitem', 'radio', 'searchbox', 'slider', 'spinbutton', 'switch', 'tab', 'textbox']);

interface AXNode {
  ignored: boolean;
  role?: { value?: string };
  name?: { value?: string };
  backendDOMNodeId?: number;
}

/**
 * Operable nodes of the page's accessibility tree as Chromium computes it (labels, aria-label(ledby),
 * content): how many there are, and those without a name as HTML snippets. Hidden elements are
 * not in the tree, so this checks what is on screen now.
 */
export async function accessibleNames(page: Page): Promise<{ operable: number; nameless: string[] }> {
  const cdp = await page.context().newCDPSession(page);
  try {
    await cdp.send('DOM.getDocument', { depth: 0 });
    const { nodes } = (await cdp.send('Accessibility.getFullAXTree')) as unknown as { nodes: AXNode[] };
    const operable = nodes.filter((n) => !n.ignored && OPERABLE_ROLES.has(n.role?.value ?? ''));
    const nameless: string[] = [];
    for (const n of operable) {
      if ((n.name?.value ?? '').trim() !== '') continue;
      const html = n.backendDOMNodeId === undefined ? '?' : (await cdp.send('DOM.getOuterHTML', { backendNodeId: n.backendDOMNodeId })).outerHTML;
      nameless.push(`${n.role?.value}: ${html.slice(0, 120)}`);
    }
    return { operable: operable.length, nameless };
  } finally {
    await cdp.detach();
  }
}

/**
 * Walks `root` with the Tab key from the element that has focus now and returns the visible,
 * enabled controls of `root` that focus never reached (HTML snippets), and how many there were.
 * Radio groups count once (Tab enters a group at its checked radio; arrows move inside it). In a
 * code editor, where Tab indents, Escape comes first, as the editor's hint tells its users.
 */
export async function unreachedByTab(page: Page, root: Locator, limit = 300): Promise<{ controls: number; unreached: string[] }> {
  // Functions with no named inner helpers: the bundler would wrap those in a helper the page lacks.
  const controls = await root.evaluate((el) => {
    const groups = new Set<string>();
    let n = 0;
    for (const c of el.querySelectorAll<HTMLInputElement>('input, select, textarea, button, a[href], summary')) {
      if (!c.checkVisibility() || c.disabled) continue;
      if (c.type === 'radio') {
        const group = c.name || c.id;
        const members = [...el.querySelectorAll<HTMLInputElement>('input[type="radio"]')].filter((r) => (r.name || r.id) === group);
        if (groups.has(group) || c !== (members.find((r) => r.checked) ?? members[0])) continue;
        groups.add(group);
      }
      c.setAttribute('data-tab-walk', String(n++));
    }
    return n;
  });
  const reached = new Set<string>();
  let entered = false;
  for (let i = 0; i < limit; i++) {
    await page.keyboard.press('Tab');
    const at = await root.evaluate((el) => {
      const a = document.activeElement;
      return { inside: !!a && el.contains(a), walk: a?.getAttribute('data-tab-walk') ?? null, editor: !!a && a.classList.contains('code') };
    });
    if (!at.inside) {
      if (entered) break;
      continue;
    }
    entered = true;
    if (at.walk !== null) reached.add(at.walk);
    if (at.editor) await page.keyboard.press('Escape');
  }
  const unreached = await root.evaluate((el, seen) => {
    const out: string[] = [];
    for (const c of el.querySelectorAll('[data-tab-walk]')) {
      if (!seen.includes(c.getAttribute('data-tab-walk') ?? '')) out.push(c.outerHTML.slice(0, 120));
      c.removeAttribute('data-tab-walk');
    }
    return out;
  }, [...reached]);
  return { controls, unreached };
}
