/**
 * The form backend on {sdk_backend_address} (issue 4; docs/interface.md §4.4–4.5): the SDC operations, each
 * registered from its own file, and CORS exactly per docs/interface.md §4.5 for the web SDK.
 */
import Router from '@koa/router';
import type { Casebook } from '../../casebook.js';

/** An operation module adds its routes to the form-backend router. */
export type RegisterOperation = (router: Router, casebook: Casebook) => void;

/** Builds the form-backend router from its operations (mounted at the path of {sdk_backend_address}). */
export const sdcRouter = (
  casebook: Casebook,
  operations: readonly { readonly register: RegisterOperation }[],
): Router => {
  const router = new Router();
  for (const { register } of operations) register(router, casebook);
  return router;
};
