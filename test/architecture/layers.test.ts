/**
 * The layers of docs/architecture.md "Layers", checked on the source's imports (static and
 * dynamic, read by TypeScript's own pre-processor): every file sits on a floor and imports only
 * its own floor and those below; the domain, the commands and the projections know nothing of
 * HTTP; only the event store's own module picks an adapter; the hosts, the commands and the
 * integration read read models through the query layer; the app host, the SDC host and the
 * launcher call commands, never the FHIR router.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import ts from 'typescript';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');

/** Every `.ts` file under `dir`, as paths relative to src/ (`commands/handler.ts`). */
const sourceFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [relative(SRC, path)] : [];
  });

/** The project files `file` imports, relative to src/ with `.ts` (packages left out). */
const importsOf = (file: string): string[] =>
  ts
    .preProcessFile(readFileSync(join(SRC, file), 'utf8'), true, true)
    .importedFiles.map((i) => i.fileName)
    .filter((name) => name.startsWith('.'))
    .map((name) => relative(SRC, resolve(SRC, dirname(file), name)).replace(/\.js$/, '.ts'));

const FILES = sourceFiles(SRC);
const GRAPH = new Map(FILES.map((file) => [file, importsOf(file)]));

/** `file → imported` pairs where `from(file)` and `to(imported)` both hold. */
const edges = (from: (file: string) => boolean, to: (imported: string) => boolean): string[] =>
  [...GRAPH].flatMap(([file, imports]) =>
    from(file) ? imports.filter(to).map((imported) => `${file} → ${imported}`) : [],
  );

/**
 * The floors of docs/architecture.md "Layers", lowest first: a file may import files of its own
 * floor and of the floors below, never above. Top-level entries of src/ (a folder, or a file
 * directly in src/) are placed whole.
 */
const FLOORS: readonly (readonly string[])[] = [
  ['domain', 'db', 'eventstore', 'metrics.ts', 'status-text.ts'],
  ['fhir'],
  ['projections', 'sdc'],
  ['queries', 'commands'],
  ['integration'],
  // The composition root: the Casebook (casebook.ts), its configuration and background thread.
  ['casebook.ts', 'config.ts', 'background'],
  ['http', 'cli'],
];

/** The floor of a file relative to src/, or -1 when its top-level entry has none. */
const floorOf = (file: string): number => {
  const top = file.split('/')[0]!;
  return FLOORS.findIndex((floor) => floor.includes(top));
};

/** The imports that go up a floor: `file (floor) → imported (floor)`. */
const upwardImports = (graph: ReadonlyMap<string, readonly string[]>): string[] =>
  [...graph].flatMap(([file, imports]) =>
    imports
      .filter((imported) => floorOf(imported) > floorOf(file))
      .map((imported) => `${file} (${floorOf(file)}) → ${imported} (${floorOf(imported)})`),
  );

