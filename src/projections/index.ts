import { auditEventsProjection } from './audit-events.js';
import { exportOutboxProjection } from './export-outbox.js';
import type { Projection } from './projection.js';
import { resourcesProjection } from './resources.js';
import { sessionsProjection } from './sessions.js';
import { subscriptionsProjection } from './subscriptions.js';
import { apiClientsProjection, tenantsProjection } from './tenants.js';

/**
 * `projection`, never given an erased event (docs/architecture.md "Erasure"): an event whose data
 * key was destroyed is applied as erased (left out, its position passed), never as an error, so a
 * replay rebuilds every read model without the erased patient.
 */
export const withoutErased = (projection: Projection): Projection => ({
  ...projection,
  apply: (events, tx, mode) =>
    projection.apply(events.some((e) => e.erased) ? events.filter((e) => !e.erased) : events, tx, mode),
});

/** Every read model, in the order the runner applies them. */
export const allProjections: readonly Projection[] = [
  tenantsProjection,
  apiClientsProjection,
  sessionsProjection,
  resourcesProjection,
  exportOutboxProjection,
  subscriptionsProjection,
  auditEventsProjection,
].map(withoutErased);
