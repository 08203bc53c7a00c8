/**
 * The session commands of the auth host (docs/interface.md §2.1–2.3, §3.1, §4.1, §5).
 */

import { allocateId } from '../db/sequences.js';
import type { AuditRecord } from '../domain/audit/audit.js';
import type { Identifier } from '../domain/clinical/identifier.js';
import { DomainError, fold } from '../domain/decider.js';
import { type DeploymentMode, sessionDecider, sessionStream } from '../domain/session/session.js';
import { type Tenant, type TenantEvent, tenantDecider, tenantStream } from '../domain/tenant/tenant.js';
import type { EventStore } from '../eventstore/port.js';
import {
  downscope,
  formatScope,
  parseScopeList,
  type ResourceScope,
  ScopeSyntaxError,
} from '../fhir/scopes.js';
import {
  type ContextResource,
  type ContextResourceType,
  findById,
  findByIdentifier,
  register,
} from './clinical.js';
import type { CommandContext } from './context.js';
import { execute, type UnitOfWork } from './handler.js';
import { lookupStreams } from './resources.js';
import { hashToken, randomToken } from './secrets.js';

/** docs/interface.md §2.2 role: `new` creates when missing; `find` and `launch` (role omitted) only look up. */
export type ContextRole = 'new' | 'find' | 'launch';

export interface ContextItem {
  readonly identifier: Identifier;
  readonly type: ContextResourceType;
  readonly role: ContextRole;
}

/** A validated POST /sessions body (docs/interface.md §2.1); the HTTP edge's zod schema produces it. */
export interface CreateSessionInput {
  readonly scope?: string | string[];
  readonly patient?: number;
  readonly encounter?: number;
  readonly user?: number;
  readonly fhirContext: readonly ContextItem[];
  readonly deploymentMode: DeploymentMode;
  readonly postSubmitRedirect?: string;
  readonly postCancelRedirect?: string;
}

/** The authenticated API client (docs/interface.md §5 rule 1). */
export interface ClientPrincipal {
  readonly clientId: string;
  readonly tenantId: number;
  readonly scopes: readonly string[];
  readonly projects: readonly string[];
}

export interface TenantInfo {
  readonly id: number;
  readonly name: string;
  readonly ehrManaged: boolean;
  readonly allowedScopes: readonly string[];
  readonly redirectOrigins: readonly string[];
  /** The identifier system of the tenant's MRNs (the patient banner), if named. */
  readonly mrnSystem?: string;
}

/** Loads the tenant from its stream. @throws {DomainError} not_found. */
export const loadTenant = async (uow: UnitOfWork, tenantId: number): Promise<TenantInfo> =>
  tenantInfo(await uow.load(tenantStream(tenantId), tenantDecider), tenantId);

/** Reads the tenant from its stream, outside any command. @throws {DomainError} not_found. */
export const readTenant = async (store: EventStore, tenantId: number): Promise<TenantInfo> =>
  tenantInfo(
    fold(tenantDecider, (await store.readStream(tenantStream(tenantId))) as TenantEvent[]),
    tenantId,
  );

const tenantInfo = (state: Tenant, tenantId: number): TenantInfo => {
  if (state.status === 'none') throw new DomainError('not_found', 'TenantNotFound', `no tenant ${tenantId}`);
  return {
    id: state.tenantId,
    name: state.name,
    ehrManaged: state.ehrManaged,
    allowedScopes: state.allowedScopes,
    redirectOrigins: state.redirectOrigins,
    ...(state.mrnSystem ? { mrnSystem: state.mrnSystem } : {}),
  };
};

/**
 * Checks a redirect target against the allowed origins (docs/architecture.md "Security": no open redirect).
 * @throws {DomainError} invalid (400) when it is not an absolute http(s) URL of an allowed origin.
 */
export const checkRedirect = (target: string, allowedOrigins: readonly string[], field: string): string => {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    throw new DomainError('invalid', 'InvalidRedirect', `${field} must be an absolute URL`, field);
  }
  if ((url.protocol !== 'https:' && url.protocol !== 'http:') || !allowedOrigins.includes(url.origin))
    throw new DomainError(
      'invalid',
      'RedirectNotAllowed',
      `${field} must point at the application host or an origin allowed for this data tenant; ${url.origin} is not allowed`,
      field,
    );
  return url.toString();
};

const notFoundInContext = (index: number, type: string) =>
  new DomainError(
    'not_found',
    'ContextResourceNotFound',
    `fhirContext[${index}]: no ${type} with this identifier in the data tenant (role find/launch never creates)`,
    `fhirContext[${index}]`,
  );