describe('layers (docs/architecture.md "Layers")', () => {
  it('places every file of src/ on a floor', () => {
    expect(FILES.filter((file) => floorOf(file) < 0)).to.deep.equal([]);
  });

  it('no file imports a file of a higher floor', () => {
    expect(upwardImports(GRAPH)).to.deep.equal([]);
  });

  it('the floor check fails the upward imports issue 34 found', () => {
    // The three imports that ran up the layers before issue 34, put back into a copy of the graph.
    const upward: [string, string][] = [
      ['commands/launch.ts', 'integration/launcher.ts'],
      ['commands/seed.ts', 'casebook.ts'],
      ['projections/investigation.ts', 'casebook.ts'],
    ];
    const graph = new Map(GRAPH);
    for (const [file, imported] of upward) graph.set(file, [...(graph.get(file) ?? []), imported]);
    expect(upwardImports(graph)).to.deep.equal([
      'commands/launch.ts (3) → integration/launcher.ts (4)',
      'commands/seed.ts (3) → casebook.ts (5)',
      'projections/investigation.ts (2) → casebook.ts (5)',
    ]);
  });

  it('http/, integration/ and commands/ read read models through queries/, not projections/', () => {
    expect(
      edges(
        (f) => /^(http|integration|commands)\//.test(f),
        (i) => i.startsWith('projections/'),
      ),
    ).to.deep.equal([]);
    expect(GRAPH.get('http/auth/sessions.ts')).to.include('queries/sessions.ts');
    expect(GRAPH.get('integration/export/exporter.ts')).to.include('queries/resources.ts');
  });

  it('reads the imports of the whole source', () => {
    expect(FILES.length).to.be.greaterThan(100);
    expect(GRAPH.get('http/app.ts')).to.include('http/fhir/router.ts');
    expect(GRAPH.get('eventstore/index.ts')).to.include('eventstore/sql-event-store.ts');
    // A dynamic import counts too: the KurrentDB adapter is loaded only when configured.
    expect(GRAPH.get('eventstore/index.ts')).to.include('eventstore/kurrentdb-event-store.ts');
  });

  it('no file in commands/, domain/ or projections/ imports http/', () => {
    expect(
      edges(
        (f) => /^(commands|domain|projections)\//.test(f),
        (i) => i.startsWith('http/'),
      ),
    ).to.deep.equal([]);
  });

  it('dependencies point inwards: only http/ itself and the CLI that serves it import http/', () => {
    expect(
      edges(
        (f) => !f.startsWith('http/') && !f.startsWith('cli/'),
        (i) => i.startsWith('http/'),
      ),
    ).to.deep.equal([]);
  });

  it('no file outside eventstore/ imports an event store adapter', () => {
    expect(
      edges(
        (f) => !f.startsWith('eventstore/'),
        (i) => i === 'eventstore/sql-event-store.ts' || i === 'eventstore/kurrentdb-event-store.ts',
      ),
    ).to.deep.equal([]);
  });

  it('the hosts read resources through the query layer, which shows a caller only what it may see', () => {
    // src/queries/visibility.ts holds the one rule (docs/architecture.md "Security"); a route that
    // read the resources read model itself could forget it (issue 33: the report editor did).
    expect(
      edges(
        (f) => f.startsWith('http/'),
        (i) => i === 'projections/resources.ts',
      ),
    ).to.deep.equal([]);
    expect(GRAPH.get('queries/fhir.ts')).to.include('queries/visibility.ts');
    expect(GRAPH.get('http/app/editor.ts')).to.include('queries/visibility.ts');
  });

  it('only the host wiring mounts the FHIR router; the app, SDC and launch hosts call commands', () => {
    expect(
      edges(
        (f) => f !== 'http/app.ts' && !f.startsWith('http/fhir/'),
        (i) => i === 'http/fhir/router.ts',
      ),
    ).to.deep.equal([]);
  });

  it('the form engine and the browser code reach no Node module, but for the runner the bundle replaces', () => {
    // What the editor's bundle holds: every project file the browser entries import, transitively.
    const reached = new Set<string>();
    const pending = FILES.filter((f) => f.startsWith('http/app/browser/'));
    while (pending.length > 0) {
      const file = pending.pop()!;
      if (reached.has(file)) continue;
      reached.add(file);
      pending.push(...(GRAPH.get(file) ?? []));
    }
    expect(reached).to.include('sdc/engine/index.ts');
    expect(reached).to.include('http/app/editor-form.ts');
    const nodeImports = (file: string) =>
      ts
        .preProcessFile(readFileSync(join(SRC, file), 'utf8'), true, true)
        .importedFiles.map((i) => i.fileName)
        .filter((name) => name.startsWith('node:') || ['fs', 'path', 'vm', 'crypto', 'os'].includes(name));
    const offending = [...reached, ...FILES.filter((f) => f.startsWith('sdc/engine/'))]
      .filter((file) => file !== 'sdc/run-within-budget.ts')
      .flatMap((file) => nodeImports(file).map((name) => `${file} → ${name}`));
    expect(offending).to.deep.equal([]);
  });
});
