/**
 * Credentials before a request body (docs/architecture.md "Security"): on the data server, the form
 * backend and the session interface's `POST /sessions`, a request with a body is authenticated
 * before casebook reads and parses it. Without this, a request with no or wrong credentials had
 * its body (up to 1 MiB of JSON) read and parsed before the route answered 401: 150 such requests
 * at once cost the server 21 s of work and 1.4 GB of memory, and enough of them could exhaust it.
 *
 * The route then gets the same principal ({@link resolvePrincipal}, {@link authenticateClient}
 * answer once per request). The session interface's handover takes a token in its body and no
 * credentials: its JSON body is held to the form limit (64 KiB) instead, as it carries two short
 * fields.
 */
import type { Context, Middleware } from 'koa';
import type { Casebook } from '../../casebook.js';
import { authenticateClient } from '../auth/client-auth.js';
import { resolvePrincipal } from '../fhir/principal.js';
import { hasBody, MAX_FORM_BODY_BYTES } from './body.js';

/**
 * The middleware, placed before {@link boundedBody}.
 * @param hosts which paths need what: `principal` (a client or a session: the data server and form
 *   backend), `client` (an API client: `POST /sessions`), `small` (no credentials, a body of at most
 *   64 KiB: the handover), or undefined (the route decides).
 * @throws {HttpError} 401 as the route would, before the body is read.
 */
export const authenticateBeforeBody =
  (casebook: Casebook, hosts: (ctx: Context) => 'principal' | 'client' | 'small' | undefined): Middleware =>
  async (ctx, next) => {
    if (!hasBody(ctx)) return next();
    switch (hosts(ctx)) {
      case 'principal':
        await resolvePrincipal(ctx, casebook);
        break;
      case 'client':
        await authenticateClient(ctx, casebook);
        break;
      case 'small':
        ctx.state.bodyLimit = MAX_FORM_BODY_BYTES;
        break;
    }
    return next();
  };
