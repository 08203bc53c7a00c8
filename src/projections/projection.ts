import { migrate, migrationsIn } from '../db/migrations.js';
import type { Sql } from '../db/sql.js';
import type { PendingEvent, RecordedEvent } from '../eventstore/port.js';

/**
 * How a batch is applied: `inline` inside the append transaction that wrote the events (SQL
 * stores: ids came from this database's sequences already), `catch-up` when a projection is built
 * or rebuilt from the log, or follows a KurrentDB log (sequences are moved past the ids seen).
 */
export type ApplyMode = 'inline' | 'catch-up';

/**
 * A projection: one read model built only from events (docs/architecture.md "Projections").
 * `apply` gets the events it `handles`, in `$all` order, and writes them set-based inside the
 * caller's transaction. It must be idempotent: events it has applied before (a replayed batch, an
 * event delivered twice, an older version after a newer one) change nothing.
 */
export interface Projection {
  readonly name: string;
  /** Tables this projection owns; a rebuild drops and recreates them. */
  readonly tables: readonly string[];
  /**
   * Brings its tables, indexes and functions in the current schema to the last version of its
   * migrations, `.sql` files in src/projections/sql/<name>/ ({@link migrateReadModel};
   * docs/architecture.md "Projections", "Schema migrations").
   */
  readonly migrate: (sql: Sql) => Promise<void>;
  /** Whether events of this type change the read model (the others are never passed to `apply`). */
  readonly handles: (eventType: string) => boolean;
  /**
   * While this projection is stopped, refuse appends it would have to apply (default true), so a
   * write never answers 2xx and then stays invisible. False for a view whose events must be
   * written whatever (the audit trail: the record is what matters, its search view catches up).
   */
  readonly refuseWritesWhenStopped?: boolean;
  /**
   * Applied after the append, not in its transaction (SQL stores): a follower applies the log to
   * it in batches, from its checkpoint, moments later (docs/architecture.md "Projections"). For a
   * view whose writes must stay cheap (the audit trail: one append per group commit, no read-model
   * write in it); its readers wait for it ({@link ProjectionRunner.waitForDeferred}).
   */
  readonly deferred?: boolean;
  /**
   * The batch as a call of a PL/pgSQL function of one json argument that its migrations create, so that
   * an append runs it in its own statement (docs/architecture.md "The write pipeline"). `argument`
   * gets the events as `apply` would (of a type it handles, in `$all` order) but may read only
   * their type, data, metadata, stream and revision: their position is not known yet. It returns
   * JSON text, or undefined when the batch changes nothing. Without it, the appends that need this
   * projection run in a transaction with `apply`.
   */
  readonly inline?: {
    readonly function: string;
    readonly argument: (events: readonly PendingEvent[]) => string | undefined;
  };
  /**
   * Applies `events` (all of a type it handles, in `$all` order).
   * @throws on bad data or a failing statement; the runner then stops this projection only.
   */
  readonly apply: (events: readonly RecordedEvent[], tx: Sql, mode: ApplyMode) => Promise<void>;
}

/** `json_to_recordset` input: the rows as one JSON parameter (one round trip for any number of rows). */
export const rowsParam = (rows: readonly object[]): string => JSON.stringify(rows);

/**
 * One row's array as a PostgreSQL array literal (`{"a","b\\"c"}`, `{1,2}`), for an `unnest` of
 * `text[]` parameters whose elements are cast back per row (`x.agents::text[]`): a table's array
 * columns filled from parallel array parameters, which PostgreSQL reads several times faster than
 * the same rows through `json_to_recordset` (docs/performance.md "Parallel arrays instead of `json_to_recordset`"). Strings are quoted with
 * `"` and `\` escaped; numbers must be finite integers. No NULL element.
 */
export const arrayLiteral = (values: readonly (string | number)[]): string =>
  `{${values.map((v) => (typeof v === 'number' ? String(v) : `"${v.replace(/["\\]/g, '\\$&')}"`)).join(',')}}`;

/** Rows a batch may hold to be applied by a read model's keyed function ({@link applyCall}). */
const KEYED_BATCH_MAX = 100;

/**
 * A column of rows sent as parallel arrays ({@link arrayRows}) or to an apply function
 * ({@link applyCall}): its name (a key of the row objects) and SQL type. A `json` value
 * is any JSON (SQL NULL for null or absent); an array type takes a JavaScript array of integers or
 * strings, or null.
 */
export interface ApplyColumn {
  readonly name: string;
  readonly type: 'text' | 'integer' | 'boolean' | 'timestamptz' | 'uuid' | 'json' | 'integer[]' | 'text[]';
}

/** The type of a column's parameter as parallel arrays ({@link arrayRows}). */
const arrayType = (c: ApplyColumn): string =>
  c.type === 'json' ? 'json' : c.type.endsWith('[]') ? 'text[]' : `${c.type}[]`;

