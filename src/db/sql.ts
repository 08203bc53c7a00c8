/**
 * A small SQL connection abstraction over node-postgres (a pool) and PGlite (one in-process
 * connection), so the SQL event store and the projections run unchanged on both (docs/architecture.md "Event store").
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { copyEmptyCluster } from './pglite-template.js';

export type Row = Record<string, unknown>;

export interface Sql {
  readonly kind: 'postgres' | 'pglite';
  /** Whether this handle is inside a transaction (its statements commit with it). */
  readonly inTransaction: boolean;
  /**
   * Whether a statement on this handle may run on any connection, in any order with other callers'
   * (a pool; PGlite's one connection): such statements may be batched together. False inside a
   * transaction and on a held connection, which keep their own session.
   */
  readonly shared: boolean;
  /** Runs one parameterised statement ($1, $2 …) and returns its rows. */
  query<R extends Row = Row>(text: string, params?: readonly unknown[]): Promise<R[]>;
  /** Runs a script of several statements without parameters (migrations). */
  exec(text: string): Promise<void>;
  /**
   * Runs `fn` in one transaction: committed when it resolves, rolled back when it throws (the error
   * is rethrown). Inside a transaction, `transaction` reuses the same one.
   */
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
  /**
   * Runs `fn` on one dedicated connection held for its whole duration (session-level advisory
   * locks, LISTEN). On PGlite that is the only connection.
   */
  withConnection<T>(fn: (conn: Sql) => Promise<T>): Promise<T>;
  /**
   * Listens for NOTIFY on `channel`; returns a function that stops listening.
   * On postgres this holds one pool connection while listening.
   */
  listen(channel: string, onNotify: () => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

/** Distinct statements that get a name (and so a server-side prepared statement per connection). */
const MAX_NAMED_STATEMENTS = 1000;
const statementNames = new Map<string, string>();

/**
 * The node-postgres query of a parameterised statement, named after a hash of its text: each pool
 * connection then parses and plans it once (PostgreSQL keeps the prepared statement, and after a
 * few runs a generic plan) instead of on every call — planning cost more than running the
 * statements of a FHIR read or search (docs/performance.md "Named prepared statements"). Statements without parameters stay
 * unnamed (the simple protocol may carry several statements), and so does every statement past
 * the first {@link MAX_NAMED_STATEMENTS} distinct texts, which bounds what each connection keeps.
 */
const preparedQuery = (text: string, values: readonly unknown[]): pg.QueryConfig => {
  if (values.length === 0) return { text };
  let name = statementNames.get(text);
  if (name === undefined) {
    if (statementNames.size >= MAX_NAMED_STATEMENTS) return { text, values: [...values] };
    name = `cb_${createHash('sha1').update(text).digest('base64url')}`;
    statementNames.set(text, name);
  }
  return { name, text, values: [...values] };
};

/**
 * `sql` as seen with `searchPath` first: every transaction begins with `SET LOCAL search_path`,
 * and a statement outside a transaction runs in one of its own, so the path never outlives the
 * transaction and the connection (a pooled one, PGlite's only one) goes back as it was, whatever
 * else runs on it meanwhile. Unqualified names then resolve in the schemas of `searchPath` first:
 * a rebuild's read models are built in a schema of their own beside the live ones
 * (docs/architecture.md "Projections", Rebuild). Statements on it are never batched with other
 * callers' (`shared` is false).
 * @param searchPath a search path as SQL, its identifiers quoted (`"cb_rebuild_1", "public"`).
 */
export const withSearchPath = (sql: Sql, searchPath: string): Sql => new SearchPathSql(sql, searchPath);

class SearchPathSql implements Sql {
  readonly shared = false;
  /** Inside a transaction: whether its SET LOCAL has been sent. */
  private set = false;
  constructor(
    private readonly inner: Sql,
    private readonly searchPath: string,
  ) {}
  get kind(): Sql['kind'] {
    return this.inner.kind;
  }
  get inTransaction(): boolean {
    return this.inner.inTransaction;
  }
  private async ready(): Promise<void> {
    if (this.set) return;
    await this.inner.exec(`SET LOCAL search_path TO ${this.searchPath}`);
    this.set = true;
  }
  async query<R extends Row = Row>(text: string, params: readonly unknown[] = []): Promise<R[]> {
    if (!this.inTransaction) return this.transaction((tx) => tx.query<R>(text, params));
    await this.ready();
    return this.inner.query<R>(text, params);
  }
  async exec(text: string): Promise<void> {
    if (!this.inTransaction) return this.transaction((tx) => tx.exec(text));
    await this.ready();
    await this.inner.exec(text);
  }
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    if (this.inTransaction) return fn(this);
    return this.inner.transaction(async (tx) => {
      const scoped = new SearchPathSql(tx, this.searchPath);
      await scoped.ready();
      return fn(scoped);
    });
  }
  withConnection<T>(fn: (conn: Sql) => Promise<T>): Promise<T> {
    return this.inner.withConnection((conn) => fn(new SearchPathSql(conn, this.searchPath)));
  }
  async listen(): Promise<() => Promise<void>> {
    throw new Error('listen is not available with a scoped search path');
  }
  /** The handle it scopes is its owner's to close. */
  async close(): Promise<void> {}
}

