/**
 * Operational metrics (docs/architecture.md "Operations"), in Prometheus format through prom-client:
 * HTTP requests by route and status, appends, the state and lag of each projection, and the report
 * export. One registry per Casebook (tests open several in one process).
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

export interface Metrics {
  readonly registry: Registry;
  /** HTTP requests; `route` is the matched route pattern (never the raw path: ids, identifiers). */
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'method' | 'route' | 'status'>;
  /** Appends by the command handler, and the events they wrote. */
  readonly appends: Counter;
  readonly appendedEvents: Counter;
  /** Appends refused because a stream moved (each retry of a command counts). */
  readonly appendConflicts: Counter;
  /** 1 for the projection's current status (live, building, stopped), 0 for the others. */
  readonly projectionStatus: Gauge<'projection' | 'status'>;
  /** Events of the log a projection has not applied yet (0 when live inline). */
  readonly projectionLag: Gauge<'projection'>;
  /** Report deliveries by outcome (delivered, failed, abandoned) and sink. */
  readonly exportDeliveries: Counter<'outcome' | 'sink'>;
  /** Delivery attempts made. */
  readonly exportAttempts: Counter<'sink'>;
  /** Report versions waiting for delivery, and the age of the oldest, seconds. */
  readonly exportPending: Gauge;
  readonly exportOldestPendingSeconds: Gauge;
  /** Subscription requests by outcome: handshake, delivered, failed (issue 37). */
  readonly subscriptionDeliveries: Counter<'outcome'>;
  /** Seconds from a change being recorded to its notification's delivery. */
  readonly subscriptionDeliveryLagSeconds: Histogram;
  /** Notifications decided and not yet delivered, and the age of the oldest, seconds. */
  readonly subscriptionPending: Gauge;
  readonly subscriptionOldestPendingSeconds: Gauge;
  /** Subscriptions whose status is `error`. */
  readonly subscriptionsInError: Gauge;
  /** Client-secret checks by result: valid, invalid, throttled (429), busy (503). */
  readonly clientSecretChecks: Counter<'result'>;
  /** scrypt hashes run to check client secrets (concurrent checks of one secret share one). */
  readonly clientSecretHashes: Counter;
}

/** A fresh registry with casebook's metrics and the Node.js process defaults. */
export const createMetrics = (): Metrics => {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'casebook_' });
  const labels = ['method', 'route', 'status'] as const;
  return {
    registry,
    httpRequests: new Counter({
      name: 'casebook_http_requests_total',
      help: 'HTTP requests by method, route and status',
      labelNames: labels,
      registers: [registry],
    }),
    httpDuration: new Histogram({
      name: 'casebook_http_request_duration_seconds',
      help: 'HTTP request latency by method, route and status',
      labelNames: labels,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    appends: new Counter({
      name: 'casebook_appends_total',
      help: 'Atomic appends written by the command handler',
      registers: [registry],
    }),
    appendedEvents: new Counter({
      name: 'casebook_appended_events_total',
      help: 'Events written by the command handler',
      registers: [registry],
    }),
    appendConflicts: new Counter({
      name: 'casebook_append_conflicts_total',
      help: 'Appends refused because a stream moved first (each retry counts)',
      registers: [registry],
    }),
    projectionStatus: new Gauge({
      name: 'casebook_projection_status',
      help: 'Projection status: 1 for the current one (live, building, stopped)',
      labelNames: ['projection', 'status'],
      registers: [registry],
    }),
    projectionLag: new Gauge({
      name: 'casebook_projection_lag_events',
      help: 'Events of the log a projection has not applied yet',
      labelNames: ['projection'],
      registers: [registry],
    }),
    exportDeliveries: new Counter({
      name: 'casebook_export_deliveries_total',
      help: 'Report delivery outcomes by sink',
      labelNames: ['outcome', 'sink'],
      registers: [registry],
    }),
    exportAttempts: new Counter({
      name: 'casebook_export_attempts_total',
      help: 'Report delivery attempts by sink',
      labelNames: ['sink'],
      registers: [registry],
    }),
    clientSecretChecks: new Counter({
      name: 'casebook_client_secret_checks_total',
      help: 'Client-secret checks by result (valid, invalid, throttled, busy)',
      labelNames: ['result'],
      registers: [registry],
    }),
    clientSecretHashes: new Counter({
      name: 'casebook_client_secret_hashes_total',
      help: 'scrypt hashes run to check client secrets',
      registers: [registry],
    }),
    exportPending: new Gauge({
      name: 'casebook_export_pending',
      help: 'Report versions waiting for delivery',
      registers: [registry],
    }),
    exportOldestPendingSeconds: new Gauge({
      name: 'casebook_export_oldest_pending_seconds',
      help: 'Age of the oldest report version waiting for delivery, seconds',
      registers: [registry],
    }),
    subscriptionDeliveries: new Counter({
      name: 'casebook_subscription_deliveries_total',
      help: 'Subscription requests by outcome (handshake, delivered, failed)',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    subscriptionDeliveryLagSeconds: new Histogram({
      name: 'casebook_subscription_delivery_lag_seconds',
      help: 'Seconds from a change being recorded to the delivery of its notification',
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800],
      registers: [registry],
    }),
    subscriptionPending: new Gauge({
      name: 'casebook_subscription_pending',
      help: 'Subscription notifications decided and not yet delivered',
      registers: [registry],
    }),
    subscriptionOldestPendingSeconds: new Gauge({
      name: 'casebook_subscription_oldest_pending_seconds',
      help: 'Age of the oldest undelivered subscription notification, seconds',
      registers: [registry],
    }),
    subscriptionsInError: new Gauge({
      name: 'casebook_subscriptions_in_error',
      help: 'Subscriptions whose status is error (their endpoint has failed longer than SUBSCRIPTION_ERROR_AFTER)',
      registers: [registry],
    }),
  };
};