const mismatch = (detail: string, field: string) =>
  new DomainError('unprocessable', 'ContextMismatch', detail, field);

interface ResolvedContext {
  readonly patient: ContextResource | undefined;
  readonly encounter: ContextResource | undefined;
  readonly user: ContextResource;
}

/**
 * Resolves patient, encounter and user (docs/interface.md §2.1, §2.2): ids must exist in the tenant, fhirContext
 * items are looked up by identifier; role `new` items that are missing are registered as decisions
 * of `uow` (appended with the session). `user` wins over a Practitioner item.
 */
const resolveContext = async (
  uow: UnitOfWork,
  tenantId: number,
  input: CreateSessionInput,
): Promise<ResolvedContext> => {
  const itemOf = (type: ContextResourceType) => {
    const index = input.fhirContext.findIndex((i) => i.type === type);
    return index < 0 ? undefined : { item: input.fhirContext[index]!, index };
  };
  type Pending = { resolved?: ContextResource; create?: { identifier: Identifier } };

  const resolve = async (
    type: ContextResourceType,
    id: number | undefined,
    idField: string,
    missingId: () => DomainError,
  ): Promise<Pending> => {
    let byId: ContextResource | undefined;
    if (id !== undefined) {
      byId = await findById(uow, type, tenantId, id);
      if (!byId) throw missingId();
    }
    const entry = itemOf(type);
    if (!entry) return byId ? { resolved: byId } : {};
    const found = await findByIdentifier(uow, type, tenantId, entry.item.identifier);
    if (byId) {
      if (!found || found.id !== byId.id)
        throw mismatch(
          `${idField} and the ${type} fhirContext item identify different resources`,
          `fhirContext[${entry.index}]`,
        );
      return { resolved: byId };
    }
    if (found) return { resolved: found };
    if (entry.item.role !== 'new') throw notFoundInContext(entry.index, type);
    return { create: { identifier: entry.item.identifier } };
  };

  const patient = await resolve(
    'Patient',
    input.patient,
    'patient',
    () =>
      new DomainError(
        'not_found',
        'PatientNotFound',
        `patient: no Patient/${input.patient} in the data tenant`,
        'patient',
      ),
  );
  const encounter = await resolve(
    'Encounter',
    input.encounter,
    'encounter',
    () =>
      new DomainError(
        'not_found',
        'EncounterNotFound',
        `encounter: no Encounter/${input.encounter} in the data tenant`,
        'encounter',
      ),
  );

  // The encounter's subject is the session patient; a given patient must agree with it.
  let patientResolved = patient.resolved;
  const subject = encounter.resolved?.subjectPatientId;
  if (subject !== undefined) {
    if (patient.create || (patientResolved && patientResolved.id !== subject))
      throw mismatch('the encounter belongs to another patient than the session patient', 'encounter');
    patientResolved ??= await findById(uow, 'Patient', tenantId, subject);
  }

  // docs/interface.md §2.1 user: `user` wins over a Practitioner item, which is then ignored.
  let user: Pending;
  if (input.user !== undefined) {
    const found = await findById(uow, 'Practitioner', tenantId, input.user);
    if (!found)
      throw new DomainError(
        'unprocessable',
        'NoResolvableUser',
        `user: no Practitioner/${input.user} in the data tenant`,
        'user',
      );
    user = { resolved: found };
  } else {
    const entry = itemOf('Practitioner');
    if (!entry)
      throw new DomainError(
        'unprocessable',
        'NoResolvableUser',
        'a session needs a user: give user (a Practitioner id) or a fhirContext item of type Practitioner',
        'user',
      );
    user = await resolve(
      'Practitioner',
      undefined,
      'user',
      () => new DomainError('unprocessable', 'NoResolvableUser', 'no user'),
    );
  }

  if (patient.create) patientResolved = await register(uow, 'Patient', tenantId, patient.create.identifier);
  let encounterResolved = encounter.resolved;
  if (encounter.create) {
    if (!patientResolved)
      throw new DomainError(
        'unprocessable',
        'EncounterNeedsPatient',
        'a new Encounter needs the session patient: give patient or a Patient fhirContext item',
        'fhirContext',
      );
    encounterResolved = await register(
      uow,
      'Encounter',
      tenantId,
      encounter.create.identifier,
      patientResolved.id,
    );
  }
  let userResolved = user.resolved;
  if (user.create) userResolved = await register(uow, 'Practitioner', tenantId, user.create.identifier);
  return { patient: patientResolved, encounter: encounterResolved, user: userResolved! };
};

