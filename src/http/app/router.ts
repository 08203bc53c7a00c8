/**
 * The application host on {app_url} (issue 5; docs/interface.md §1.2–1.3, §3.2, §4.2): the launch entry point,
 * form selection, the report editor and its browser bundles. Errors thrown here become HTML error pages (src/http/app.ts).
 */
import Router from '@koa/router';
import type { Casebook } from '../../casebook.js';
import { sameOriginOnly } from '../edge/same-origin.js';
import { assets } from './assets.js';
import { ASSETS_PATH, serveAsset } from './assets-route.js';
import { postReport, showReport } from './editor.js';
import { chooseForm, formSelection } from './forms.js';
import { launch } from './launch.js';

/** Builds the router of the application host (mounted at the path of {app_url}). */
export const appRouter = (casebook: Casebook): Router => {
  const router = new Router();
  // Build the browser bundles now, in the background, so the first editor page does not wait for
  // esbuild; a failed build is logged by the page that needs it (assets-route.ts editorAssets).
  assets().catch(() => undefined);
  router.use(async (ctx, next) => {
    // Page URLs carry identifiers: no referrer to other sites (same-origin keeps the Origin header
    // of our own form posts, which the CSRF check reads).
    ctx.set('Referrer-Policy', 'same-origin');
    ctx.set('X-Content-Type-Options', 'nosniff');
    await next();
  });
  router.get(`${ASSETS_PATH}/:name`, serveAsset);
  // Every form post (and any other state-changing request) comes from the app's own pages.
  router.use(sameOriginOnly(new URL(casebook.config.appUrl).origin));
  router.get('/external/v1', (ctx) => launch(ctx, casebook));
  router.get('/tasks/:id/forms', (ctx) => formSelection(ctx, casebook));
  router.post('/tasks/:id/forms', (ctx) => chooseForm(ctx, casebook));
  router.get('/tasks/:id/report', (ctx) => showReport(ctx, casebook));
  router.post('/tasks/:id/report', (ctx) => postReport(ctx, casebook));
  return router;
};
