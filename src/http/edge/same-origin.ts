/**
 * Cross-site request forgery check of the hosts whose forms a browser posts with the session
 * cookie (the app host; docs/interface.md §4.2, docs/architecture.md "Security"). The cookie is
 * SameSite=Strict, so another site's page cannot send it; this is the second lock, for browsers or
 * proxies that get SameSite wrong: a state-changing request must show that it comes from the host's
 * own pages.
 *
 * - `Origin` present (every current browser sends it on a POST): it must be the host's origin.
 * - `Origin` absent: `Sec-Fetch-Site` must say `same-origin` or `same-site`.
 * - Neither: refused. A browser always sends one of them; a request with neither is not a form
 *   post of the host's pages.
 */
import type { Middleware } from 'koa';
import { DomainError } from '../../domain/decider.js';

/** Methods that change nothing (RFC 9110 safe methods): never checked. */
const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

/** `Sec-Fetch-Site` values of a request from the host's own site. */
const SAME_SITE = new Set(['same-origin', 'same-site']);

/**
 * Whether a request with these headers may change state on a host at `origin`.
 * @param headerOrigin the `Origin` header ('' when absent).
 * @param fetchSite the `Sec-Fetch-Site` header ('' when absent).
 */
export const isSameOriginRequest = (origin: string, headerOrigin: string, fetchSite: string): boolean =>
  headerOrigin !== '' ? headerOrigin === origin : SAME_SITE.has(fetchSite.trim().toLowerCase());

/**
 * Koa middleware refusing a state-changing request (any method but GET, HEAD, OPTIONS) that does
 * not come from `origin`'s own pages ({@link isSameOriginRequest}).
 * @throws {DomainError} 403 `CrossSiteRequest`, before the route reads the session or the form.
 */
export const sameOriginOnly =
  (origin: string): Middleware =>
  async (ctx, next) => {
    if (!SAFE.has(ctx.method) && !isSameOriginRequest(origin, ctx.get('Origin'), ctx.get('Sec-Fetch-Site')))
      throw new DomainError(
        'forbidden',
        'CrossSiteRequest',
        'this form may only be sent from the application itself (Origin or Sec-Fetch-Site must name it)',
      );
    await next();
  };
