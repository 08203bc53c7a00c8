/**
 * The application host's browser bundles (issue 32; src/http/app/assets.ts): the editor's
 * TypeScript bundled by esbuild for the browser, from the sources under tsx and from the compiled
 * dist/ as `npm start` runs it, and served immutable under a content hash.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { BROWSER_ENTRIES, buildAssets } from '../../../src/http/app/assets.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';

describe('browser bundles of the application host', function () {
  this.timeout(120_000);

  /** A bundle smaller than this lost its code: the read-only view's Print script is a few lines. */
  const MIN_BYTES: Record<string, number> = { 'report-view': 100 };

  it('bundles every browser entry point from the sources, for the browser platform', async () => {
    // platform 'browser': a browser module reaching a `node:` module would fail the build.
    const built = await buildAssets();
    expect([...built.entries.keys()].sort()).to.deep.equal([...BROWSER_ENTRIES].sort());
    for (const [entry, asset] of built.entries) {
      expect(asset.name).to.match(new RegExp(`^${entry}-[A-Z0-9]{8}\\.js$`));
      expect(asset.body.byteLength, entry).to.be.greaterThan(MIN_BYTES[entry] ?? 1000);
      expect(built.byName.get(asset.name)).to.equal(asset);
    }
  });

  it('bundles from the compiled dist/ as npm start runs it', () => {
    const out = join(process.cwd(), 'test-artifacts', 'dist-bundle-check');
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    try {
      // The same esbuild call as package.json's build script, into a scratch directory.
      execFileSync(
        join('node_modules', '.bin', 'esbuild'),
        [
          'src/**/*.ts',
          `--outdir=${out}`,
          '--platform=node',
          '--format=esm',
          '--target=node20',
          '--log-level=warning',
        ],
        { stdio: 'pipe' },
      );
      const names = execFileSync(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const { buildAssets } = await import(${JSON.stringify(join(out, 'http/app/assets.js'))});
           const built = await buildAssets();
           console.log(JSON.stringify([...built.entries.values()].map((a) => [a.name, a.body.byteLength])));`,
        ],
        { encoding: 'utf8' },
      );
      const built = JSON.parse(names) as [string, number][];
      expect(built.map(([name]) => name.replace(/-[A-Z0-9]+\.js$/, '')).sort()).to.deep.equal(
        [...BROWSER_ENTRIES].sort(),
      );
      for (const [name, size] of built)
        expect(size, name).to.be.greaterThan(MIN_BYTES[name.replace(/-[A-Z0-9]+\.js$/, '')] ?? 1000);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  for (const database of testDatabases.slice(0, 1))
    describe(`GET {app_url}/assets/:name on ${database.name}`, () => {
      let app: TestApp;
      before(async () => {
        app = await startTestApp(database);
      });
      after(() => app?.close());

      it('serves a bundle by its hashed name, cacheable for a year, and 404 for any other name', async () => {
        const { entries } = await buildAssets();
        const editor = entries.get('editor')!;
        const res = await fetch(`${app.baseUrl}/app/assets/${editor.name}`);
        expect(res.status).to.equal(200);
        expect(res.headers.get('content-type')).to.equal('text/javascript; charset=utf-8');
        expect(res.headers.get('cache-control')).to.equal('public, max-age=31536000, immutable');
        expect(res.headers.get('x-content-type-options')).to.equal('nosniff');
        expect((await res.arrayBuffer()).byteLength).to.equal(editor.body.byteLength);
        for (const name of ['editor.js', 'editor-AAAAAAAA.js', '..%2Fassets.ts', 'x'.repeat(300)]) {
          const missing = await fetch(`${app.baseUrl}/app/assets/${name}`);
          expect(missing.status, name).to.equal(404);
          expect(missing.headers.get('content-type')).to.match(/^text\/html/);
        }
      });

      it('writes no AuditEvent for a bundle', async () => {
        const { entries } = await buildAssets();
        const before = (await app.allEvents({ audit: true })).length;
        const res = await fetch(`${app.baseUrl}/app/assets/${entries.get('editor')!.name}`);
        expect(res.status).to.equal(200);
        expect((await app.allEvents({ audit: true })).length).to.equal(before);
      });
    });
});
