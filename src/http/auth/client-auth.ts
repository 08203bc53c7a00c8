/**
 * HTTP Basic client credentials (docs/interface.md §5 rule 1, docs/architecture.md "Security"): `client_id:client_secret`, checked
 * against the salted hash in the API-client read model, in constant time. Verified pairs are
 * remembered briefly (keyed by a SHA-256 of the secret and the stored hash) so scrypt does not run
 * on every request; rotating the secret changes the stored hash and so invalidates the entry.
 *
 * Uniform credential checks (issue 10): an unknown client id is verified against a dummy hash with
 * the same scrypt parameters, so "unknown client" and "wrong secret" take the same time and client
 * ids cannot be enumerated by timing. Decoded credentials must be FHIR strings (no NUL or other
 * control characters), otherwise 401.
 */
import basicAuth from 'basic-auth';
import type { Context } from 'koa';
import { hashSecret, hashToken, randomToken, verifySecret } from '../../commands/secrets.js';
import type { ClientPrincipal } from '../../commands/sessions.js';
import { isFhirString } from '../../fhir/strings.js';
import type { ApiClientDirectory } from '../../queries/api-clients.js';
import { noteAgent } from '../audit.js';
import { HttpError } from '../errors.js';

const CACHE_TTL_MS = 60_000;
const CACHE_MAX = 1000;
const verified = new Map<string, number>();

let dummyHash: Promise<string> | undefined;
/** A hash of a random secret nobody knows, made once, for unknown client ids. */
const dummySecretHash = (): Promise<string> => {
  dummyHash ??= hashSecret(randomToken());
  return dummyHash;
};

const unauthorized = (message: string) =>
  new HttpError(401, 'InvalidClientCredentials', message, {
    'WWW-Authenticate': 'Basic realm="casebook", charset="UTF-8"',
  });

/**
 * Authenticates the request's API client, once per request: the edge may have done it before
 * reading the body (src/http/edge/authenticate.ts); a route asking again gets the same answer.
 * @throws {HttpError} 401 with `WWW-Authenticate: Basic` when credentials are missing or wrong.
 */
export const authenticateClient = (ctx: Context, clients: ApiClientDirectory): Promise<ClientPrincipal> => {
  ctx.state.client ??= authenticate(ctx, clients);
  return ctx.state.client as Promise<ClientPrincipal>;
};

const authenticate = async (ctx: Context, clients: ApiClientDirectory): Promise<ClientPrincipal> => {
  const header = ctx.get('Authorization');
  if (!header) throw unauthorized('client credentials are required (HTTP Basic client_id:client_secret)');
  const credentials = basicAuth(ctx.req);
  if (!credentials)
    throw unauthorized(
      'the Authorization header is not valid HTTP Basic: Basic base64(client_id:client_secret) is required',
    );
  if (!isFhirString(credentials.name) || !isFhirString(credentials.pass))
    throw unauthorized('the client credentials contain control characters or lone surrogates');
  const row = await clients.find(credentials.name);
  if (!row) {
    await verifySecret(credentials.pass, await dummySecretHash());
    throw unauthorized('unknown client or wrong secret');
  }
  const key = `${row.clientId}:${hashToken(credentials.pass)}:${row.secretHash}`;
  const cachedAt = verified.get(key);
  if (cachedAt === undefined || Date.now() - cachedAt > CACHE_TTL_MS) {
    if (!(await verifySecret(credentials.pass, row.secretHash))) {
      // The refusal is recorded under the tenant of the client it claimed to be, so that tenant's
      // auditors find it (agent = that client_id, outcome 4); an unknown client_id has no tenant.
      noteAgent(ctx, { kind: 'client', clientId: row.clientId }, row.tenantId);
      throw unauthorized('unknown client or wrong secret');
    }
    if (verified.size >= CACHE_MAX) verified.clear();
    verified.set(key, Date.now());
  }
  noteAgent(ctx, { kind: 'client', clientId: row.clientId }, row.tenantId);
  return {
    clientId: row.clientId,
    tenantId: row.tenantId,
    scopes: [...row.scopes],
    projects: [...row.projects],
  };
};
