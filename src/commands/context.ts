/**
 * What every command runs with: the event store, the metadata of its cause (tenant, actor,
 * correlation), the time it was decided at, and what follows an append (docs/architecture.md).
 */

import type { Sql } from '../db/sql.js';
import type { Event } from '../domain/decider.js';
import { newId } from '../domain/ids.js';
import type { Actor, EventMetadata, EventStore, NewEvent, Position } from '../eventstore/port.js';
import type { IdentifierNaming } from './identifier-naming.js';

export interface CommandContext {
  readonly store: EventStore;
  /** The read-model database (id sequences live there). */
  readonly sql: Sql;
  readonly tenantId: number | null;
  readonly actor: Actor;
  readonly correlationId: string;
  readonly causationId: string | null;
  readonly requestId: string | null;
  /** The command's time: deciders get it as an ISO-8601 string. */
  readonly now: Date;
  /**
   * Runs after every successful append of the command handler: waits until the read models have
   * applied `position` (read-your-writes; immediate when projections run inline), and throws
   * ReadModelUnavailable when these events stopped a read model (stored, but not readable).
   */
  readonly afterAppend: (position: Position, events: readonly NewEvent[]) => Promise<void>;
  /** Told when an append conflicted with a concurrent one and the command runs again (metrics). */
  readonly onConflict?: () => void;
  /**
   * How identifier reservation streams are named (src/commands/identifier-naming.ts; keyed in a
   * store created with it); absent: unkeyed, as a store from before.
   */
  readonly identifiers?: IdentifierNaming;
}

/** Wraps domain events for appending: a fresh UUID each and the context's metadata. */
export const toNewEvents = (
  ctx: CommandContext,
  events: readonly Event[],
  tenantId = ctx.tenantId,
): NewEvent[] => {
  const metadata: EventMetadata = {
    tenantId,
    actor: ctx.actor,
    correlationId: ctx.correlationId,
    causationId: ctx.causationId,
    requestId: ctx.requestId,
    recordedAt: ctx.now.toISOString(),
  };
  // UUIDv7: time-ordered, so the unique index on event ids grows at its right edge instead of
  // touching a random page per event (the same for AuditEvent ids and audit streams).
  return events.map((event) => ({ id: newId(), type: event.type, data: event.data, metadata }));
};

export { allocateId, ID_SEQUENCES, type IdKind, migrateSequences, sequenceName } from '../db/sequences.js';
