/**
 * Who calls the data server (issue 3 "Authentication"): `Authorization: Basic` client credentials
 * (governed by the client's own scopes, docs/interface.md §5 rule 4) or the `auth_session` cookie (governed by
 * the session's stored v2 scopes, docs/interface.md §5.3 rule 1).
 */
import { parseCookie } from 'cookie';
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import type { ClientPrincipal } from '../../commands/sessions.js';
import type { Principal } from '../../fhir/access.js';
import { parseScopeList, type ResourceScope } from '../../fhir/scopes.js';
import type { SessionRow } from '../../queries/sessions.js';
import { authenticateClient } from '../auth/client-auth.js';
import { SESSION_COOKIE, sessionFromCookie } from '../auth/sessions.js';
import { HttpError } from '../errors.js';

/**
 * An API client's own scopes, with Questionnaire access made explicit: a `*` scope grants the
 * same permissions on the Questionnaires of the client's projects (docs/interface.md §5.3 rule 3), so
 * `system/*.*` can also create and maintain its projects' Questionnaires.
 */
export const clientScopes = (scopes: readonly string[], projects: readonly string[]): ResourceScope[] => {
  const parsed = parseScopeList([...scopes]).scopes;
  const questionnaires = parsed
    .filter((s) => s.resourceType === '*')
    .flatMap((s) =>
      projects.map(
        (project): ResourceScope => ({
          context: s.context,
          resourceType: 'Questionnaire',
          permissions: [...s.permissions],
          filters: [['project', project]],
        }),
      ),
    );
  return [...parsed, ...questionnaires];
};

/** A session's principal: its stored v2 scopes, patient compartment and user (docs/interface.md §5.3 rule 1). */
export const sessionPrincipal = async (casebook: Casebook, session: SessionRow): Promise<Principal> => {
  const client = await casebook.clients.find(session.clientId);
  return {
    kind: 'session',
    tenantId: session.tenantId,
    actor: { type: 'session', id: String(session.id) },
    scopes: parseScopeList(session.scopes).scopes,
    projects: [...(client?.projects ?? [])],
    patientId: session.patientId,
    userRef: `Practitioner/${session.userId}`,
  };
};

/** Distinct clients whose parsed scopes are remembered (cleared when full). */
const SCOPE_CACHE_MAX = 1000;
const parsedClientScopes = new Map<string, readonly ResourceScope[]>();

/** Deeply frozen: one parse is shared by every request of the client, and nobody may change it. */
const frozen = (scopes: ResourceScope[]): readonly ResourceScope[] => {
  for (const scope of scopes) {
    Object.freeze(scope.permissions);
    for (const filter of scope.filters) Object.freeze(filter);
    Object.freeze(scope.filters);
    Object.freeze(scope);
  }
  return Object.freeze(scopes);
};

/**
 * {@link clientScopes}, parsed once per distinct scopes and projects (every request of an API client
 * needs them; a changed client, with other scopes or projects, is another key).
 */
const cachedClientScopes = (
  scopes: readonly string[],
  projects: readonly string[],
): readonly ResourceScope[] => {
  const key = `${scopes.join(' ')}\u0000${projects.join('\u0000')}`;
  let parsed = parsedClientScopes.get(key);
  if (parsed === undefined) {
    if (parsedClientScopes.size >= SCOPE_CACHE_MAX) parsedClientScopes.clear();
    parsed = frozen(clientScopes(scopes, projects));
    parsedClientScopes.set(key, parsed);
  }
  return parsed;
};

/** An API client's principal: its own scopes, tenant-wide (docs/interface.md §5 rule 4). */
export const clientPrincipal = (client: ClientPrincipal): Principal => ({
  kind: 'client',
  tenantId: client.tenantId,
  actor: { type: 'client', id: client.clientId },
  scopes: cachedClientScopes(client.scopes, client.projects),
  projects: client.projects,
  patientId: null,
  userRef: null,
});

/**
 * Resolves the caller, once per request: the edge resolves it before reading a request body
 * (src/http/edge/authenticate.ts), the route then gets the same answer.
 * @throws {HttpError} 401 without credentials or with an invalid cookie; wrong client credentials.
 */
export const resolvePrincipal = (ctx: Context, casebook: Casebook): Promise<Principal> => {
  ctx.state.principal ??= resolve(ctx, casebook);
  return ctx.state.principal as Promise<Principal>;
};

const resolve = async (ctx: Context, casebook: Casebook): Promise<Principal> => {
  if (ctx.get('Authorization')) return clientPrincipal(await authenticateClient(ctx, casebook));
  if (parseCookie(ctx.get('Cookie'))[SESSION_COOKIE]) {
    return sessionPrincipal(casebook, await sessionFromCookie(ctx, casebook));
  }
  throw new HttpError(
    401,
    'AuthenticationRequired',
    'authenticate with HTTP Basic client credentials or the auth_session cookie',
    {
      'WWW-Authenticate': 'Basic realm="casebook", charset="UTF-8"',
    },
  );
};
