/** Events as tests append them straight to a store, with the metadata a command would record. */
import { v4 as uuid } from 'uuid';
import type { NewEvent, RecordedEvent } from '../../src/eventstore/port.js';

/**
 * A new event of `type` with `data`, recorded by the system actor `test` in tenant 1 at
 * `recordedAt` (default 2026-03-01T10:00Z), with a fresh id and correlation id.
 */
export const testEvent = (
  type: string,
  data: unknown,
  over: { recordedAt?: string; actorId?: string } = {},
): NewEvent => ({
  id: uuid(),
  type,
  data,
  metadata: {
    tenantId: 1,
    actor: { type: 'system', id: over.actorId ?? 'test' },
    correlationId: uuid(),
    causationId: null,
    requestId: null,
    recordedAt: over.recordedAt ?? '2026-03-01T10:00:00.000Z',
  },
});

let position = 0n;

/**
 * A {@link testEvent} as a store would give it back: in `stream` at `revision`, positioned after
 * every recorded event this helper made before (the order a catch-up reads).
 */
export const testRecordedEvent = (
  type: string,
  stream: string,
  revision: number | bigint,
  data: unknown,
  over: { recordedAt?: string } = {},
): RecordedEvent => {
  position += 1n;
  return {
    ...testEvent(type, data, over),
    streamName: stream,
    revision: BigInt(revision),
    position: { commit: position, prepare: position },
  };
};
