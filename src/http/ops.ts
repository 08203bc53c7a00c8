/**
 * Operations endpoints (docs/architecture.md "Operations"): `/healthz` (the process answers),
 * `/readyz` (the store answers and every read model is current: 503 otherwise, naming what is
 * wrong), `/metrics` (Prometheus text; with METRICS_TOKEN set, only for `Authorization: Bearer <it>`).
 * None of them shows patient data: a stopped projection is named with its event's position,
 * stream, id, type and error message.
 */
import { timingSafeEqual } from 'node:crypto';
import Router from '@koa/router';
import type { Casebook } from '../casebook.js';
import { positionToString } from '../eventstore/port.js';
import { HttpError } from './errors.js';

/** How long the store may take to answer the readiness check, milliseconds. */
const STORE_CHECK_TIMEOUT_MS = 2000;

const within = <T>(promise: Promise<T>, ms: number): Promise<T> =>
  Promise.race([
    promise,
    new Promise<T>((_, reject) =>
      setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms).unref(),
    ),
  ]);

/** The readiness of casebook: what /readyz answers, and what /metrics reports of the projections. */
export const readiness = async (casebook: Casebook) => {
  const store = await within(casebook.store.headPosition(), STORE_CHECK_TIMEOUT_MS).then(
    (head) => ({ ok: true as const, kind: casebook.store.kind, head: head ? positionToString(head) : null }),
    (error: unknown) => ({
      ok: false as const,
      kind: casebook.store.kind,
      error: error instanceof Error ? error.message : String(error),
    }),
  );
  const states = await casebook.runner.states();
  const lag = await casebook.runner.lag(states);
  const projections = states.map((s) => ({
    name: s.name,
    status: s.status,
    lag: lag.get(s.name) ?? null,
    ...(s.checkpoint ? { checkpoint: positionToString(s.checkpoint) } : {}),
    ...(s.failure ? { failure: s.failure } : {}),
  }));
  for (const state of states)
    for (const status of ['live', 'building', 'stopped'])
      casebook.metrics.projectionStatus.set(
        { projection: state.name, status },
        state.status === status ? 1 : 0,
      );
  for (const [name, events] of lag)
    if (events !== undefined) casebook.metrics.projectionLag.set({ projection: name }, events);
  const exporter = (await casebook.exporter?.health()) ?? null;
  const ready = store.ok && states.every((s) => s.status === 'live');
  return { ready, store, projections, ...(exporter ? { export: exporter } : {}) };
};

/** The operations router (mounted at the root). */
export const opsRouter = (casebook: Casebook): Router => {
  const router = new Router();
  router.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  router.get('/readyz', async (ctx) => {
    const { ready, ...checks } = await readiness(casebook);
    ctx.set('Cache-Control', 'no-store');
    ctx.status = ready ? 200 : 503;
    ctx.body = { status: ready ? 'ready' : 'not ready', ...checks };
  });
  router.get('/metrics', async (ctx) => {
    const token = casebook.config.metricsToken;
    if (token) {
      const given = Buffer.from(ctx.get('Authorization'));
      const expected = Buffer.from(`Bearer ${token}`);
      if (given.length !== expected.length || !timingSafeEqual(given, expected))
        throw new HttpError(401, 'MetricsTokenRequired', 'send Authorization: Bearer <METRICS_TOKEN>', {
          'WWW-Authenticate': 'Bearer realm="casebook-metrics"',
        });
    }
    await readiness(casebook).catch(() => undefined);
    // Subscription delivery lag and failures (issue 37), from the read model.
    await casebook.notifier?.health().catch(() => undefined);
    ctx.set('Cache-Control', 'no-store');
    ctx.type = casebook.metrics.registry.contentType;
    ctx.body = await casebook.metrics.registry.metrics();
  });
  return router;
};
