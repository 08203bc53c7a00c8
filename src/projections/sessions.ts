/** Read model of sessions (docs/interface.md §2.4): `rm_sessions`, looked up by id and by cookie hash. */

import { bumpSequence } from '../db/sequences.js';
import type { SessionCreatedData, SessionEvent } from '../domain/session/session.js';
import type { PendingEvent } from '../eventstore/port.js';
import { type ApplyColumn, applyCall, migrateReadModel, type Projection, rowsParam } from './projection.js';

/** The state of one session after a batch. */
export interface SessionRowChange {
  id: number;
  revision: number;
  /** The creation, when the batch holds it: the row is inserted when missing. */
  created: SessionCreatedData | null;
  status: 'inactive' | 'active' | 'ended';
  cookie_hash: string | null;
  last_modified_at: string;
}

/**
 * Folds a batch of session events into the last state of each session it touches (pure: the
 * rows the apply functions write). An event at or below a revision the batch holds is skipped.
 */
export const foldSessions = (events: readonly PendingEvent[]): SessionRowChange[] => {
  const rows = new Map<number, SessionRowChange>();
  for (const event of events) {
    const e = { type: event.type, data: event.data } as SessionEvent;
    const id = e.data.sessionId;
    const revision = Number(event.revision);
    const previous = rows.get(id);
    if (previous && revision <= previous.revision) continue;
    switch (e.type) {
      case 'SessionCreated':
        rows.set(id, {
          id,
          revision,
          created: e.data,
          status: 'inactive',
          cookie_hash: null,
          last_modified_at: e.data.createdAt,
        });
        break;
      case 'SessionHandedOver':
        rows.set(id, {
          id,
          revision,
          created: previous?.created ?? null,
          status: 'active',
          cookie_hash: e.data.cookieHash,
          last_modified_at: e.data.at,
        });
        break;
      case 'SessionEnded':
        rows.set(id, {
          id,
          revision,
          created: previous?.created ?? null,
          status: 'ended',
          cookie_hash: null,
          last_modified_at: e.data.at,
        });
        break;
    }
  }
  return [...rows.values()];
};

const SESSION_EVENTS = new Set(['SessionCreated', 'SessionHandedOver', 'SessionEnded']);

// Creations are inserted (or update an older row); other changes update rows below their revision.
// A function, so that an append can run it in its own statement (Projection.inline). One body,
// rm_sessions_write, behind two entry points (src/projections/sql/sessions/002_one_body.sql), as
// rm_resources_apply: a small batch reaches its rows by key, not by the scan of rm_sessions the
// planner prefers while it takes the batch for 100 rows; a rebuild's large pages go to
// rm_sessions_apply_bulk.
const APPLY_FUNCTION = 'rm_sessions_apply';
/**
 * The columns of a {@link SessionRowChange} as the apply functions take them: the attributes of
 * the SQL type `rm_sessions_change`, and the bulk function's parameters, in this order (a test
 * holds both to it).
 */
export const APPLY_COLUMNS: readonly ApplyColumn[] = [
  { name: 'id', type: 'integer' },
  { name: 'revision', type: 'integer' },
  { name: 'created', type: 'json' },
  { name: 'status', type: 'text' },
  { name: 'cookie_hash', type: 'text' },
  { name: 'last_modified_at', type: 'timestamptz' },
];

export const sessionsProjection: Projection = {
  name: 'sessions',
  tables: ['rm_sessions'],
  migrate: (sql) => migrateReadModel(sql, 'sessions'),
  handles: (type) => SESSION_EVENTS.has(type),
  inline: {
    function: APPLY_FUNCTION,
    argument: (events) => {
      const rows = foldSessions(events);
      return rows.length === 0 ? undefined : rowsParam(rows);
    },
  },
  apply: async (events, tx, mode) => {
    const rows = foldSessions(events);
    if (rows.length === 0) return;
    const call = applyCall(APPLY_FUNCTION, APPLY_COLUMNS, rows);
    await tx.query(call.text, call.values);
    if (mode === 'catch-up') {
      const highest = Math.max(0, ...rows.filter((r) => r.created).map((r) => r.id));
      if (highest > 0) await bumpSequence(tx, 'session', highest);
    }
  },
};