const parseRequestedScopes = (scope: string | string[] | undefined, tenant: TenantInfo): ResourceScope[] => {
  try {
    if (scope === undefined) return parseScopeList([...tenant.allowedScopes]).scopes;
    return parseScopeList(scope).scopes;
  } catch (error) {
    if (error instanceof ScopeSyntaxError)
      throw new DomainError('invalid', 'InvalidScope', `scope: ${error.message}`, 'scope');
    throw error;
  }
};

export interface CreatedSession {
  readonly sessionId: number;
  /** `<sessionId>.<256-bit random, base64url>`; only its hash is stored. */
  readonly handoverToken: string;
  readonly tenant: TenantInfo;
  readonly userId: number;
  readonly patientId: number | null;
  readonly encounterId: number | null;
  readonly scopes: string[];
  readonly deploymentMode: DeploymentMode;
  readonly postSubmitRedirect: string | null;
  readonly expiresAt: string;
  readonly createdAt: string;
}

/**
 * POST /sessions (docs/interface.md §2.1–2.3, §5.3): resolves the launch context, downscopes the requested
 * scopes and appends `SessionCreated` — together with any Patient/Encounter/Practitioner created
 * by role `new` — in one atomic append.
 * @param globalOrigins origins every tenant may redirect to (the app host, ALLOWED_REDIRECT_ORIGINS).
 * @param audit the request's AuditEvent, appended with the session (`execute`'s `audit` option).
 * @returns the session, and the AuditEvent appended with it (`audited`) when `audit` gave one.
 * @throws {DomainError} invalid (400: scope, redirects), not_found (404: ids, fhirContext find),
 *   unprocessable (422: no resolvable user, context mismatch).
 */
export const createSession = async (
  ctx: CommandContext,
  client: ClientPrincipal,
  input: CreateSessionInput,
  globalOrigins: readonly string[],
  audit?: (created: CreatedSession) => AuditRecord | undefined,
): Promise<CreatedSession & { readonly audited?: AuditRecord }> => {
  const { result, audited } = await execute(ctx, (uow) => openSession(uow, client, input, globalOrigins), {
    ...(audit ? { audit } : {}),
  });
  return audited ? { ...result, audited } : result;
};

/**
 * The decisions of POST /sessions inside `uow` (also used by the launcher, which opens its session
 * in the same append as the launch): see {@link createSession}.
 */
export const openSession = async (
  uow: UnitOfWork,
  client: ClientPrincipal,
  input: CreateSessionInput,
  globalOrigins: readonly string[],
): Promise<CreatedSession> => {
  // The tenant and every stream the context's lookups start from (resources named by id, the
  // reservations of fhirContext identifiers) in one read, instead of a round trip each.
  await uow.loadAll([
    [tenantStream(client.tenantId), tenantDecider],
    ...lookupStreams(uow.ctx, client.tenantId, [
      ...(input.patient !== undefined ? [{ type: 'Patient' as const, id: input.patient }] : []),
      ...(input.encounter !== undefined ? [{ type: 'Encounter' as const, id: input.encounter }] : []),
      ...(input.user !== undefined ? [{ type: 'Practitioner' as const, id: input.user }] : []),
      ...input.fhirContext.map((item) => ({ type: item.type, identifier: item.identifier })),
    ]),
  ]);
  const tenant = await loadTenant(uow, client.tenantId);
  const origins = [...globalOrigins, ...tenant.redirectOrigins];
  const postSubmitRedirect =
    input.postSubmitRedirect === undefined
      ? null
      : checkRedirect(input.postSubmitRedirect, origins, 'post_submit_redirect');
  const postCancelRedirect =
    input.postCancelRedirect === undefined
      ? null
      : checkRedirect(input.postCancelRedirect, origins, 'post_cancel_redirect');
  const requested = parseRequestedScopes(input.scope, tenant);
  const tenantAllowed = parseScopeList([...tenant.allowedScopes]).scopes;
  const context = await resolveContext(uow, tenant.id, input);
  const scopes = downscope({
    requested,
    tenantAllowed,
    ehrManaged: tenant.ehrManaged,
    projects: [...client.projects],
    hasPatientContext: context.patient !== undefined,
  }).map(formatScope);
  const sessionId = await allocateId(uow.ctx.sql, 'session');
  const handoverToken = `${sessionId}.${randomToken()}`;
  const createdAt = uow.now;
  const [first] = await uow.decide(
    sessionStream(sessionId),
    sessionDecider,
    {
      type: 'CreateSession',
      sessionId,
      tenantId: tenant.id,
      clientId: client.clientId,
      userId: context.user.id,
      patientId: context.patient?.id ?? null,
      encounterId: context.encounter?.id ?? null,
      scopes,
      deploymentMode: input.deploymentMode,
      postSubmitRedirect,
      postCancelRedirect,
      handoverTokenHash: hashToken(handoverToken),
      createdAt,
    },
    { fresh: true },
  );
  if (first?.type !== 'SessionCreated') throw new Error('unreachable: CreateSession decides SessionCreated');
  const created = first.data;
  return {
    sessionId,
    handoverToken,
    tenant,
    userId: created.userId,
    patientId: created.patientId,
    encounterId: created.encounterId,
    scopes,
    deploymentMode: input.deploymentMode,
    postSubmitRedirect,
    expiresAt: created.expiresAt,
    createdAt,
  };
};

