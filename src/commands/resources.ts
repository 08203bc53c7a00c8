/**
 * FHIR resource commands (issue 3; spec §4.3): create, update (partial for the clinical context
 * resources, spec §4.3 rule 3), conditional update by identifier (rule 2), delete (rule 4).
 * Identifier uniqueness (rule 1) is enforced with reservation streams appended atomically with the
 * resource's own stream, so two racing creates can never both succeed.
 */
import type { Event } from '../domain/decider.js';
import { DomainError } from '../domain/decider.js';
import {
  type Content,
  type ResourceState,
  type ResourceType,
  resourceDecider,
  resourceStream,
} from '../domain/fhir/resource.js';
import { identifierKey, reservationDecider, reservationStream } from '../domain/reservation/reservation.js';
import { type ExpectedState, WrongExpectedVersion } from '../eventstore/port.js';
import type { ResourceDefinition } from '../fhir/definitions.js';
import { identifiersOf } from '../fhir/references.js';
import { searchResources } from '../projections/resources.js';
import { allocateId, type CommandContext, type IdKind } from './context.js';
import { appendAtomically, load, MAX_ATTEMPTS } from './handle.js';

type Part = { streamName: string; expectedState: ExpectedState; events: Event[] };

/** The outcome of a write: the resource's id, its version after the write, and whether it is new. */
export interface WriteResult {
  readonly id: number;
  readonly versionId: number;
  readonly lastUpdated: string;
  readonly created: boolean;
  /** The resource's content after the write. */
  readonly content: Content;
}

const notFound = (type: ResourceType, id: number) =>
  new DomainError('not_found', 'ResourceNotFound', `${type}/${id} is not known`, undefined, {
    issueCode: 'not-found',
  });

/** Loads a resource of the tenant; other tenants' resources read as missing (404, never 403). */
export const loadResource = async (
  ctx: CommandContext,
  type: ResourceType,
  id: number,
  tenantId: number,
): Promise<{ state: ResourceState; expected: ExpectedState }> => {
  const loaded = await load(ctx, resourceStream(type, id), resourceDecider(type));
  if (loaded.state.status === 'none' || loaded.state.tenantId !== tenantId)
    return { state: { status: 'none' }, expected: 'no_stream' };
  return loaded;
};

/** Checks each reference points at a live resource of the tenant. @throws {DomainError} 422. */
const checkReferences = async (
  ctx: CommandContext,
  def: ResourceDefinition,
  tenantId: number,
  content: Content,
) => {
  for (const ref of def.references(content)) {
    const { state } = await loadResource(ctx, ref.resourceType, ref.id, tenantId);
    if (state.status !== 'active')
      throw new DomainError(
        'unprocessable',
        'ReferenceNotFound',
        `${def.type}.${ref.expression}: ${ref.resourceType}/${ref.id} does not exist in this data tenant`,
        `${def.type}.${ref.expression}`,
        { issueCode: 'not-found' },
      );
  }
};

/** The resource holding identifier `system|value` in the tenant, via its reservation stream. */
export const findByIdentifier = async (
  ctx: CommandContext,
  type: ResourceType,
  tenantId: number,
  system: string,
  value: string,
): Promise<number | undefined> => {
  const { state } = await load(
    ctx,
    reservationStream(identifierKey(type, tenantId, system, value)),
    reservationDecider,
  );
  return state.status === 'claimed' ? Number(state.ownerId) : undefined;
};

/**
 * The reservation parts claiming `add` and releasing `remove` for resource `id`.
 * @throws {DomainError} 409 `duplicate` with the Location of the holder (spec §7).
 */
const reservationParts = async (
  ctx: CommandContext,
  type: ResourceType,
  tenantId: number,
  id: number,
  add: readonly { system: string; value: string }[],
  remove: readonly { system: string; value: string }[],
): Promise<Part[]> => {
  const now = ctx.now.toISOString();
  const parts: Part[] = [];
  for (const { system, value } of add) {
    const key = identifierKey(type, tenantId, system, value);
    const stream = reservationStream(key);
    const { state, expected } = await load(ctx, stream, reservationDecider);
    if (state.status === 'claimed' && state.ownerId !== String(id))
      throw new DomainError(
        'conflict',
        'DuplicateIdentifier',
        `a ${type} with identifier ${system}|${value} already exists in this data tenant: ${type}/${state.ownerId}`,
        `${type}.identifier`,
        { issueCode: 'duplicate', location: `${type}/${state.ownerId}` },
      );
    const events = reservationDecider.decide(
      { type: 'ClaimReservation', key, ownerType: type, ownerId: String(id), now },
      state,
    );
    if (events.length) parts.push({ streamName: stream, expectedState: expected, events });
  }
  for (const { system, value } of remove) {
    const key = identifierKey(type, tenantId, system, value);
    const stream = reservationStream(key);
    const { state, expected } = await load(ctx, stream, reservationDecider);
    const events = reservationDecider.decide(
      { type: 'ReleaseReservation', ownerType: type, ownerId: String(id), now },
      state,
    );
    if (events.length) parts.push({ streamName: stream, expectedState: expected, events });
  }
  return parts;
};

