/**
 * The Koa app serving the hosts of docs/architecture.md "Processes and hosts" under the paths of their public URLs.
 */

import { randomUUID } from 'node:crypto';
import cors from '@koa/cors';
import Router from '@koa/router';
import Koa from 'koa';
import type { Casebook } from '../casebook.js';
import { ASSETS_PATH } from './app/assets-route.js';
import { sendErrorPage } from './app/error-page.js';
import { appRouter } from './app/router.js';
import { auditMiddleware } from './audit.js';
import { sessionsRouter } from './auth/sessions.js';
import { authenticateBeforeBody } from './edge/authenticate.js';
import { boundedBody } from './edge/body.js';
import { fhirStringRule } from './edge/strings.js';
import { HttpError, sendProblem, toProblem } from './errors.js';
import { sendOutcome, toOutcome } from './fhir/outcome.js';
import { fhirRouter } from './fhir/router.js';
import { launchRouter } from './launch/router.js';
import { opsRouter } from './ops.js';
import { SDC_OPERATIONS } from './sdc/operations.js';
import { sdcRouter } from './sdc/router.js';

const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** The path part of a public base URL, '' for the root. */
const mountPath = (publicUrl: string): string => new URL(publicUrl).pathname.replace(/\/+$/, '');

/**
 * Builds the HTTP app. Logs one line per request: method, route path (no query string: it may
 * carry identifiers), status, duration, request id. Never request or response bodies.
 */
