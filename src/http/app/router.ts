/**
 * The application host on {app_url} (issue 5; spec §1.2–1.3, §3.2, §4.2): the launch entry point,
 * form selection and the report editor.
 */
import Router from '@koa/router';
import type { Casebook } from '../../casebook.js';

/** Builds the router of the application host (mounted at the path of {app_url}). */
export const appRouter = (_casebook: Casebook): Router => new Router();
