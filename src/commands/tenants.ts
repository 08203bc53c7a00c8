/**
 * Data tenants and API clients as event-sourced aggregates (issue 2 §4), used by the seed file,
 * the CLI and the demo bootstrap.
 */

import { allocateId } from '../db/sequences.js';
import { CLIENT_ID_PATTERN, clientDecider, clientStream } from '../domain/client/client.js';
import { DomainError } from '../domain/decider.js';
import { reservationDecider, reservationStream, tenantNameKey } from '../domain/reservation/reservation.js';
import { type TenantSettings, tenantDecider, tenantStream } from '../domain/tenant/tenant.js';
import { parseScopeList, ScopeSyntaxError } from '../fhir/scopes.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';
import { hashSecret, verifySecret } from './secrets.js';

export interface TenantInput extends TenantSettings {
  readonly name: string;
}

/** Normalises an origin (`https://host[:port]`). @throws {DomainError} invalid. */
export const normaliseOrigin = (origin: string, field: string): string => {
  let parsed: URL;
  try {
    parsed = new URL(origin);
  } catch {
    throw new DomainError(
      'invalid',
      'InvalidOrigin',
      `${field}: ${JSON.stringify(origin)} is not an origin URL`,
      field,
    );
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:')
    throw new DomainError(
      'invalid',
      'InvalidOrigin',
      `${field}: only http and https origins are allowed`,
      field,
    );
  return parsed.origin;
};

/** Checks scope text (v1 or v2) and returns the tokens. @throws {DomainError} invalid. */
export const validateScopes = (scopes: readonly string[], field: string): string[] => {
  try {
    parseScopeList([...scopes]);
    return scopes.flatMap((s) => s.split(/\s+/).filter(Boolean));
  } catch (error) {
    if (error instanceof ScopeSyntaxError)
      throw new DomainError('invalid', 'InvalidScope', `${field}: ${error.message}`, field);
    throw error;
  }
};

const tenantSettings = (input: TenantSettings): TenantSettings => ({
  ehrManaged: input.ehrManaged,
  allowedScopes: validateScopes(input.allowedScopes, 'allowed_scopes'),
  redirectOrigins: input.redirectOrigins.map((o) => normaliseOrigin(o, 'redirect_origins')),
  ...(input.mrnSystem?.trim() ? { mrnSystem: input.mrnSystem.trim() } : {}),
  ...(input.subscriptionOrigins?.length
    ? {
        subscriptionOrigins: input.subscriptionOrigins.map((o) => normaliseOrigin(o, 'subscription_origins')),
      }
    : {}),
  ...(input.retentionDays !== undefined ? { retentionDays: input.retentionDays } : {}),
});

/**
 * Creates a tenant, or (with `ensure`) converges an existing tenant of the same name to the given
 * settings. The name is reserved race-free (reservation stream, docs/architecture.md "Event store").
 * @returns the tenant id and whether it was created.
 * @throws {DomainError} conflict when the name is taken and `ensure` is false; invalid settings.
 */
export const createTenant = async (
  ctx: CommandContext,
  input: TenantInput,
  options: { ensure?: boolean } = {},
): Promise<{ tenantId: number; created: boolean }> => {
  const name = input.name.trim();
  if (!name) throw new DomainError('invalid', 'InvalidTenantName', 'name must not be empty', 'name');
  const settings = tenantSettings(input);
  const key = tenantNameKey(name);
  const { result } = await execute(ctx, async (uow) => {
    const reservation = await uow.load(reservationStream(key), reservationDecider);
    if (reservation.status === 'claimed') {
      const tenantId = Number(reservation.ownerId);
      if (!options.ensure)
        throw new DomainError('conflict', 'TenantExists', `a tenant named ${JSON.stringify(name)} exists`);
      uow.setCause({ tenantId });
      await uow.decide(tenantStream(tenantId), tenantDecider, {
        type: 'ConfigureTenant',
        now: uow.now,
        ...settings,
      });
      return { tenantId, created: false };
    }
    const tenantId = await allocateId(uow.ctx.sql, 'tenant');
    uow.setCause({ tenantId });
    await uow.decide(reservationStream(key), reservationDecider, {
      type: 'ClaimReservation',
      key,
      ownerType: 'tenant',
      ownerId: String(tenantId),
      now: uow.now,
    });
    await uow.decide(
      tenantStream(tenantId),
      tenantDecider,
      { type: 'CreateTenant', tenantId, name, now: uow.now, ...settings },
      { fresh: true },
    );
    return { tenantId, created: true };
  });
  return result;
};

export interface ClientInput {
  readonly clientId: string;
  readonly tenantId: number;
  readonly secret: string;
  readonly scopes: readonly string[];
  readonly projects: readonly string[];
}

/** Minimum client secret length. */
export const MIN_SECRET_LENGTH = 16;

/**
 * Registers an API client of a tenant, or (with `ensure`) converges an existing one: a secret
 * that no longer verifies is rotated, changed scopes/projects are recorded.
 * @throws {DomainError} invalid client_id/secret/scopes, not_found tenant, conflict when the
 *   client exists and `ensure` is false, or when it exists in another tenant.
 */
export const registerClient = async (
  ctx: CommandContext,
  input: ClientInput,
  options: { ensure?: boolean } = {},
): Promise<{ created: boolean }> => {
  if (!CLIENT_ID_PATTERN.test(input.clientId))
    throw new DomainError(
      'invalid',
      'InvalidClientId',
      'client_id must be 3-64 letters, digits, ".", "_" or "-"',
      'client_id',
    );
  if (input.secret.length < MIN_SECRET_LENGTH)
    throw new DomainError(
      'invalid',
      'WeakSecret',
      `client_secret must be at least ${MIN_SECRET_LENGTH} characters`,
      'client_secret',
    );
  const scopes = validateScopes(input.scopes, 'scopes');
  const projects = [...new Set(input.projects.map((p) => p.trim()).filter(Boolean))];
  // Hashing is slow (scrypt): done once, outside the command's retries.
  const secretHash = await hashSecret(input.secret);
  const { result } = await execute({ ...ctx, tenantId: input.tenantId }, async (uow) => {
    const tenant = await uow.load(tenantStream(input.tenantId), tenantDecider);
    if (tenant.status === 'none')
      throw new DomainError('not_found', 'TenantNotFound', `no tenant ${input.tenantId}`, 'tenant');
    const stream = clientStream(input.clientId);
    const existing = await uow.load(stream, clientDecider);
    if (existing.status === 'active') {
      if (!options.ensure)
        throw new DomainError('conflict', 'ApiClientExists', `client ${input.clientId} already exists`);
      if (existing.tenantId !== input.tenantId)
        throw new DomainError(
          'conflict',
          'ApiClientExists',
          `client ${input.clientId} belongs to another tenant`,
        );
      if (!(await verifySecret(input.secret, existing.secretHash)))
        await uow.decide(stream, clientDecider, { type: 'RotateApiClientSecret', secretHash, now: uow.now });
      await uow.decide(stream, clientDecider, { type: 'ConfigureApiClient', scopes, projects, now: uow.now });
      return { created: false };
    }
    await uow.decide(stream, clientDecider, {
      type: 'RegisterApiClient',
      clientId: input.clientId,
      tenantId: input.tenantId,
      secretHash,
      scopes,
      projects,
      now: uow.now,
    });
    return { created: true };
  });
  return result;
};