const TOKEN_PATTERN = /^(\d{1,10})\.[A-Za-z0-9_-]{43}$/;

/**
 * GET|POST /sessions/$handover (docs/interface.md §4.1 handover rules, §3.1, §5 rule 3): activates the session,
 * deletes the token and issues the cookie. Exactly one of two racing handovers succeeds (the
 * append expects the revision read; the retry then sees the token used).
 * @param audit the request's AuditEvent, appended with the handover (`execute`'s `audit` option).
 * @returns the cookie value (only its hash is stored), the session's expiry, and the AuditEvent
 *   appended with it (`audited`) when `audit` gave one.
 * @throws {DomainError} unauthorized (401) for an unknown, used or expired token; invalid (400)
 *   when `next` is not on an allowed origin — checked before anything is written.
 */
export const handOverSession = async (
  ctx: CommandContext,
  token: string,
  next: string,
  globalOrigins: readonly string[],
  audit?: (handedOver: HandedOver) => AuditRecord | undefined,
): Promise<
  HandedOver & { cookie: string; expiresAt: string; next: string; readonly audited?: AuditRecord }
> => {
  const match = TOKEN_PATTERN.exec(token);
  if (!match)
    throw new DomainError('unauthorized', 'HandoverTokenInvalid', 'the handover token is not valid');
  const sessionId = Number(match[1]);
  const stream = sessionStream(sessionId);
  const cookie = randomToken();
  const { result, audited } = await execute(
    ctx,
    async (uow) => {
      const state = await uow.load(stream, sessionDecider);
      // Bad tokens are refused (401) before `next` is judged.
      await uow.decide(stream, sessionDecider, {
        type: 'HandOverSession',
        tokenHash: hashToken(token),
        cookieHash: hashToken(cookie),
        now: uow.now,
      });
      if (state.status === 'none') throw new Error('unreachable: decide refuses a missing session');
      uow.setCause({ tenantId: state.tenantId, actor: { type: 'session', id: String(sessionId) } });
      const tenant = await loadTenant(uow, state.tenantId);
      const target = checkRedirect(next, [...globalOrigins, ...tenant.redirectOrigins], 'next');
      return {
        expiresAt: state.expiresAt,
        target,
        tenantId: state.tenantId,
        userId: state.userId,
        patientId: state.patientId,
      };
    },
    audit
      ? { audit: (r) => audit({ sessionId, tenantId: r.tenantId, userId: r.userId, patientId: r.patientId }) }
      : {},
  );
  return {
    cookie,
    expiresAt: result.expiresAt,
    sessionId,
    next: result.target,
    tenantId: result.tenantId,
    userId: result.userId,
    patientId: result.patientId,
    ...(audited ? { audited } : {}),
  };
};

/** The session a handover opened in the browser. */
export interface HandedOver {
  readonly sessionId: number;
  readonly tenantId: number;
  readonly userId: number;
  readonly patientId: number | null;
}

/**
 * DELETE /sessions/{id} (docs/interface.md §3.1, §5 rule 1): ends the session; its cookie stops working at once.
 * Ending an ended session changes nothing.
 * @param audit the request's AuditEvent, appended with the end (`execute`'s `audit` option).
 * @returns the AuditEvent appended with it (`audited`), when the session was ended now.
 * @throws {DomainError} not_found (404) for a missing session or one of another tenant.
 */
export const endSession = async (
  ctx: CommandContext,
  sessionId: number,
  tenantId: number,
  audit?: () => AuditRecord | undefined,
): Promise<{ readonly audited?: AuditRecord }> => {
  const { audited } = await execute(
    ctx,
    (uow) =>
      uow.decide(sessionStream(sessionId), sessionDecider, { type: 'EndSession', tenantId, now: uow.now }),
    audit ? { audit } : {},
  );
  return audited ? { audited } : {};
};
