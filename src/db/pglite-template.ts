/**
 * A template of an empty PGlite cluster, so that a fresh data directory starts from a tarball
 * (`loadDataDir`) instead of running initdb (docs/architecture.md "Embedded start").
 *
 * PGlite's initdb runs a second, temporary PGlite instance and the initdb WASM module beside the
 * real one: on a 2-core machine it takes 5–15 s and leaves the process at ~900 MB resident, which
 * V8 does not give back. The template is made once per PGlite version, in a short-lived child
 * process (so that memory goes with it), and kept in `$XDG_CACHE_HOME/casebook` (default
 * `~/.cache/casebook`); every later fresh data directory is unpacked from it in a second or two.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Run by the child: initdb in memory, dump the cluster gzipped, write it atomically to $OUT. */
const CHILD = `
const { PGlite } = await import(process.env.PGLITE_URL);
const { writeFileSync, renameSync } = await import('node:fs');
const db = await PGlite.create();
const dump = await db.dumpDataDir('gzip');
await db.close();
const temporary = process.env.OUT + '.' + process.pid;
writeFileSync(temporary, Buffer.from(await dump.arrayBuffer()));
renameSync(temporary, process.env.OUT);
`;

const pgliteUrl = () => import.meta.resolve('@electric-sql/pglite');

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

/** Where the template of this PGlite version lives. */
export const templatePath = (): string =>
  join(
    process.env.XDG_CACHE_HOME || join(homedir(), '.cache'),
    'casebook',
    `pglite-${pgliteVersion()}-empty.tar.gz`,
  );

/**
 * The empty-cluster template as a Blob for PGlite's `loadDataDir`, made first (in a child process)
 * when missing. Returns undefined when it cannot be made or read (no writable cache directory…):
 * the caller then lets PGlite run initdb itself.
 */
export const emptyClusterTemplate = async (): Promise<Blob | undefined> => {
  try {
    const file = templatePath();
    if (!existsSync(file)) {
      mkdirSync(dirname(file), { recursive: true });
      await run(process.execPath, ['--input-type=module', '-e', CHILD], {
        env: { ...process.env, PGLITE_URL: pgliteUrl(), OUT: file },
      });
    }
    return new Blob([readFileSync(file)]);
  } catch {
    return undefined;
  }
};
