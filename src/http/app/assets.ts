/**
 * The application host's browser code (issue 32): TypeScript under src/http/app/browser/, bundled
 * by esbuild with fhirpath.js once per process, on first use, from the sources the process runs —
 * `src/**.ts` under tsx (tests, `npm run casebook`), the compiled `dist/**.js` under `npm start`.
 * Served at `{app_url}/assets/<name>-<content hash>.js` as immutable, so a new build is a new URL.
 *
 * The bundle is the same code as the server's: the form engine of src/sdc/engine/ with
 * src/sdc/run-within-budget.browser.ts in place of the Node runner (which needs `node:vm`).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';

/** One bundled file. */
export interface Asset {
  /** The file name under `{app_url}/assets/`, with its content hash (`editor-3FQ2ZK7A.js`). */
  readonly name: string;
  readonly contentType: string;
  readonly body: Uint8Array;
}

/** The bundles of the browser entry points, by entry ({@link BROWSER_ENTRIES}). */
export interface Assets {
  /** Entry → the asset built from it. */
  readonly entries: ReadonlyMap<string, Asset>;
  /** Asset name → asset, for serving. */
  readonly byName: ReadonlyMap<string, Asset>;
}

/** The browser entry points, relative to src/http/app/browser/ (without extension). */
export const BROWSER_ENTRIES = ['editor', 'engine-worker', 'report-view'] as const;

const here = fileURLToPath(import.meta.url);
/** `.ts` when the process runs the sources (tsx), `.js` when it runs dist/. */
const extension = here.endsWith('.ts') ? '.ts' : '.js';
const browserDir = join(dirname(here), 'browser');

/** The browser's evaluation runner in place of the Node one (src/sdc/budget.ts). */
const browserRunner: Plugin = {
  name: 'casebook-browser-runner',
  setup(builder) {
    builder.onResolve({ filter: /(^|\/)run-within-budget\.js$/ }, (args) => ({
      path: join(
        args.resolveDir,
        args.path.replace(/run-within-budget\.js$/, `run-within-budget.browser${extension}`),
      ),
    }));
  },
};

/**
 * Bundles the browser entry points (no files written).
 * @throws {Error} with esbuild's messages when the code does not build (e.g. a browser module
 *   importing a `node:` module).
 */
export const buildAssets = async (): Promise<Assets> => {
  const result = await build({
    entryPoints: Object.fromEntries(
      BROWSER_ENTRIES.map((entry) => [entry, join(browserDir, `${entry}${extension}`)]),
    ),
    bundle: true,
    write: false,
    outdir: '/assets',
    entryNames: '[name]-[hash]',
    format: 'iife',
    platform: 'browser',
    target: ['es2020'],
    minify: true,
    legalComments: 'none',
    logLevel: 'silent',
    plugins: [browserRunner],
  });
  const entries = new Map<string, Asset>();
  const byName = new Map<string, Asset>();
  for (const file of result.outputFiles) {
    const name = file.path.slice(file.path.lastIndexOf('/') + 1);
    const entry = BROWSER_ENTRIES.find((e) => name.startsWith(`${e}-`));
    if (!entry) continue;
    const asset: Asset = { name, contentType: 'text/javascript; charset=utf-8', body: file.contents };
    entries.set(entry, asset);
    byName.set(name, asset);
  }
  return { entries, byName };
};

let pending: Promise<Assets> | undefined;

/**
 * The process's bundles, built on first call and kept; a failed build is retried by the next call.
 * @throws {Error} as {@link buildAssets}.
 */
export const assets = (): Promise<Assets> => {
  pending ??= buildAssets().catch((error: unknown) => {
    pending = undefined;
    throw error;
  });
  return pending;
};