/**
 * Rows as parallel arrays, one parameter per column, zipped back into rows by `ROWS FROM`: the
 * scalars as SQL arrays, the array columns as array literals ({@link arrayLiteral}) cast back per
 * row, the json columns as one JSON array each (as a `text[]` of documents, node-postgres escaped
 * every quote of every content). PostgreSQL reads rows this way in a third to a fifth of the time
 * `json_to_recordset` takes, which parsed each content twice (docs/performance.md "Parallel arrays instead of `json_to_recordset`").
 * @param param the SQL that names column `i`'s parameter of SQL type `type` (`c0` in a function,
 *   `$1::integer[]` in a statement).
 * @returns `select`, a `SELECT` of the rows with the columns by name and their ordinal `n`, and
 *   `types`, each parameter's SQL type.
 */
export const arrayRows = (
  columns: readonly ApplyColumn[],
  param: (i: number, type: string) => string,
): { select: string; types: string[] } => ({
  select: `SELECT ${columns
    .map((c) =>
      c.type === 'json'
        ? `CASE WHEN json_typeof(x.${c.name}) = 'null' THEN NULL ELSE x.${c.name} END AS ${c.name}`
        : c.type.endsWith('[]')
          ? `x.${c.name}::${c.type} AS ${c.name}`
          : `x.${c.name}`,
    )
    .join(', ')}, x.n
    FROM ROWS FROM (${columns
      .map((c, i) =>
        c.type === 'json' ? `json_array_elements(${param(i, 'json')})` : `unnest(${param(i, arrayType(c))})`,
      )
      .join(', ')}) WITH ORDINALITY AS x(${columns.map((c) => c.name).join(', ')}, n)`,
  types: columns.map(arrayType),
});

/** The parameters of {@link arrayRows} for `rows`, in column order. */
export const arrayValues = (columns: readonly ApplyColumn[], rows: readonly object[]): unknown[] => {
  const of = (c: ApplyColumn) => rows.map((r) => (r as Record<string, unknown>)[c.name] ?? null);
  return columns.map((c) => {
    if (c.type === 'json') return JSON.stringify(of(c));
    if (c.type.endsWith('[]'))
      return of(c).map((v) => (v === null ? null : arrayLiteral(v as readonly (string | number)[])));
    return of(c);
  });
};

/**
 * The parameter list of a read model's bulk apply function (`name_bulk(c0 integer[], c1 json, …)`,
 * in its migration file) for rows of `columns`, as {@link applyCall} passes them: a test holds the
 * functions in the database to it.
 */
export const bulkParameters = (columns: readonly ApplyColumn[]): string =>
  columns.map((c, i) => `c${i} ${arrayType(c)}`).join(', ');

/** The migration component of read model `name` in `schema_migrations`. */
export const readModelComponent = (name: string): string => `projection:${name}`;

/**
 * Brings read model `name`'s schema in the current schema to its last version: the `.sql` files
 * of src/projections/sql/<name>/, applied in order, each once (src/db/migrations.ts;
 * docs/architecture.md "Projections", "Schema migrations"). In a rebuild's schema, which has no
 * versions yet, they all run: the read model is made there as in an empty database.
 * @throws what a failing migration throws (its transaction is rolled back).
 */
export const migrateReadModel = async (sql: Sql, name: string): Promise<void> => {
  await migrate(sql, readModelComponent(name), migrationsIn(new URL(`./sql/${name}/`, import.meta.url)));
};

/**
 * The statement that applies `rows` through a read model's apply function, which its migration
 * files define as one body (`name` without `_apply`, `_write`, taking an array of the read model's
 * change type) behind two entry points that only convert their input (docs/architecture.md "Event store", "A small batch
 * reaches its rows by key"): up to 100 rows `name(batch json)`, the keyed form, which runs with
 * `enable_seqscan = off` so that a small batch (an append's, a follower's) reaches its rows by key
 * although the planner counts `json_to_recordset` as 100 rows; beyond it `name_bulk` with the rows
 * as parallel arrays ({@link arrayRows}, parameters {@link bulkParameters}), whose plan is the
 * planner's, for a rebuild's pages of thousands of rows (where one scan beats index probes).
 * @returns the statement (`SELECT fn(...)`) and its parameters.
 */
export const applyCall = (
  name: string,
  columns: readonly ApplyColumn[],
  rows: readonly object[],
): { text: string; values: unknown[] } => {
  if (rows.length <= KEYED_BATCH_MAX) return { text: `SELECT ${name}($1::json)`, values: [rowsParam(rows)] };
  return {
    text: `SELECT ${name}_bulk(${columns.map((c, i) => `$${i + 1}::${arrayType(c)}`).join(', ')})`,
    values: arrayValues(columns, rows),
  };
};
