/**
 * What only the SQL event stores (PostgreSQL, PGlite) can do, as an optional capability beside
 * their adapter (issue 34: the port names no SQL type; docs/architecture.md "Event store",
 * "Projections"): appends are SQL transactions that casebook's inline projections join, a lock
 * keeps appends out while a projection catches up, and `$all` can be read inside a transaction.
 * The projection runner uses it when the store has it ({@link transactionalOf}); the KurrentDB
 * adapter does not implement it (its projections follow the log).
 */
import type { Sql } from '../db/sql.js';
import type { EventStore, PendingEvent, ReadAllOptions, RecordedEvent } from './port.js';

/**
 * What a store whose appends are SQL transactions offers the projection runner (docs/architecture.md
 * "Projections"): code that runs inside every append, and the lock that keeps appends out while
 * a projection catches up to the head.
 */
export interface TransactionalAppends {
  /** Installs the code every append runs in its transaction (the inline projections). */
  setAppendHook(hook: AppendHook | undefined): void;
  /**
   * Takes, inside the transaction `tx`, the lock every append holds shared: until `tx` ends no
   * append can commit, so `$all` read in it is complete to its end.
   */
  lockAppends(tx: Sql): Promise<void>;
  /**
   * Reads `$all` on `tx` (a transaction). `committedOnly` false drops the filter that hides
   * events still being committed: only while holding {@link lockAppends}.
   */
  readAllIn(tx: Sql, options: ReadAllOptions, committedOnly: boolean): Promise<RecordedEvent[]>;
}

/** A store with the SQL capability: the SQL adapter (src/eventstore/sql-event-store.ts). */
export interface TransactionalEventStore extends EventStore {
  readonly transactional: TransactionalAppends;
}

/**
 * The SQL capability of `store`, or undefined when it has none (KurrentDB).
 * @param store any event store of the port.
 */
export const transactionalOf = (store: EventStore): TransactionalAppends | undefined =>
  (store as Partial<TransactionalEventStore>).transactional;

/**
 * Thrown by an {@link AppendHook} that cannot apply the events and asks the store to run the append
 * again with `key` in `failures` (the hook then records the failure instead, e.g. stops one
 * projection). The store retries once per key; a key failing twice is rethrown.
 */
export class AppendHookFailure extends Error {
  override readonly name = 'AppendHookFailure';
  constructor(
    readonly key: string,
    readonly detail: unknown,
    override readonly cause?: unknown,
  ) {
    super(`append hook failed on ${key}`);
  }
}

/**
 * Code that runs inside every append's transaction on the SQL stores, after the events are written
 * (casebook's inline projections, docs/architecture.md "Projections").
 */
export interface AppendHook {
  /**
   * Whether the hook has anything to do for events of these types. When not, the append carries
   * no read-model work (no {@link calls}, no {@link apply}).
   */
  needed(types: ReadonlySet<string>): boolean;
  /** The projections this process maintains: an append is refused while another is live. */
  readonly known: readonly string[];
  /** The error an append refused because projection `name` is live but not {@link known} throws. */
  unknownProjection(name: string): Error;
  /**
   * @param events the events this append wrote, in `$all` order (none for a replayed append).
   * @param projections the status of every projection in `projection_state`, read under the append lock.
   * @param failures keys of earlier attempts' {@link AppendHookFailure}s, with their detail.
   * @throws anything to roll the append back; {@link AppendHookFailure} to ask for a retry.
   */
  apply(
    tx: Sql,
    events: readonly RecordedEvent[],
    projections: ReadonlyMap<string, string>,
    failures: ReadonlyMap<string, unknown>,
  ): Promise<void>;
  /**
   * The hook's work for events about to be appended, as calls of SQL functions that the append
   * runs in its own statement, after the events and under the append lock (docs/architecture.md
   * "Event store"): one round trip, group-committed with concurrent appends. Undefined when the
   * hook cannot say it that way (a projection the events need has no such function): the append
   * then runs in a transaction with {@link apply}. It does so too when a call's projection is not
   * live or a call fails, so {@link apply} keeps deciding what building, stopped and failing
   * projections mean.
   * @param events the events as they will be stored, but without positions (not known yet).
   */
  calls?(events: readonly PendingEvent[]): readonly InlineCall[] | undefined;
  /**
   * Told after an append that ran {@link calls} committed (what {@link apply} tells at its end).
   * @param calls the calls it ran.
   */
  called?(calls: readonly InlineCall[]): void;
}

/**
 * A projection's batch as a call of one of its SQL functions (`function(argument::json)`), which
 * the append runs when `projection` is live (its `projection_state` status).
 */
export interface InlineCall {
  readonly projection: string;
  /** A function of one json argument in the store's schema, created by the projection. */
  readonly function: string;
  /**
   * JSON text of an array of rows: the append merges the rows of concurrent appends' calls of one
   * function into one call. A call whose argument is not an array makes the append run
   * {@link AppendHook.apply} instead.
   */
  readonly argument: string;
}
