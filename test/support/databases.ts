/**
 * The databases every integration test runs on: in-memory PGlite and a real PostgreSQL server
 * (TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test). Each `open()` gets an
 * isolated database: a fresh schema in a pooled PGlite cluster or on the server (dropped on dispose).
 */
import { randomBytes } from 'node:crypto';
import { PgliteSql, PostgresSql, type Row, type Sql } from '../../src/db/sql.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { rebuildSchemaOf } from '../../src/projections/rebuild-beside.js';
import { recordingSql } from './sql.js';

export const POSTGRES_TEST_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface OpenedDatabase {
  readonly sql: Sql;
  /**
   * Opens another pool on the same database (a second process would), of at most `max`
   * connections (default 10; PGlite has one connection and ignores it). Tests that open many
   * pools keep `max` small: the server allows 100 clients for the whole suite.
   */
  readonly reopen: (max?: number) => Promise<Sql>;
  readonly dispose: () => Promise<void>;
}

export interface TestDatabase {
  readonly name: 'pglite' | 'postgres';
  open(): Promise<OpenedDatabase>;
}

/**
 * In-memory PGlite clusters of this process not in use by a test. Making one costs 1.5–2.5 s (WASM
 * start and loading the empty cluster) and the suite opens hundreds, so a test takes an idle
 * cluster and a fresh schema in it, as on the server; one that opens a second database while its
 * first is open gets a second cluster. Disposing resets the session (`DISCARD ALL`: search path,
 * advisory locks, LISTENs, prepared statements) and drops the schema before the cluster is idle
 * again.
 */
const idlePglite: PgliteSql[] = [];

/**
 * A test's PGlite database: one schema of a pooled cluster. `close()` ends this handle (every later
 * call throws, as on a closed PGlite), not the cluster; LISTENs made through it end with it.
 */
class PooledPgliteSql implements Sql {
  readonly kind = 'pglite' as const;
  readonly inTransaction = false;
  readonly shared = true;
  private closed = false;
  private readonly unlistens = new Set<() => Promise<void>>();
  constructor(private readonly cluster: PgliteSql) {}
  private live(): PgliteSql {
    if (this.closed) throw new Error('PGlite is closed');
    return this.cluster;
  }
  query<R extends Row = Row>(text: string, params?: readonly unknown[]): Promise<R[]> {
    return this.live().query<R>(text, params);
  }
  exec(text: string): Promise<void> {
    return this.live().exec(text);
  }
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    return this.live().transaction(fn);
  }
  withConnection<T>(fn: (conn: Sql) => Promise<T>): Promise<T> {
    this.live();
    return fn(this);
  }
  async listen(channel: string, onNotify: () => void): Promise<() => Promise<void>> {
    const unlisten = await this.live().listen(channel, () => {
      if (!this.closed) onNotify();
    });
    const once = async () => {
      if (this.unlistens.delete(once)) await unlisten();
    };
    this.unlistens.add(once);
    return once;
  }
  async close(): Promise<void> {
    if (this.closed) return;
    for (const unlisten of [...this.unlistens]) await unlisten().catch(() => undefined);
    this.closed = true;
  }
}

const pglite: TestDatabase = {
  name: 'pglite',
  async open() {
    const cluster = idlePglite.pop() ?? (await PgliteSql.open());
    const schema = `t_${randomBytes(6).toString('hex')}`;
    await cluster.exec(`CREATE SCHEMA ${schema}; SET search_path TO ${schema}`);
    const sql = new PooledPgliteSql(cluster);
    let disposed = false;
    return {
      sql,
      reopen: async () => sql,
      dispose: async () => {
        if (disposed) return;
        disposed = true;
        await sql.close();
        try {
          await cluster.exec('DISCARD ALL');
          await cluster.exec(
            `DROP SCHEMA IF EXISTS ${schema} CASCADE; DROP SCHEMA IF EXISTS ${rebuildSchemaOf(schema)} CASCADE`,
          );
          idlePglite.push(cluster);
        } catch {
          // A cluster a test left unusable (an aborted transaction, a closed PGlite) is not reused.
          await cluster.close().catch(() => undefined);
        }
      },
    };
  },
};

const postgres: TestDatabase = {
  name: 'postgres',
  async open() {
    const schema = `t_${randomBytes(6).toString('hex')}`;
    const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
    await admin.exec(`CREATE SCHEMA ${schema}`);
    await admin.close();
    const opened: Sql[] = [];
    const reopen = async (max?: number) => {
      const sql = new PostgresSql(POSTGRES_TEST_URL, { searchPath: schema, ...(max ? { max } : {}) });
      opened.push(sql);
      return sql;
    };
    const sql = await reopen();
    return {
      sql,
      reopen,
      dispose: async () => {
        for (const s of opened) await s.close().catch(() => undefined);
        const cleanup = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
        await cleanup.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        // A rebuild cut short (src/projections/rebuild-beside.ts) leaves its schema beside this one.
        await cleanup.exec(`DROP SCHEMA IF EXISTS ${rebuildSchemaOf(schema)} CASCADE`);
        // Its key store (src/eventstore/shredding/sql-key-store.ts defaultKeyStoreSchema).
        await cleanup.exec(`DROP SCHEMA IF EXISTS ${schema}_keys CASCADE`);
        await cleanup.close();
      },
    };
  },
};

/** Both SQL databases; tests loop over this list so every behaviour is asserted on each. */
export const testDatabases: readonly TestDatabase[] = [pglite, postgres];

/**
 * `database`, with every statement sent through what it opens written down in `statements`
 * (`recordingSql`): for tests that count what a request sends (a casebook started on it with
 * `startTestApp`).
 */
export const recordingDatabase = (database: TestDatabase, statements: string[]): TestDatabase => ({
  name: database.name,
  open: async () => {
    const opened = await database.open();
    return { ...opened, sql: recordingSql(statements)(opened.sql) };
  },
});

/** What a test opened, closed after it, newest first ({@link closeAfterEach}). */
export type Cleanups = (() => Promise<void>)[];

/** Registers an `afterEach` (in the calling `describe`) that closes what each test pushed to the list. */
export const closeAfterEach = (): Cleanups => {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()!();
  });
  return cleanups;
};

/**
 * Opens a fresh database of `db` and a SQL event store on it, both closed after the test.
 * @param storeSql what the store sends its statements through (a recorder: `recordingSql`).
 */
export const openStore = async (
  db: TestDatabase,
  cleanups: Cleanups,
  storeSql: (sql: Sql) => Sql = (sql) => sql,
): Promise<{ opened: OpenedDatabase; store: SqlEventStore }> => {
  const opened = await db.open();
  cleanups.push(() => opened.dispose());
  const store = await SqlEventStore.open(storeSql(opened.sql));
  cleanups.push(() => store.close());
  return { opened, store };
};