export const createHttpApp = (casebook: Casebook): Koa => {
  const app = new Koa();
  // X-Forwarded-For is believed only from the configured proxies (TRUST_PROXY_HOPS, default none):
  // Koa then takes the address that many entries from the header's right end, which the nearest
  // trusted proxy wrote; anything a client put before it is ignored. Without proxies the socket's
  // peer is the address, so a client cannot forge its AuditEvent's source
  // (docs/architecture.md "Security").
  app.proxy = casebook.config.trustProxyHops > 0;
  app.maxIpsCount = casebook.config.trustProxyHops;
  const { logger } = casebook;
  const fhirPrefix = mountPath(casebook.config.fhirUrl);
  const sdcPrefix = mountPath(casebook.config.sdcUrl);
  const under = (prefix: string, path: string) => path === prefix || path.startsWith(`${prefix}/`);
  const isFhir = (path: string) => under(fhirPrefix, path) || under(sdcPrefix, path);
  const appPrefix = mountPath(casebook.config.appUrl);
  const launchPrefix = mountPath(casebook.config.launchUrl);
  // The launcher's pages (issue 6) answer errors as HTML pages too.
  const isApp = (path: string) => under(appPrefix, path) || under(launchPrefix, path);
  const authPrefix = mountPath(casebook.config.authUrl);
  const isHandover = (path: string) => path === `${authPrefix}/sessions/$handover`;
  /** A browser's navigation: `text/html` preferred over JSON by the Accept header. */
  const prefersHtml = (ctx: Koa.Context) =>
    ctx.accepts('application/problem+json', 'application/json', 'text/html') === 'text/html';
  // docs/interface.md §4.5: CORS for the web SDK on the data server and form backend: the app origin and
  // CORS_ORIGINS only, with credentials, these methods and headers; preflights answered.
  const corsOrigins = new Set([new URL(casebook.config.appUrl).origin, ...casebook.config.corsOrigins]);
  const corsMiddleware = cors({
    origin: (ctx) => (corsOrigins.has(ctx.get('Origin')) ? ctx.get('Origin') : ''),
    credentials: true,
    allowMethods: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS'],
    // Issue 13: what FHIR browser clients send (If-Match for version-aware updates, Prefer,
    // If-None-Exist for conditional creates, Medplum's X-Medplum) and read back.
    allowHeaders: [
      'Accept',
      'Authorization',
      'Content-Type',
      'If-Match',
      'If-Modified-Since',
      'If-None-Exist',
      'If-None-Match',
      'Prefer',
      'X-Medplum',
      'X-Request-Id',
    ],
    exposeHeaders: ['Content-Location', 'ETag', 'Last-Modified', 'Location', 'X-Request-Id'],
    maxAge: 600,
  });

  /**
   * Answers a failed request in its host's format: an OperationOutcome on the FHIR routes (issue 3),
   * readable HTML pages on the app host and the launcher (issue 5), problem+json elsewhere; with
   * the error's headers (`Retry-After` on a 503, `Allow` on a 405). An unexpected error is logged
   * (without request data) and answered 500; a 5xx the mapping knows (the database unreachable, a
   * read model stopped) is logged as a warning.
   */
  const answerError = (ctx: Koa.Context, error: unknown): void => {
    const problem = toProblem(error);
    const where = { err: error, requestId: ctx.state.requestId, method: ctx.method, path: ctx.path };
    if (!problem) logger.error(where, 'request failed');
    else if (problem.status >= 500) logger.warn(where, `request answered ${problem.status} ${problem.code}`);
    const internal = `internal error (request id ${ctx.state.requestId})`;
    for (const [name, value] of Object.entries(problem?.headers ?? {})) ctx.set(name, value);
    if (isFhir(ctx.path)) {
      const outcome = toOutcome(error);
      if (outcome?.location) ctx.set('Location', `${casebook.config.fhirUrl}/${outcome.location}`);
      if (outcome) sendOutcome(ctx, outcome.status, outcome.issues);
      else sendOutcome(ctx, 500, [{ severity: 'fatal', code: 'exception', diagnostics: internal }]);
    } else if (
      (isApp(ctx.path) && ctx.accepts('text/html', 'application/json') !== 'application/json') ||
      (isHandover(ctx.path) && prefersHtml(ctx))
    )
      // docs/interface.md §1.3: the editor's own fetches (Accept: application/json) get problem+json.
      // A clinician's browser reopening a used or expired handover link reads a page, not JSON
      // (issue 32); API clients (Accept: application/json) keep problem+json (docs/interface.md §4.1).
      sendErrorPage(ctx, problem?.status ?? 500, problem?.detail ?? internal, problem?.code);
    else sendProblem(ctx, problem ?? { status: 500, code: 'InternalError', detail: internal });
  };

  // Outermost: the AuditEvent sees the final status, and is in the log before the answer leaves.
  app.use(
    auditMiddleware(
      casebook,
      (path) =>
        (isFhir(path) && !path.endsWith('/metadata')) ||
        under(authPrefix, path) ||
        // The browser bundles are static code without data (src/http/app/assets-route.ts).
        (isApp(path) && !under(`${appPrefix}${ASSETS_PATH}`, path)),
      answerError,
    ),
  );

  app.use(async (ctx, next) => {
    const started = performance.now();
    const given = ctx.get('X-Request-Id');
    ctx.state.requestId = REQUEST_ID.test(given) ? given : randomUUID();
    ctx.set('X-Request-Id', ctx.state.requestId);
    try {
      await next();
      if (ctx.status === 404 && ctx.body == null)
        throw new HttpError(404, 'NotFound', `no route for ${ctx.method} ${ctx.path}`);
      if ((ctx.status === 405 || ctx.status === 501) && ctx.body == null)
        throw new HttpError(405, 'MethodNotAllowed', `${ctx.method} is not supported on ${ctx.path}`, {
          Allow: ctx.response.get('Allow'),
        });
    } catch (error) {
      answerError(ctx, error);
    } finally {
      const route = (ctx as { _matchedRoute?: unknown })._matchedRoute;
      const labels = {
        method: ctx.method,
        route: typeof route === 'string' ? route : 'unmatched',
        status: String(ctx.status),
      };
      casebook.metrics.httpRequests.inc(labels);
      casebook.metrics.httpDuration.observe(labels, (performance.now() - started) / 1000);
      logger.info(
        {
          requestId: ctx.state.requestId,
          method: ctx.method,
          path: ctx.path,
          status: ctx.status,
          ms: Math.round(performance.now() - started),
        },
        'request',
      );
    }
  });

  app.use((ctx, next) => (isFhir(ctx.path) ? corsMiddleware(ctx, next) : next()));

  // Issue 10: bounded body parsing and FHIR's string rule on everything a client sends — before
  // any route. The time budget of what a request makes casebook evaluate is the request's
  // EvaluationBudget (src/http/edge/budget.ts), passed by the routes that evaluate.
  // Credentials before a body: a request that cannot authenticate is refused before its body is
  // read (src/http/edge/authenticate.ts); the handover, which has no credentials, gets a small limit.
  app.use(
    authenticateBeforeBody(casebook, (ctx) => {
      if (isFhir(ctx.path)) return 'principal';
      if (ctx.path === `${authPrefix}/sessions`) return 'client';
      return under(authPrefix, ctx.path) ? 'small' : undefined;
    }),
  );
  app.use(boundedBody());
  app.use(fhirStringRule(isFhir));

  const root = new Router();
  const application = appRouter(casebook);
  root.use(appPrefix, application.routes(), application.allowedMethods());
  const launch = launchRouter(casebook);
  root.use(launchPrefix, launch.routes(), launch.allowedMethods());
  const auth = sessionsRouter(casebook);
  root.use(mountPath(casebook.config.authUrl), auth.routes(), auth.allowedMethods());
  // The form backend first: its `$operation` paths would otherwise match `/:type/:id`.
  const sdc = sdcRouter(casebook, SDC_OPERATIONS);
  root.use(sdcPrefix, sdc.routes());
  const fhir = fhirRouter(casebook);
  root.use(fhirPrefix, fhir.routes(), fhir.allowedMethods());
  // docs/interface.md §4.5: the SDK also reads Questionnaires and posts QuestionnaireResponses at the form backend.
  if (sdcPrefix !== fhirPrefix) root.use(sdcPrefix, fhir.routes(), fhir.allowedMethods());
  const ops = opsRouter(casebook);
  root.use(ops.routes(), ops.allowedMethods());
  app.use(root.routes());
  app.use(root.allowedMethods());
  return app;
};
