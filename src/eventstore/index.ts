/**
 * The event store (docs/architecture.md "Event store"): the port and the choice of adapter.
 */
import type { Sql } from '../db/sql.js';
import { KurrentDbEventStore } from './kurrentdb-event-store.js';
import type { EventStore } from './port.js';
import { SqlEventStore } from './sql-event-store.js';

export { KurrentDbEventStore } from './kurrentdb-event-store.js';
export * from './port.js';
export { EVENTS_CHANNEL, SqlEventStore } from './sql-event-store.js';

/**
 * Opens the configured event store: KurrentDB when `kurrentDbUrl` is set (e.g.
 * `kurrentdb://localhost:2113?tls=false`), otherwise the SQL store on `sql` (postgres or pglite,
 * whichever `sql` is), creating its `es_` tables when missing. The caller still owns `sql` and
 * closes it after the store.
 */
export async function openEventStore(options: { kurrentDbUrl?: string; sql: Sql }): Promise<EventStore> {
  if (options.kurrentDbUrl) return KurrentDbEventStore.open(options.kurrentDbUrl);
  return SqlEventStore.open(options.sql);
}
