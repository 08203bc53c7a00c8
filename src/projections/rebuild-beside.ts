/**
 * A rebuild beside the live read models (docs/architecture.md "Projections", Rebuild; issue 33):
 * `casebook replay` builds every read model again from the log into a schema of its own while the
 * live ones keep answering and keep being written by the appends; once built, and caught up to the
 * head of the log under the append lock, the new tables replace the live ones in one transaction.
 * A request reads either the old tables or the new ones, never a half-built model.
 *
 * Until issue 33 a rebuild dropped the live tables and built them in place: for the whole rebuild
 * (~6 s on 119,000 events) an existing Patient read as 404, an API client's valid secret as wrong
 * (401, counted and audited as a failure), and readers of two tables deadlocked with the drop.
 *
 * The steps, under a session advisory lock (one rebuild at a time per schema):
 * 1. `cb_rebuild_<hash of the live schema>` is made afresh (a rebuild cut short leaves it; the
 *    next one drops it): the projections' tables, functions and `projection_state` are created in
 *    it by a runner whose handle puts it first on the search path (`withSearchPath`); the log's
 *    `es_` tables and the id sequences, found only in the live schema, resolve there.
 * 2. That runner builds them as any `building` projection is built ({@link InlineBuild}): pages
 *    beside the appends, the secondary indexes made once at the end, then the pages appended
 *    meanwhile.
 * 3. One transaction takes the append lock (appends wait, reads go on), applies the rest of the
 *    log, locks the live tables (retrying with a short lock timeout, so that it never deadlocks
 *    with a reader holding one table and waiting for the next) and swaps: drops the live tables,
 *    moves the new ones (their indexes and sequences with them) into the live schema, and marks
 *    the projections live at the head. Reads wait for that transaction's last milliseconds only.
 * 4. The rebuild schema is dropped.
 *
 * A projection whose build stops on an event is not swapped in: its live read model stays as it
 * was, and the failure is returned (the operator fixes the cause and replays again).
 *
 * The runner's rebuild mode (src/projections/runner/rebuild.ts) calls it on the SQL stores; this
 * file holds the schema work only a rebuild needs (the build itself is the catch-up mode's).
 */
import { createHash } from 'node:crypto';
import pLimit from 'p-limit';
import { quoteIdentifier, type Sql, withSearchPath } from '../db/sql.js';
import { type Position, positionToString } from '../eventstore/port.js';
import type { TransactionalAppends } from '../eventstore/sql-capability.js';
import type { Projection } from './projection.js';
import type { InlineBuild, ProjectionFailure, ProjectionRunner } from './runner/index.js';

/** What a rebuild did: the events it read, and the projections whose build stopped on an event. */
export interface RebuildResult {
  readonly read: number;
  /** Projection → the event its build stopped at (its live read model was left as it was). */
  readonly stopped: ReadonlyMap<string, ProjectionFailure>;
}

/** Session advisory lock of a rebuild (one per schema). */
const REBUILD_LOCK_KEY = `hashtext('casebook-rebuild:' || current_schema())`;
/** How long one attempt waits for the live tables' locks before it lets readers go, milliseconds. */
const SWAP_LOCK_TIMEOUT_MS = 100;
/** Attempts at the live tables' locks in one swap transaction (appends wait meanwhile). */
const SWAP_LOCK_ATTEMPTS = 5;
/** Swap transactions tried (each after catching up again) before the rebuild gives up. */
const SWAP_ROUNDS = 10;
/** SQLSTATE of a lock not granted within `lock_timeout`. */
const LOCK_NOT_AVAILABLE = '55P03';