/** Pooled connections whose session state is unknown (a ROLLBACK failed): closed, never reused. */
const unusable = new WeakSet<pg.PoolClient>();

class PgClientSql implements Sql {
  readonly kind = 'postgres' as const;
  readonly shared = false;
  constructor(
    private readonly client: pg.PoolClient,
    readonly inTransaction: boolean,
  ) {}
  async query<R extends Row = Row>(text: string, params: readonly unknown[] = []): Promise<R[]> {
    const result = await this.client.query(preparedQuery(text, params));
    return result.rows as R[];
  }
  async exec(text: string): Promise<void> {
    await this.client.query(text);
  }
  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    if (this.inTransaction) return fn(this);
    await this.client.query('BEGIN');
    try {
      const result = await fn(new PgClientSql(this.client, true));
      await this.client.query('COMMIT');
      return result;
    } catch (error) {
      await this.client.query('ROLLBACK').catch(() => {
        // Its session is in an unknown state (a transaction may still be open): never reuse it.
        unusable.add(this.client);
      });
      throw error;
    }
  }
  withConnection<T>(fn: (conn: Sql) => Promise<T>): Promise<T> {
    return fn(this);
  }
  async listen(): Promise<() => Promise<void>> {
    throw new Error('listen needs the pool, not a single client');
  }
  async close(): Promise<void> {}
}

/**
 * An instant as text PostgreSQL reads as a `timestamptz`, for any instant a FHIR value can name:
 * ISO 8601 for years 1–9999; past 9999 the year without the `+` that `toISOString` writes
 * (`10000-01-01T00:00:00.000Z`: the end of `9999-12-31`); before year 1 an era, since PostgreSQL
 * has no year 0 (`0001-01-01T00:00+14:00` is `0001-12-31T10:00:00.000Z BC`, which `toISOString`
 * writes as year 0000 and PostgreSQL refuses).
 * @throws {RangeError} for an invalid Date.
 */
export const timestampText = (instant: Date): string => {
  const iso = instant.toISOString();
  const year = instant.getUTCFullYear();
  if (year >= 1 && year <= 9999) return iso;
  const rest = iso.replace(/^[+-]?\d+/, '');
  return year > 9999 ? `${year}${rest}` : `${String(1 - year).padStart(4, '0')}${rest} BC`;
};

/** `name` as a double-quoted SQL identifier (node-postgres' escaping; PGlite parses the same SQL). */
export const quoteIdentifier = (name: string): string => pg.escapeIdentifier(name);

/**
 * Whether `error` ended only the statement that raised it, not the session: an error the server
 * sent at ERROR severity, outside the classes that tell of a lost or closing connection (08
 * connection exception, 57P operator intervention: shutdown, terminated backend).
 */
const statementOnly = (error: unknown): boolean => {
  if (!(error instanceof pg.DatabaseError)) return false;
  const code = error.code ?? '';
  return error.severity === 'ERROR' && !code.startsWith('08') && !code.startsWith('57P');
};

/** Errors of the socket under a connection: the server is gone, unreachable or closed it. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** What node-postgres and PGlite say when a connection is lost, cannot be made, or was closed. */
const LOST_CONNECTION =
  /^(?:Connection terminated|Client has encountered a connection error|Client was closed|timeout exceeded when trying to connect|Cannot use a pool after calling end|PGlite is closed)/;

