// The app: the shell with its panels, and the status bar. The engine worker starts at once (the GPU
// panel and the status bar ask it for the adapter); the reward playground and the data panel run
// on the page and need neither a GPU nor a model. The stored workspace (src/ui/workspace.ts) is
// read first, so every panel starts as the user left it, and a model that was loaded reloads
// itself (from the weight cache) without a click.
import { startEngine } from '../worker/client';
import { adaptersPanel } from './panels/adaptersPanel';
import { dataPanel } from './panels/dataPanel';
import { evalPanel } from './panels/evalPanel';
import { gpuPanel } from './panels/gpuPanel';
import { modelPanel, modelToRestore } from './panels/modelPanel';
import { rewardsPanel } from './panels/rewardsPanel';
import { trainPanel } from './panels/trainPanel';
import { persistWorkspaceState, restoreWorkspaceState } from './persistState';
import { createShell, type PanelDef } from './shell';
import { StatusBar } from './status';
import { flushWorkspace, restoreWorkspace, saveWorkspace, workspacePart } from './workspace';

const engine = startEngine();
const status = new StatusBar();
engine.gpuInfo().then(
  (seen) => status.setGpu(seen.summary.name),
  (e: unknown) => status.setGpu(`unavailable: ${e instanceof Error ? e.message : String(e)}`, true),
);

const panels: PanelDef[] = [
  { id: 'model', title: 'Model', build: () => modelPanel(engine, status) },
  { id: 'data', title: 'Data', build: () => dataPanel(status) },
  { id: 'rewards', title: 'Rewards', build: () => rewardsPanel() },
  { id: 'train', title: 'Train', build: () => trainPanel(engine, status) },
  { id: 'eval', title: 'Eval', build: () => evalPanel(engine, status) },
  { id: 'adapters', title: 'Adapters', build: () => adaptersPanel(engine, status) },
  { id: 'gpu', title: 'GPU', build: () => gpuPanel(engine) },
];

await restoreWorkspace();
restoreWorkspaceState();
persistWorkspaceState();
// The first step of the path (load a model) opens by default; the GPU panel says whether this browser can train at all.
const lastTab = workspacePart<{ id: string }>('tab')?.id;
const shell = createShell(panels, 'model', typeof lastTab === 'string' ? lastTab : 'model', (id) => saveWorkspace('tab', { id }));
// The status bar sits above the tabs, in the flow, so that it never covers a panel.
document.getElementById('root')!.append(status.element, shell.element);
// The Model panel reloads the model the user had loaded (its progress shows there).
if (modelToRestore()) shell.build('model');
window.addEventListener('pagehide', () => void flushWorkspace());
