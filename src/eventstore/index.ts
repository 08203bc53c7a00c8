/**
 * The event store (docs/architecture.md "Event store"): the port and the choice of adapter.
 */
import type { Sql } from '../db/sql.js';
import type { EventStore } from './port.js';
import type { EventCodec } from './shredding/codec.js';
import { SqlEventStore } from './sql-event-store.js';

export * from './port.js';
export * from './sql-capability.js';
export { EVENTS_CHANNEL, SqlEventStore } from './sql-event-store.js';

/**
 * Opens the configured event store: KurrentDB when `kurrentDbUrl` is set (e.g.
 * `kurrentdb://localhost:2113?tls=false`), otherwise the SQL store on `sql` (postgres or pglite,
 * whichever `sql` is), creating its `es_` tables when missing. The caller still owns `sql` and
 * closes it after the store. The KurrentDB client (gRPC) is loaded only then: ~25 MB and a
 * fraction of a second of start-up that a process on the SQL stores does without. `codec`: what
 * the store keeps of each event's data (docs/architecture.md "Erasure").
 */
export async function openEventStore(options: {
  kurrentDbUrl?: string;
  sql: Sql;
  codec?: EventCodec;
}): Promise<EventStore> {
  const codec = options.codec ? { codec: options.codec } : {};
  if (options.kurrentDbUrl) {
    const { KurrentDbEventStore } = await import('./kurrentdb-event-store.js');
    return KurrentDbEventStore.open(options.kurrentDbUrl, codec);
  }
  return SqlEventStore.open(options.sql, codec);
}
