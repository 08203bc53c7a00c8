/**
 * What a subscription's receiver gets (issue 37; FHIR R5 subscription-notification Bundles,
 * docs/interface.md "Subscriptions"): the Bundle, built the same way for a delivery, a heartbeat,
 * a handshake and a `$events` or `$status` answer, and its signature header
 * `X-Casebook-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
 */
import { createHmac, randomUUID } from 'node:crypto';
import type { NotificationFocus } from '../../domain/subscription/subscription.js';

/** The header that carries the signature. */
export const SIGNATURE_HEADER = 'X-Casebook-Signature';

/**
 * The signature header value of `body` sent at `unixSeconds` with `secret`:
 * `t=<unixSeconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
 */
export const signatureHeader = (secret: string, unixSeconds: number, body: string): string =>
  `t=${unixSeconds},v1=${createHmac('sha256', secret).update(`${unixSeconds}.${body}`, 'utf8').digest('hex')}`;

/** One notification as sent: its number, when its change was recorded, its focus and maybe the resource. */
export interface NotificationEntry {
  readonly eventNumber: number;
  readonly timestamp: string;
  readonly focus: NotificationFocus;
  /** The focus resource (full-resource, and only where the owner may read it). */
  readonly resource?: Record<string, unknown> | undefined;
}

/** R5 SubscriptionStatus.type. */
export type NotificationType =
  | 'handshake'
  | 'heartbeat'
  | 'event-notification'
  | 'query-status'
  | 'query-event';

export interface NotificationBundleInput {
  /** {fhir_base_url}, for references. */
  readonly base: string;
  readonly subscriptionId: string;
  readonly topic: string;
  /** The Subscription's status as the SubscriptionStatus reports it. */
  readonly status: string;
  readonly type: NotificationType;
  readonly eventsSinceSubscriptionStart: number;
  /** `empty`: no focus; `id-only`: focus references only; `full-resource`: the resources too. */
  readonly content: 'empty' | 'id-only' | 'full-resource';
  readonly events: readonly NotificationEntry[];
  /** Bundle.timestamp (ISO 8601). */
  readonly now: string;
  readonly error?: string | undefined;
}

const focusUrl = (base: string, f: NotificationFocus) =>
  `${base}/${f.resourceType}/${f.id}/_history/${f.version}`;

/**
 * A `subscription-notification` Bundle (FHIR R5 subscriptions.html#notifications): first a
 * SubscriptionStatus, then for `id-only` an entry per focus with its fullUrl and no resource, for
 * `full-resource` the resources. integer64 elements (`eventNumber`,
 * `eventsSinceSubscriptionStart`) are JSON strings, as R5 writes them.
 */
export const notificationBundle = (input: NotificationBundleInput): Record<string, unknown> => {
  const withFocus = input.content !== 'empty';
  const status = {
    resourceType: 'SubscriptionStatus',
    status: input.status,
    type: input.type,
    eventsSinceSubscriptionStart: String(input.eventsSinceSubscriptionStart),
    ...(input.events.length > 0
      ? {
          notificationEvent: input.events.map((e) => ({
            eventNumber: String(e.eventNumber),
            timestamp: e.timestamp,
            ...(withFocus ? { focus: { reference: focusUrl(input.base, e.focus) } } : {}),
          })),
        }
      : {}),
    subscription: { reference: `${input.base}/Subscription/${input.subscriptionId}` },
    topic: input.topic,
    ...(input.error ? { error: [{ text: input.error }] } : {}),
  };
  const focusEntries = withFocus
    ? input.events.map((e) => ({
        fullUrl: focusUrl(input.base, e.focus),
        ...(input.content === 'full-resource' && e.resource ? { resource: e.resource } : {}),
      }))
    : [];
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'subscription-notification',
    timestamp: input.now,
    entry: [{ fullUrl: `urn:uuid:${randomUUID()}`, resource: status }, ...focusEntries],
  };
};