const sameIdentifier = (a: { system: string; value: string }, b: { system: string; value: string }) =>
  a.system === b.system && a.value === b.value;
const minus = <T extends { system: string; value: string }>(a: readonly T[], b: readonly T[]) =>
  a.filter((x) => !b.some((y) => sameIdentifier(x, y)));

/** Retries `attempt` when a concurrent write moved one of its streams (not when If-Match was given). */
const withRetry = async <T>(fn: () => Promise<T>, retry = true): Promise<T> => {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (retry && error instanceof WrongExpectedVersion && attempt < MAX_ATTEMPTS) continue;
      throw error;
    }
  }
};

/**
 * The resource's current version (`meta.versionId` = stream revision + 1), checked against the
 * version an If-Match header named.
 * @throws {DomainError} 412 when `ifMatch` is given and differs.
 */
const checkVersion = (
  type: ResourceType,
  id: number,
  expected: ExpectedState,
  ifMatch: number | undefined,
): number => {
  const currentVersion = expected === 'no_stream' ? 0 : Number(expected) + 1;
  if (ifMatch !== undefined && ifMatch !== currentVersion)
    throw new DomainError(
      'precondition_failed',
      'VersionMismatch',
      `If-Match names version ${ifMatch} but ${type}/${id} is at version ${currentVersion}`,
      undefined,
      { issueCode: 'conflict' },
    );
  return currentVersion;
};

export interface CreateOptions {
  /** Questionnaire: its project (spec §5.3 rule 3). */
  readonly project?: string;
  /** Session user (`Practitioner/<id>`) who authors it, for `user/` scopes. */
  readonly author?: string;
}

/**
 * Creates a resource (FHIR create).
 * @throws {DomainError} 409 duplicate identifier (with the holder's Location), 422 broken reference.
 */
export const createResource = async (
  ctx: CommandContext,
  def: ResourceDefinition,
  tenantId: number,
  content: Content,
  options: CreateOptions = {},
): Promise<WriteResult> => {
  await checkReferences(ctx, def, tenantId, content);
  const decider = resourceDecider(def.type);
  return withRetry(async () => {
    const id = await allocateId(ctx.sql, def.type as IdKind);
    const now = ctx.now.toISOString();
    const reservations = def.uniqueIdentifiers
      ? await reservationParts(ctx, def.type, tenantId, id, identifiersOf(content), [])
      : [];
    const events = decider.decide(
      {
        type: 'CreateResource',
        id,
        tenantId,
        resource: content,
        now,
        ...(options.project !== undefined ? { project: options.project } : {}),
        ...(options.author !== undefined ? { author: options.author } : {}),
      },
      decider.initialState,
    );
    await appendAtomically(ctx, [
      ...reservations,
      { streamName: resourceStream(def.type, id), expectedState: 'no_stream', events },
    ]);
    return { id, versionId: 1, lastUpdated: now, created: true, content };
  });
};

/** spec §4.3 rule 3: a partial update keeps omitted elements; a given identifier list replaces the old one. */
const merged = (def: ResourceDefinition, current: Content, given: Content): Content =>
  def.partialUpdate ? { ...current, ...given } : given;

/**
 * Updates resource `id` (FHIR update). `ifMatch` is the version the client read (If-Match).
 * @throws {DomainError} 404 missing, 410 deleted, 412 version mismatch, 409 duplicate identifier,
 *   422 broken reference.
 */
