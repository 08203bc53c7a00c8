/**
 * A command context on a bare SQL event store (no projections, no HTTP), for tests of the command
 * handler and of what runs through it: it counts the events of each append.
 */
import { v4 as uuid } from 'uuid';
import type { CommandContext } from '../../src/commands/context.js';
import { execute } from '../../src/commands/handler.js';
import type { Sql } from '../../src/db/sql.js';
import {
  type Content,
  type ResourceType,
  resourceDecider,
  resourceStream,
} from '../../src/domain/fhir/resource.js';
import type { Actor, EventStore } from '../../src/eventstore/port.js';

/**
 * @param appends receives the number of events of every append, in order.
 * @returns a context at 2026-03-01T10:00Z with request id `req-1` unless `over` says otherwise.
 */
export const testCommandContext = (
  store: EventStore,
  sql: Sql,
  appends: number[],
  over: { tenantId?: number | null; actor?: Actor; requestId?: string | null } = {},
): CommandContext => ({
  store,
  sql,
  tenantId: over.tenantId === undefined ? 7 : over.tenantId,
  actor: over.actor ?? { type: 'system', id: 'handler-test' },
  correlationId: uuid(),
  causationId: null,
  requestId: over.requestId === undefined ? 'req-1' : over.requestId,
  now: new Date('2026-03-01T10:00:00.000Z'),
  afterAppend: async (_position, events) => {
    appends.push(events.length);
  },
});

/**
 * Creates the resource `type/id` through the command handler, past the HTTP API and its schemas
 * and without reserving its identifiers: as an older version of casebook, another tool or a
 * fixture would have written it.
 * @param options the tenant (default: the context's) and the command's time (default: the context's).
 * @returns what {@link execute} returned.
 */
export const createResourcePastApi = (
  ctx: CommandContext,
  type: ResourceType,
  id: number,
  resource: Content,
  options: { tenantId?: number; now?: string } = {},
) =>
  execute(ctx, (uow) =>
    uow.decide(
      resourceStream(type, id),
      resourceDecider(type),
      {
        type: 'CreateResource',
        id,
        tenantId: options.tenantId ?? ctx.tenantId!,
        resource,
        now: options.now ?? uow.now,
      },
      { fresh: true },
    ),
  );
