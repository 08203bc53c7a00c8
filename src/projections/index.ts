import { auditEventsProjection } from './audit-events.js';
import { exportOutboxProjection } from './export-outbox.js';
import type { Projection } from './projection.js';
import { resourcesProjection } from './resources.js';
import { sessionsProjection } from './sessions.js';
import { subscriptionsProjection } from './subscriptions.js';
import { apiClientsProjection, tenantsProjection } from './tenants.js';

/** Every read model, in the order the runner applies them. */
export const allProjections: readonly Projection[] = [
  tenantsProjection,
  apiClientsProjection,
  sessionsProjection,
  resourcesProjection,
  exportOutboxProjection,
  subscriptionsProjection,
  auditEventsProjection,
];
