/**
 * What every command runs with: the event store, the metadata of its cause (tenant, actor,
 * correlation), the time it was decided at, and the read-your-writes wait (DESIGN.md §2).
 */
import { v4 as uuidv4 } from 'uuid';
import type { Sql } from '../db/sql.js';
import type { Event } from '../domain/decider.js';
import type { Actor, EventMetadata, EventStore, NewEvent, Position } from '../eventstore/port.js';

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
   * Waits until the projections have applied `position` (bounded; DESIGN.md §2 read-your-writes).
   * Resolves false when the bound passed first; the events are stored either way.
   */
  readonly waitForProjections: (position: Position) => Promise<boolean>;
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
  return events.map((event) => ({ id: uuidv4(), type: event.type, data: event.data, metadata }));
};

/** Id sequences (DESIGN.md §2 "Ids"): integer ids of sessions, tenants and FHIR resources. */
export const ID_SEQUENCES = [
  'tenant',
  'session',
  'Patient',
  'Encounter',
  'Practitioner',
  'Task',
  'Questionnaire',
  'QuestionnaireResponse',
  'ValueSet',
] as const;
export type IdKind = (typeof ID_SEQUENCES)[number];

export const sequenceName = (kind: IdKind): string => `casebook_${kind.toLowerCase()}_id_seq`;

/** Creates the id sequences if missing. Sequences are not read models: replay never drops them. */
export const migrateSequences = async (sql: Sql): Promise<void> => {
  for (const kind of ID_SEQUENCES) await sql.exec(`CREATE SEQUENCE IF NOT EXISTS ${sequenceName(kind)}`);
};

/** Allocates the next integer id of `kind` from its Postgres sequence. */
export const allocateId = async (sql: Sql, kind: IdKind): Promise<number> => {
  const rows = await sql.query<{ id: string }>(`SELECT nextval('${sequenceName(kind)}')::text AS id`);
  return Number(rows[0]!.id);
};
