/**
 * A template of an empty PGlite cluster, so that a fresh data directory starts as a copy of it
 * instead of running initdb (docs/architecture.md "Embedded start").
 *
 * PGlite's initdb runs a second, temporary PGlite instance and the initdb WASM module beside the
 * real one: on a 2-core machine it takes 5–15 s and leaves the process at ~900 MB resident, which
 * V8 does not give back. The template is an initialised, cleanly closed data directory, made once
 * per PGlite version in a short-lived child process (so that memory goes with it) and kept in
 * `$XDG_CACHE_HOME/casebook` (default `~/.cache/casebook`). A fresh data directory is a file copy
 * of it, so the server opens it as an existing one: unpacking a tarball into PGlite
 * (`loadDataDir`) left its buffers, ~80 MiB, in the server until a major GC.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Run by the child: initdb into $OUT.<pid>, close cleanly, rename it to $OUT (atomic). */
const CHILD = `
const { PGlite } = await import(process.env.PGLITE_URL);
const { renameSync, rmSync } = await import('node:fs');
const temporary = process.env.OUT + '.' + process.pid;
const db = await PGlite.create(temporary);
await db.close();
try {
  renameSync(temporary, process.env.OUT);
} catch (error) {
  rmSync(temporary, { recursive: true, force: true });
  if (error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') throw error;
}
`;

/**
 * The URL of PGlite's ES module entry. `import.meta.resolve` where the module runs as ESM (the
 * server); where it was loaded as CommonJS (the test runner's transform has no
 * `import.meta.resolve`), the package's `import` entry found from `require.resolve`.
 */
const pgliteUrl = (): string => {
  if (typeof import.meta.resolve === 'function') return import.meta.resolve('@electric-sql/pglite');
  let dir = dirname(createRequire(import.meta.url).resolve('@electric-sql/pglite'));
  for (;;) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as {
        name?: string;
        exports?: { '.'?: { import?: { default?: string } } };
      };
      const entry = pkg.exports?.['.']?.import?.default;
      if (pkg.name === '@electric-sql/pglite' && entry) return pathToFileURL(join(dir, entry)).href;
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error('@electric-sql/pglite: no ES module entry found');
    dir = parent;
  }
};

/** The installed PGlite version: a template made by another version is never used. */
const pgliteVersion = (): string => {
  let dir = dirname(fileURLToPath(pgliteUrl()));
  for (;;) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === '@electric-sql/pglite' && pkg.version) return pkg.version;
    }
    const parent = dirname(dir);
    if (parent === dir) return 'unknown';
    dir = parent;
  }
};

/** Where the template of this PGlite version lives (a data directory). */
export const templatePath = (): string =>
  join(
    process.env.XDG_CACHE_HOME || join(homedir(), '.cache'),
    'casebook',
    `pglite-${pgliteVersion()}-empty`,
  );

/**
 * Makes `dataDir` (missing, or without a cluster) a copy of the empty-cluster template, making the
 * template first (in a child process) when missing. The cluster's top-level `PG_VERSION` is
 * copied last, so a copy cut short is never taken for a cluster: the next start copies again.
 * @returns false when the template cannot be made or copied (no writable cache directory…): the
 *   caller then lets PGlite run initdb itself.
 */
export const copyEmptyCluster = async (dataDir: string): Promise<boolean> => {
  try {
    const template = templatePath();
    if (!existsSync(join(template, 'PG_VERSION'))) {
      mkdirSync(dirname(template), { recursive: true });
      await run(process.execPath, ['--input-type=module', '-e', CHILD], {
        env: { ...process.env, PGLITE_URL: pgliteUrl(), OUT: template },
      });
    }
    const marker = join(template, 'PG_VERSION');
    cpSync(template, dataDir, { recursive: true, filter: (source) => source !== marker });
    copyFileSync(marker, join(dataDir, 'PG_VERSION'));
    return true;
  } catch {
    return false;
  }
};