/**
 * Whether `error` (or an error it wraps, through `cause` or an AggregateError) says the database
 * could not answer — not that it refused the statement: the connection was terminated
 * (`pg_terminate_backend`, a restart: SQLSTATE class 08, 57P), the server has no connection left
 * (53300), the pool cannot connect (ECONNREFUSED, a connect timeout), or the pool or PGlite was
 * closed. Such a request is answered 503 with `Retry-After`, never 500 (docs/interface.md §7);
 * a statement the server refused is not one of these.
 */
export const isDatabaseUnavailable = (error: unknown, depth = 0): boolean => {
  if (error === null || typeof error !== 'object' || depth > 5) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (error instanceof pg.DatabaseError) {
    const sqlState = error.code ?? '';
    if (sqlState.startsWith('08') || sqlState.startsWith('57P') || sqlState === '53300') return true;
  } else if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
  if (typeof message === 'string' && LOST_CONNECTION.test(message)) return true;
  const inner = error instanceof AggregateError ? error.errors : [];
  return [(error as { cause?: unknown }).cause, ...inner].some((e) => isDatabaseUnavailable(e, depth + 1));
};

/** node-postgres pool. `searchPath` isolates a schema (used by tests). */
export class PostgresSql implements Sql {
  readonly kind = 'postgres' as const;
  readonly inTransaction = false;
  readonly shared = true;
  readonly pool: pg.Pool;
  private readonly searchPath: string | undefined;
  constructor(
    private readonly connectionString: string,
    options: { searchPath?: string; max?: number } = {},
  ) {
    this.searchPath = options.searchPath;
    this.pool = new pg.Pool({
      connectionString,
      max: options.max ?? 10,
      ...(options.searchPath ? { options: `-c search_path=${options.searchPath}` } : {}),
    });
    // An idle client losing its server must not crash the process; the next query reconnects.
    this.pool.on('error', () => undefined);
  }
  async query<R extends Row = Row>(text: string, params: readonly unknown[] = []): Promise<R[]> {
    const result = await this.checkedOut((client) => client.query(preparedQuery(text, params)));
    return result.rows as R[];
  }
  async exec(text: string): Promise<void> {
    await this.checkedOut((client) => client.query(text));
  }
  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    return this.withConnection((conn) => conn.transaction(fn));
  }
  /** Runs `fn` on one pooled connection held throughout (a transaction, session advisory locks); see {@link checkedOut}. */
  async withConnection<T>(fn: (conn: Sql) => Promise<T>): Promise<T> {
    return this.checkedOut((client) => fn(new PgClientSql(client, false)));
  }
  /**
   * Runs `run` on a pooled connection, then returns the connection to the pool — unless it is
   * broken: the server ended its session while it was checked out (its error event, which without
   * a listener here would crash the process), a statement failed with more than the statement
   * ({@link statementOnly}), or a ROLLBACK on it failed (its session may hold an open
   * transaction); then it is closed, and no later caller gets it. pg-pool itself also closes a
   * connection node-postgres marked not queryable. A statement the server refused (a wrong expected
   * version, a unique violation, any check of casebook's SQL) and an error of the caller's own code
   * keep the connection: pg-pool's own `query` closed it on every error, so each refused statement
   * cost a new connection — a server process, its authentication, every prepared statement planned
   * again: 10–18 ms of the serving process's CPU and 30–50 ms of the machine's for a conditional
   * update refused as a duplicate (docs/performance.md "Refused statements keep their connection").
   * @throws what `run` throws.
   */
  private async checkedOut<T>(run: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let lost = false;
    const onError = () => {
      lost = true;
    };
    client.on('error', onError);
    let broken = false;
    try {
      return await run(client);
    } catch (error) {
      broken = error instanceof pg.DatabaseError && !statementOnly(error);
      throw error;
    } finally {
      client.off('error', onError);
      client.release(lost || broken || unusable.has(client));
    }
  }
  async listen(channel: string, onNotify: () => void): Promise<() => Promise<void>> {
    const client = await this.pool.connect();
    const handler = (message: pg.Notification) => {
      if (message.channel === channel) onNotify();
    };
    client.on('notification', handler);
    client.on('error', () => undefined);
    await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    return async () => {
      client.off('notification', handler);
      await client.query(`UNLISTEN ${pg.escapeIdentifier(channel)}`).catch(() => undefined);
      client.release();
    };
  }
  /** Where this pool connects: what another thread needs to open its own pool on the same schema. */
  get target(): { readonly connectionString: string; readonly searchPath?: string } {
    return {
      connectionString: this.connectionString,
      ...(this.searchPath ? { searchPath: this.searchPath } : {}),
    };
  }
  async close(): Promise<void> {
    await this.pool.end();
  }
}