/** The live read models' tables were held by others through every attempt: nothing was swapped. */
class SwapBusy extends Error {
  override readonly name = 'SwapBusy';
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The schema a rebuild of the read models of schema `live` builds into (a plain identifier, 27 characters). */
export const rebuildSchemaOf = (live: string): string =>
  `cb_rebuild_${createHash('sha1').update(live).digest('hex').slice(0, 16)}`;

/**
 * Drops the secondary indexes of `tables` (neither primary keys nor unique ones, which upserts
 * need) in the current schema and returns their definitions: a rebuild fills the tables first and
 * builds each index once at the end, several times faster than keeping it up to date row by row
 * (GIN above all). Should a rebuild in place (KurrentDB) stop half-way, the next start's migrations
 * create them again; a rebuild beside the live read models drops its schema, indexes and all.
 */
export const dropSecondaryIndexes = async (sql: Sql, tables: readonly string[]): Promise<string[]> => {
  const rows = await sql.query<{ name: string; definition: string }>(
    `SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid
       JOIN pg_class t ON t.oid = i.indrelid
       JOIN pg_namespace n ON n.oid = t.relnamespace
      WHERE n.nspname = current_schema() AND t.relname = ANY($1::text[])
        AND NOT i.indisprimary AND NOT i.indisunique
      ORDER BY c.relname`,
    [[...tables]],
  );
  for (const row of rows) await sql.exec(`DROP INDEX IF EXISTS ${quoteIdentifier(row.name)}`);
  return rows.map((r) => r.definition.replace(/^CREATE INDEX /, 'CREATE INDEX IF NOT EXISTS '));
};

/**
 * Creates the indexes {@link dropSecondaryIndexes} dropped and then gathers the statistics of
 * `tables` (plans made on the empty tables' would scan every row). Each index is built in its own
 * transaction with room to sort, and each table analysed on its own; on PostgreSQL two of these run
 * at once on the pool (a GIN index or an ANALYZE per core: 200,000 events' read models took 1.4 s
 * one after the other). A transaction holds only the lock of the one table it indexes, so it
 * cannot deadlock with a transaction that holds one table and waits for the next.
 */
export const createIndexesAndAnalyze = async (
  sql: Sql,
  definitions: readonly string[],
  tables: readonly string[],
): Promise<void> => {
  const limit = pLimit(sql.kind === 'postgres' ? 2 : 1);
  await Promise.all([
    ...definitions.map((definition) =>
      limit(() =>
        sql.transaction(async (tx) => {
          await tx.exec(`SET LOCAL maintenance_work_mem = '256MB'`);
          await tx.exec(definition);
        }),
      ),
    ),
    ...tables.map((table) => limit(() => sql.exec(`ANALYZE ${quoteIdentifier(table)}`))),
  ]);
};

export interface RebuildBesideOptions {
  /** The live read models' database (its current schema is the live one). */
  readonly sql: Sql;
  readonly appends: TransactionalAppends;
  /** The projections to rebuild. */
  readonly projections: readonly Projection[];
  /** A runner of `projections` on `sql` (the rebuild schema first), which leaves the store's append hook alone. */
  readonly runnerOn: (sql: Sql) => ProjectionRunner;
  readonly onProgress?: (read: number, position: Position) => void;
}

/**
 * Rebuilds `projections` from the log into a schema of their own and swaps them in for the live
 * ones (see the file's comment). Waits while another rebuild of the same schema runs.
 * @returns the events read and the projections whose build stopped on an event (not swapped in).
 * @throws what the database throws (the live read models are then as they were); an Error when
 *   the live tables stayed locked by others through every attempt to swap.
 */
export const rebuildBeside = (options: RebuildBesideOptions): Promise<RebuildResult> =>
  options.sql.withConnection(async (conn) => {
    await conn.query(`SELECT pg_advisory_lock(${REBUILD_LOCK_KEY})`);
    try {
      return await rebuildLocked(options);
    } finally {
      await conn.query(`SELECT pg_advisory_unlock(${REBUILD_LOCK_KEY})`).catch(() => undefined);
    }
  });

const rebuildLocked = async (options: RebuildBesideOptions): Promise<RebuildResult> => {
  const { sql, appends, projections, onProgress } = options;
  const [{ live, path }] = (await sql.query<{ live: string; path: string }>(
    `SELECT current_schema() AS live, current_setting('search_path') AS path`,
  )) as [{ live: string; path: string }];
  const schema = rebuildSchemaOf(live);
  const searchPath = `${quoteIdentifier(schema)}, ${path}`;
  await sql.exec(`DROP SCHEMA IF EXISTS ${quoteIdentifier(schema)} CASCADE`);
  await sql.exec(`CREATE SCHEMA ${quoteIdentifier(schema)}`);
  try {
    const scoped = withSearchPath(sql, searchPath);
    const runner = options.runnerOn(scoped);
    await runner.migrate();
    const tables = projections.flatMap((p) => p.tables);
    const indexes = await dropSecondaryIndexes(scoped, tables);
    const build = await runner.startBuild();
    if (!build) throw new Error('the rebuild schema holds no projection to build');
    let read = 0;
    const from = (base: number) => (n: number, position: Position) => onProgress?.(base + n, position);
    read += await build.pages(from(read), undefined);
    await createIndexesAndAnalyze(scoped, indexes, tables);
    for (let round = 1; ; round++) {
      read += await build.pages(from(read), undefined);
      try {
        read += await sql.transaction((tx) =>
          finishAndSwap(tx, { appends, live, schema, searchPath, build, projections }, from(read)),
        );
        break;
      } catch (error) {
        build.undoFinish();
        if (!(error instanceof SwapBusy) || round >= SWAP_ROUNDS) {
          if (error instanceof SwapBusy)
            throw new Error(
              'the live read models stayed locked by other transactions: nothing was swapped in; run the replay again',
            );
          throw error;
        }
      }
    }
    const stopped = new Map(
      (await runner.states())
        .filter((s) => s.status === 'stopped' && s.failure !== undefined)
        .map((s) => [s.name, s.failure!] as const),
    );
    return { read, stopped };
  } finally {
    // Not over the rebuild's own error: a schema left (a lost connection) is dropped by the next one.
    await sql.exec(`DROP SCHEMA IF EXISTS ${quoteIdentifier(schema)} CASCADE`).catch(() => undefined);
  }
};

/**
 * In `tx` (a transaction on the live schema): takes the append lock, applies the rest of the log
 * to the rebuild schema, then swaps every projection that was built into the live schema.
 * @returns the events applied.
 * @throws {SwapBusy} the live tables stayed locked through every attempt.
 */
const finishAndSwap = async (
  tx: Sql,
  target: {
    readonly appends: TransactionalAppends;
    readonly live: string;
    readonly schema: string;
    readonly searchPath: string;
    readonly build: InlineBuild;
    readonly projections: readonly Projection[];
  },
  onProgress: (read: number, position: Position) => void,
): Promise<number> => {
  const { live, schema, searchPath, build, projections } = target;
  // Taken before the search path moves: the lock is the live schema's.
  await target.appends.lockAppends(tx);
  const read = await build.finish(withSearchPath(tx, searchPath), onProgress);
  // build.finish sent SET LOCAL search_path on tx: every name below is qualified.
  const built = projections.filter((p) => build.names().includes(p.name));
  if (built.length === 0) return read;
  const liveName = (table: string) => `${quoteIdentifier(live)}.${quoteIdentifier(table)}`;
  const tables = built.flatMap((p) => p.tables);
  if (!(await lockLiveTables(tx, live, built, tables.map(liveName)))) throw new SwapBusy();
  await tx.exec(`DROP TABLE ${tables.map(liveName).join(', ')}`);
  for (const table of tables)
    await tx.exec(
      `ALTER TABLE ${quoteIdentifier(schema)}.${quoteIdentifier(table)} SET SCHEMA ${quoteIdentifier(live)}`,
    );
  for (const projection of built) {
    const checkpoint = build.checkpoint(projection.name);
    await tx.query(
      `INSERT INTO ${quoteIdentifier(live)}.projection_state (name, status, checkpoint, detail)
       VALUES ($1, 'live', $2, NULL)
       ON CONFLICT (name) DO UPDATE SET status = 'live', checkpoint = $2, detail = NULL, updated_at = now()`,
      [projection.name, checkpoint ? positionToString(checkpoint) : null],
    );
  }
  return read;
};

/**
 * Locks, in `tx`, the live state rows of `projections` (the deferred follower locks its row before
 * its table) and then `tables`, each attempt waiting at most {@link SWAP_LOCK_TIMEOUT_MS}: a reader
 * that holds one of the tables and waits for another that this transaction holds is let go at
 * once, where a plain lock would deadlock with it (one of the two then failing after a second).
 * @returns false when every attempt timed out.
 */
const lockLiveTables = async (
  tx: Sql,
  live: string,
  projections: readonly Projection[],
  tables: readonly string[],
): Promise<boolean> => {
  for (let attempt = 1; attempt <= SWAP_LOCK_ATTEMPTS; attempt++) {
    await tx.exec('SAVEPOINT casebook_swap');
    try {
      await tx.exec(`SET LOCAL lock_timeout = '${SWAP_LOCK_TIMEOUT_MS}ms'`);
      await tx.query(
        `SELECT name FROM ${quoteIdentifier(live)}.projection_state WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE`,
        [projections.map((p) => p.name)],
      );
      await tx.exec(`LOCK TABLE ${tables.join(', ')} IN ACCESS EXCLUSIVE MODE`);
      await tx.exec('SET LOCAL lock_timeout TO DEFAULT');
      await tx.exec('RELEASE SAVEPOINT casebook_swap');
      return true;
    } catch (error) {
      if ((error as { code?: unknown } | null)?.code !== LOCK_NOT_AVAILABLE) throw error;
      await tx.exec('ROLLBACK TO SAVEPOINT casebook_swap');
      await sleep(Math.random() * 50);
    }
  }
  return false;
};
