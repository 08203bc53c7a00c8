import type { Sql } from '../db/sql.js';
import type { RecordedEvent } from '../eventstore/port.js';

/**
 * A projection: one read model built only from events (DESIGN.md §2 "Read models").
 * `apply` runs inside the runner's transaction together with the checkpoint, must be idempotent
 * (re-applying an event leaves the same rows) and ignores event types it does not know.
 */
export interface Projection {
  readonly name: string;
  /** Tables this projection owns; `casebook replay` drops them. */
  readonly tables: readonly string[];
  /** Creates the tables if missing. */
  readonly migrate: (sql: Sql) => Promise<void>;
  readonly apply: (event: RecordedEvent, tx: Sql) => Promise<void>;
}