type PgliteTx = Parameters<Parameters<PGlite['transaction']>[0]>[0];

class PgliteTxSql implements Sql {
  readonly kind = 'pglite' as const;
  readonly inTransaction = true;
  readonly shared = false;
  constructor(private readonly tx: PgliteTx) {}
  async query<R extends Row = Row>(text: string, params: readonly unknown[] = []): Promise<R[]> {
    const result = await this.tx.query<R>(text, [...params]);
    return result.rows;
  }
  async exec(text: string): Promise<void> {
    await this.tx.exec(text);
  }
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    return fn(this);
  }
  withConnection<T>(fn: (conn: Sql) => Promise<T>): Promise<T> {
    return fn(this);
  }
  async listen(): Promise<() => Promise<void>> {
    throw new Error('listen is not available inside a transaction');
  }
  async close(): Promise<void> {}
}

/**
 * PGlite's shared buffers (initdb's default is 128MB). Its WASM heap holds them, so they count
 * fully in the process's resident set once touched; the data files stay in the OS page cache
 * beneath. 16MB saved ~110 MiB of idle RSS in `npm run bench:start`.
 */
const PGLITE_SHARED_BUFFERS = '16MB';

/** In-memory clusters opened by this process so far. */
let inMemoryOpens = 0;
/** An empty cluster's data directory (a gzipped tarball, ~4.5 MB), made on the second in-memory open. */
let emptyCluster: Promise<Blob> | undefined;

/**
 * A new in-memory PGlite. The first of a process is initdb'd by PGlite (~3 s on a 2-core VM); from
 * the second on, each is loaded from a tarball of an empty cluster made once (`dumpDataDir`, then
 * `loadDataDir`: ~1.3 s each), since a process that opens two (the test suite opens hundreds)
 * will likely open more. The same empty database either way.
 */
const openInMemory = async (): Promise<PGlite> => {
  inMemoryOpens += 1;
  if (inMemoryOpens === 1) return new PGlite();
  emptyCluster ??= (async () => {
    const fresh = new PGlite();
    try {
      await fresh.waitReady;
      return await fresh.dumpDataDir('gzip');
    } finally {
      await fresh.close();
    }
  })();
  const tarball = await emptyCluster.catch(() => undefined);
  // Without a tarball (the dump failed), PGlite runs initdb as for the first.
  return tarball ? new PGlite({ loadDataDir: tarball }) : new PGlite();
};

/**
 * PGlite: Postgres compiled to WASM, in-process, one connection. PGlite serialises queries and
 * transactions itself; `dataDir` undefined = in memory.
 */
export class PgliteSql implements Sql {
  readonly kind = 'pglite' as const;
  readonly inTransaction = false;
  readonly shared = true;
  private constructor(readonly db: PGlite) {}
  /**
   * Opens PGlite in `dataDir` (in memory when undefined). A data directory without a cluster is
   * first made a copy of the empty-cluster template ({@link copyEmptyCluster}) rather than
   * initdb'd by PGlite (which it still is when the template cannot be had).
   */
  static async open(dataDir?: string): Promise<PgliteSql> {
    if (dataDir && !existsSync(join(dataDir, 'PG_VERSION'))) await copyEmptyCluster(dataDir);
    const db = dataDir
      ? new PGlite(dataDir, {
          startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${PGLITE_SHARED_BUFFERS}`],
        })
      : await openInMemory();
    await db.waitReady;
    return new PgliteSql(db);
  }
  async query<R extends Row = Row>(text: string, params: readonly unknown[] = []): Promise<R[]> {
    const result = await this.db.query<R>(text, [...params]);
    return result.rows;
  }
  async exec(text: string): Promise<void> {
    await this.db.exec(text);
  }
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    return this.db.transaction((tx) => fn(new PgliteTxSql(tx)));
  }
  withConnection<T>(fn: (conn: Sql) => Promise<T>): Promise<T> {
    return fn(this);
  }
  async listen(channel: string, onNotify: () => void): Promise<() => Promise<void>> {
    return this.db.listen(channel, () => onNotify());
  }
  async close(): Promise<void> {
    if (!this.db.closed) await this.db.close();
  }
}
