/**
 * The Koa app serving the hosts of DESIGN.md §1 under the paths of their public URLs.
 */

import Router from '@koa/router';
import Koa from 'koa';
import { koaBody } from 'koa-body';
import { v4 as uuidv4 } from 'uuid';
import type { Casebook } from '../casebook.js';
import { sessionsRouter } from './auth/sessions.js';
import { HttpError, sendProblem, toProblem } from './errors.js';

const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** The path part of a public base URL, '' for the root. */
const mountPath = (publicUrl: string): string => new URL(publicUrl).pathname.replace(/\/+$/, '');

/**
 * Builds the HTTP app. Logs one line per request: method, route path (no query string: it may
 * carry identifiers), status, duration, request id. Never request or response bodies.
 */
export const createHttpApp = (casebook: Casebook): Koa => {
  const app = new Koa();
  app.proxy = true;
  const { logger } = casebook;

  app.use(async (ctx, next) => {
    const started = performance.now();
    const given = ctx.get('X-Request-Id');
    ctx.state.requestId = REQUEST_ID.test(given) ? given : uuidv4();
    ctx.set('X-Request-Id', ctx.state.requestId);
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined)
        throw new HttpError(404, 'NotFound', `no route for ${ctx.method} ${ctx.path}`);
    } catch (error) {
      const problem = toProblem(error);
      if (problem) {
        if (error instanceof HttpError)
          for (const [name, value] of Object.entries(error.headers)) ctx.set(name, value);
        sendProblem(ctx, problem);
      } else {
        logger.error(
          { err: error, requestId: ctx.state.requestId, method: ctx.method, path: ctx.path },
          'request failed',
        );
        sendProblem(ctx, {
          status: 500,
          code: 'InternalError',
          detail: `internal error (request id ${ctx.state.requestId})`,
        });
      }
    } finally {
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

  app.use(
    koaBody({
      json: true,
      urlencoded: true,
      text: false,
      multipart: false,
      jsonLimit: '1mb',
      formLimit: '64kb',
    }),
  );

  const root = new Router();
  const auth = sessionsRouter(casebook);
  root.use(mountPath(casebook.config.authUrl), auth.routes(), auth.allowedMethods());
  root.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  app.use(root.routes());
  app.use(root.allowedMethods());
  return app;
};
