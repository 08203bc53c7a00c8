/**
 * HTTP Basic client credentials (docs/interface.md §5 rule 1, docs/architecture.md "Security"): `client_id:client_secret`, checked
 * against the salted hash in the API-client read model, in constant time, through the Casebook's
 * {@link CredentialGuard} (src/commands/credential-guard.ts): verified secrets are remembered for a
 * minute, concurrent checks of one secret share one scrypt, and repeated failures per claimed
 * client id or per client address are refused (429) without hashing.
 *
 * Uniform credential checks (issue 10): an unknown client id is verified against a dummy hash with
 * the same scrypt parameters, and throttled the same way, so "unknown client" and "wrong secret"
 * take the same time and client ids cannot be enumerated. Decoded credentials must be FHIR strings
 * (no NUL or other control characters), otherwise 401.
 */
import basicAuth from 'basic-auth';
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import type { ClientPrincipal } from '../../commands/sessions.js';
import { isFhirString } from '../../fhir/strings.js';
import { noteAgent } from '../audit.js';
import { HttpError } from '../errors.js';

const unauthorized = (message: string) =>
  new HttpError(401, 'InvalidClientCredentials', message, {
    'WWW-Authenticate': 'Basic realm="casebook", charset="UTF-8"',
  });

/**
 * Authenticates the request's API client, once per request: the edge may have done it before
 * reading the body (src/http/edge/authenticate.ts); a route asking again gets the same answer.
 * @throws {HttpError} 401 with `WWW-Authenticate: Basic` when credentials are missing or wrong;
 *   429 `TooManyFailedCredentials` with `Retry-After` (seconds) when the claimed client id or the
 *   client address failed too often in the last minute; 503 `CredentialChecksBusy` with
 *   `Retry-After` when too many checks are waiting (docs/interface.md §5 rule 1).
 */
export const authenticateClient = (ctx: Context, casebook: Casebook): Promise<ClientPrincipal> => {
  ctx.state.client ??= authenticate(ctx, casebook);
  return ctx.state.client as Promise<ClientPrincipal>;
};

const authenticate = async (ctx: Context, casebook: Casebook): Promise<ClientPrincipal> => {
  const header = ctx.get('Authorization');
  if (!header) throw unauthorized('client credentials are required (HTTP Basic client_id:client_secret)');
  const credentials = basicAuth(ctx.req);
  if (!credentials)
    throw unauthorized(
      'the Authorization header is not valid HTTP Basic: Basic base64(client_id:client_secret) is required',
    );
  if (!isFhirString(credentials.name) || !isFhirString(credentials.pass))
    throw unauthorized('the client credentials contain control characters or lone surrogates');
  const row = await casebook.clients.find(credentials.name);
  // A claimed client is the agent of the request's AuditEvent whatever the check finds: a refusal
  // is recorded under the tenant of the client it claimed to be, so that tenant's auditors find it
  // (agent = that client_id, outcome 4); an unknown client_id has no tenant.
  if (row) noteAgent(ctx, { kind: 'client', clientId: row.clientId }, row.tenantId);
  const check = await casebook.credentials.check(
    credentials.name,
    credentials.pass,
    row?.secretHash,
    ctx.ip ?? '',
  );
  if (check.kind === 'throttled')
    throw new HttpError(
      429,
      'TooManyFailedCredentials',
      `too many failed client credentials for this client or from this address; retry after ${check.retryAfterSeconds} s`,
      { 'Retry-After': String(check.retryAfterSeconds) },
    );
  if (check.kind === 'busy')
    throw new HttpError(
      503,
      'CredentialChecksBusy',
      'too many client credentials are being checked; retry shortly',
      {
        'Retry-After': String(check.retryAfterSeconds),
      },
    );
  if (check.kind === 'invalid' || !row) throw unauthorized('unknown client or wrong secret');
  return {
    clientId: row.clientId,
    tenantId: row.tenantId,
    scopes: [...row.scopes],
    projects: [...row.projects],
  };
};