export const updateResource = async (
  ctx: CommandContext,
  def: ResourceDefinition,
  tenantId: number,
  id: number,
  content: Content,
  options: { ifMatch?: number; mergeIdentifiers?: boolean } = {},
): Promise<WriteResult> => {
  const decider = resourceDecider(def.type);
  return withRetry(async () => {
    const { state, expected } = await loadResource(ctx, def.type, id, tenantId);
    if (state.status === 'none') throw notFound(def.type, id);
    const currentVersion = checkVersion(def.type, id, expected, options.ifMatch);
    let next = merged(def, state.resource, content);
    if (options.mergeIdentifiers) {
      // spec §4.3 rule 2: conditional update merges submitted identifiers with the existing ones.
      const existing = identifiersOf(state.resource);
      next = { ...next, identifier: [...existing, ...minus(identifiersOf(content), existing)] };
    }
    const now = ctx.now.toISOString();
    const events = decider.decide({ type: 'UpdateResource', resource: next, now }, state);
    if (events.length === 0)
      return {
        id,
        versionId: currentVersion,
        lastUpdated: state.status === 'active' ? state.lastUpdated : now,
        created: false,
        content: next,
      };
    await checkReferences(ctx, def, tenantId, next);
    const before = identifiersOf(state.resource);
    const after = identifiersOf(next);
    const reservations = def.uniqueIdentifiers
      ? await reservationParts(ctx, def.type, tenantId, id, minus(after, before), minus(before, after))
      : [];
    await appendAtomically(ctx, [
      ...reservations,
      { streamName: resourceStream(def.type, id), expectedState: expected, events },
    ]);
    return { id, versionId: currentVersion + 1, lastUpdated: now, created: false, content: next };
  }, options.ifMatch === undefined);
};

/**
 * Conditional update by identifier (spec §4.3 rule 2): updates the resource holding
 * `system|value` (merging identifiers), or creates it with that identifier. Racing calls for the
 * same new identifier converge: the losers find the winner's resource and update it.
 * @param content the content to update with (partial for the clinical context resources).
 * @param createContent the content to create with, parsed as strictly as a create; called only
 *   when nothing matches (throws the create's validation errors).
 * @returns created: true when no resource matched (the interface still answers 200).
 */
export const conditionalUpdate = async (
  ctx: CommandContext,
  def: ResourceDefinition,
  tenantId: number,
  match: { system: string; value: string },
  content: Content,
  options: CreateOptions = {},
  createContent: () => Content = () => content,
): Promise<WriteResult> => {
  const withMatch = (c: Content) => {
    const given = identifiersOf(c);
    return { ...c, identifier: [...given, ...minus([match], given)] };
  };
  for (let attempt = 1; ; attempt++) {
    const id = def.uniqueIdentifiers
      ? await findByIdentifier(ctx, def.type, tenantId, match.system, match.value)
      : (await searchResources(ctx.sql, def.type, tenantId, { identifiers: [match], limit: 1 }))[0]?.id;
    if (id !== undefined) {
      const { state } = await loadResource(ctx, def.type, id, tenantId);
      if (state.status === 'active')
        return updateResource(ctx, def, tenantId, id, withMatch(content), { mergeIdentifiers: true });
    }
    try {
      return await createResource(ctx, def, tenantId, withMatch(createContent()), options);
    } catch (error) {
      // Another request created it first: look again and update that one.
      const lostRace =
        (error instanceof DomainError && error.code === 'DuplicateIdentifier') ||
        error instanceof WrongExpectedVersion;
      if (lostRace && attempt < MAX_ATTEMPTS) continue;
      throw error;
    }
  }
};

/**
 * Deletes resource `id` permanently (spec §4.3 rule 4): refused with 409 while live resources of
 * `def.deleteBlockedBy` reference it; its identifiers are released. Deleting a deleted resource
 * changes nothing.
 * @param referencedBy counts live referencing resources (from the read model, after catching up).
 * @throws {DomainError} 404 missing, 409 referenced, 412 version mismatch.
 */
export const deleteResource = async (
  ctx: CommandContext,
  def: ResourceDefinition,
  tenantId: number,
  id: number,
  referencedBy: () => Promise<string[]>,
  options: { ifMatch?: number } = {},
): Promise<void> => {
  const decider = resourceDecider(def.type);
  await withRetry(async () => {
    const { state, expected } = await loadResource(ctx, def.type, id, tenantId);
    if (state.status === 'none') throw notFound(def.type, id);
    checkVersion(def.type, id, expected, options.ifMatch);
    if (state.status === 'deleted') return;
    const referencing = await referencedBy();
    if (referencing.length > 0)
      throw new DomainError(
        'conflict',
        'ResourceReferenced',
        `${def.type}/${id} is referenced by ${referencing.slice(0, 5).join(', ')}${referencing.length > 5 ? ', …' : ''}; delete those first`,
        undefined,
        { issueCode: 'conflict' },
      );
    const events = decider.decide({ type: 'DeleteResource', now: ctx.now.toISOString() }, state);
    const releases = def.uniqueIdentifiers
      ? await reservationParts(ctx, def.type, tenantId, id, [], identifiersOf(state.resource))
      : [];
    await appendAtomically(ctx, [
      ...releases,
      { streamName: resourceStream(def.type, id), expectedState: expected, events },
    ]);
  }, options.ifMatch === undefined);
};
