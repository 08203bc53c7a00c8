/**
 * Versioned SQL migrations (issue 34 "SQL in files, with migrations"; docs/architecture.md "Schema
 * migrations"): a component's schema is a folder of `.sql` files beside the code that uses it,
 * named `NNN_name.sql` (NNN its version, from 001, no gaps), applied in order, each once, and
 * recorded in the `schema_migrations` table of the current schema. Works the same on PostgreSQL
 * and PGlite (`postgres-migrations` and `node-pg-migrate` need a `pg` client, which PGlite is not).
 *
 * The files are read at run time from the folder next to the module (src/ under tsx; dist/ after
 * `npm run build`, which copies them).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { quoteIdentifier, type Sql } from './sql.js';

/** One migration file of a component. */
export interface Migration {
  readonly version: number;
  /** The file's name, `001_event_store.sql`. */
  readonly name: string;
  readonly text: string;
}

const FILE = /^(\d{3})_[a-z0-9_]+\.sql$/;

/**
 * The migrations in `folder` (a `file:` URL or path), in version order.
 * @throws {Error} a `.sql` file misnamed, or versions that are not 1, 2, 3… without gaps.
 */
export const readMigrations = (folder: URL | string): Migration[] => {
  const path = folder instanceof URL ? fileURLToPath(folder) : folder;
  const names = readdirSync(path)
    .filter((name) => name.endsWith('.sql'))
    .sort();
  return names.map((name, i) => {
    const match = FILE.exec(name);
    if (!match) throw new Error(`migration ${path}/${name}: the name must be NNN_lower_case.sql`);
    const version = Number(match[1]);
    if (version !== i + 1) throw new Error(`migration ${path}/${name}: version ${i + 1} expected`);
    return { version, name, text: readFileSync(`${path}/${name}`, 'utf8') };
  });
};

const VERSIONS_TABLE = `CREATE TABLE IF NOT EXISTS schema_migrations (
  component text NOT NULL,
  version integer NOT NULL,
  name text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (component, version)
)`;

/**
 * The highest version of `component` applied in the current schema (0: none, or no versions table).
 * The versions table is looked up in the current schema only, not along the search path: a
 * rebuild's schema, put first on the path before the live one (src/projections/rebuild-beside.ts), has
 * versions of its own (none, until its read models are made in it).
 */
export const appliedVersion = async (sql: Sql, component: string): Promise<number> => {
  const [found] = await sql.query<{ schema: string; ok: boolean }>(
    `SELECT current_schema() AS schema,
            to_regclass(quote_ident(current_schema()) || '.schema_migrations') IS NOT NULL AS ok`,
  );
  if (!found?.ok) return 0;
  const [row] = await sql.query<{ version: number }>(
    `SELECT coalesce(max(version), 0)::int AS version FROM ${quoteIdentifier(found.schema)}.schema_migrations
      WHERE component = $1`,
    [component],
  );
  return Number(row?.version ?? 0);
};

/**
 * Forgets that `component` was migrated in the current schema, so that the next {@link migrate}
 * applies its files again from version 1: for read models dropped to be made again (a rebuild in
 * place, src/projections/runner/rebuild.ts). Nothing happens without a versions table.
 */
export const forgetMigrations = async (sql: Sql, component: string): Promise<void> => {
  if ((await appliedVersion(sql, component)) === 0) return;
  await sql.query(`DELETE FROM schema_migrations WHERE component = $1`, [component]);
};

const folders = new Map<string, Migration[]>();

/**
 * {@link readMigrations} of `folder`, read once per process (a folder's files do not change while
 * it runs): a rebuild migrates its read models again in a schema of its own.
 */
export const migrationsIn = (folder: URL): Migration[] => {
  let migrations = folders.get(folder.href);
  if (!migrations) {
    migrations = readMigrations(folder);
    folders.set(folder.href, migrations);
  }
  return migrations;
};

/**
 * Brings `component`'s schema in the current schema to the last of `migrations`: applies each one
 * not yet recorded, in order, in one transaction with the record of its version. Concurrent callers
 * (processes starting at once) are serialised by an advisory lock; the second finds the work done.
 * One query when the schema is current.
 * @returns the versions applied by this call (empty when it was current).
 * @throws the database's error for a migration that fails (its transaction is rolled back), or an
 *   Error when the schema holds a version newer than `migrations` know (a newer casebook ran).
 */
export const migrate = async (
  sql: Sql,
  component: string,
  migrations: readonly Migration[],
): Promise<number[]> => {
  const latest = migrations.at(-1)?.version ?? 0;
  const current = await appliedVersion(sql, component);
  if (current > latest)
    throw new Error(`schema of ${component} is at version ${current}, newer than this casebook's ${latest}`);
  if (current === latest) return [];
  return sql.transaction(async (tx) => {
    await tx.query(`SELECT pg_advisory_xact_lock(hashtext('casebook.migrations:' || current_schema()))`);
    await tx.exec(VERSIONS_TABLE);
    const applied = await appliedVersion(tx, component);
    const pending = migrations.filter((m) => m.version > applied);
    for (const migration of pending) {
      await tx.exec(migration.text);
      await tx.query(`INSERT INTO schema_migrations (component, version, name) VALUES ($1, $2, $3)`, [
        component,
        migration.version,
        migration.name,
      ]);
    }
    return pending.map((m) => m.version);
  });
};
