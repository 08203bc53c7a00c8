/**
 * Reads of Subscriptions and their notifications (issue 37; docs/interface.md "Subscriptions"):
 * the read model for the Subscription itself, the log for what a notification carries — the
 * `$events` replay and a delivery read the same events, so a replay equals what was delivered.
 */
import type { Sql } from '../db/sql.js';
import type { Content } from '../domain/fhir/resource.js';
import { resourceStream } from '../domain/fhir/resource.js';
import {
  type DecidedNotification,
  type SubscriptionEvent,
  subscriptionStream,
} from '../domain/subscription/subscription.js';
import type { EventStore } from '../eventstore/port.js';
import { isAllowed, type Principal, targetOfContent } from '../fhir/access.js';
import { toFhirResource } from '../fhir/references.js';
import { parseScopeList } from '../fhir/scopes.js';
import { notificationRevisions, type SubscriptionRow } from '../projections/subscriptions.js';

export {
  readSubscriptions,
  type SubscriptionRow,
  subscriptionBacklog,
} from '../projections/subscriptions.js';

/** What reading notifications needs: the read model, the log and the API clients. */
export interface NotificationSources {
  readonly sql: Sql;
  readonly store: EventStore;
  readonly clients: {
    find(clientId: string): Promise<{ scopes: readonly string[]; projects: readonly string[] } | undefined>;
  };
}

/** One notification as sent or replayed: its number, time, focus and maybe the focus resource. */
export interface NotificationRead {
  readonly eventNumber: number;
  readonly timestamp: string;
  readonly focus: DecidedNotification['focus'];
  /** The focus version (full-resource payloads, and only where the owner may read it). */
  readonly resource?: Record<string, unknown> | undefined;
}

/**
 * The notifications `from`..`until` (event numbers, inclusive) of a subscription, read from its
 * stream in the log, with the focus resources where its payload is `full-resource` and its owner
 * (the API client that created it) may read them with its current scopes.
 */
export const readNotifications = async (
  sources: NotificationSources,
  row: SubscriptionRow,
  from: number,
  until: number,
): Promise<NotificationRead[]> => {
  if (until < from) return [];
  const revisions = await notificationRevisions(sources.sql, row.id, from, until);
  if (revisions.length === 0) return [];
  const first = Math.min(...revisions.map((r) => r.revision));
  const last = Math.max(...revisions.map((r) => r.revision));
  const events = await sources.store.readStream(subscriptionStream(row.id), {
    fromRevision: BigInt(first),
    maxCount: last - first + 1,
  });
  const decided = events
    .filter((e) => e.type === 'SubscriptionNotificationsDecided')
    .flatMap(
      (e) =>
        (e.data as Extract<SubscriptionEvent, { type: 'SubscriptionNotificationsDecided' }>['data'])
          .notifications,
    )
    .filter((n) => n.eventNumber >= from && n.eventNumber <= until)
    .sort((a, b) => a.eventNumber - b.eventNumber);
  const principal = row.resource.content === 'full-resource' ? await ownerPrincipal(sources, row) : undefined;
  const out: NotificationRead[] = [];
  for (const n of decided)
    out.push({
      eventNumber: n.eventNumber,
      timestamp: n.timestamp,
      focus: n.focus,
      ...(principal ? { resource: await focusResource(sources, principal, n) } : {}),
    });
  return out;
};

/** The owner's principal: its current scopes, tenant-wide (undefined when the client is gone). */
const ownerPrincipal = async (
  sources: NotificationSources,
  row: SubscriptionRow,
): Promise<Principal | undefined> => {
  const client = await sources.clients.find(row.owner);
  if (!client) return undefined;
  return {
    kind: 'client',
    tenantId: row.tenantId,
    actor: { type: 'client', id: row.owner },
    scopes: parseScopeList([...client.scopes]).scopes,
    projects: [...client.projects],
    patientId: null,
    userRef: null,
  };
};

/** The focus version as stored in the log, when the owner may read it; undefined otherwise. */
const focusResource = async (
  sources: NotificationSources,
  principal: Principal,
  n: DecidedNotification,
): Promise<Record<string, unknown> | undefined> => {
  const [event] = await sources.store.readStream(resourceStream(n.focus.resourceType, n.focus.id), {
    fromRevision: BigInt(n.focus.version - 1),
    maxCount: 1,
  });
  const data = event?.data as { resource?: Content; at?: string } | undefined;
  if (!event || !data?.resource) return undefined;
  if (!isAllowed(principal, 'r', targetOfContent(n.focus.resourceType, n.focus.id, data.resource, {})))
    return undefined;
  return toFhirResource(
    n.focus.resourceType,
    n.focus.id,
    n.focus.version,
    data.at ?? event.metadata.recordedAt,
    data.resource,
  );
};
