/**
 * FHIR resource writes as decisions inside a {@link UnitOfWork} (docs/interface.md §4.3; issue 3):
 * create, update (partial for the clinical context resources, §4.3 rule 3), conditional update by
 * identifier (rule 2) and delete (rule 4). They check no scopes (the FHIR application layer in
 * `commands/fhir.ts` does), and append nothing themselves: the caller's {@link execute} appends
 * every decision of the command at once, so a transaction Bundle, a report submission or a launch
 * is one atomic append however many resources it touches.
 *
 * Identifier uniqueness (rule 1) is enforced with reservation streams in the same append, so two
 * racing creates can never both succeed; the loser's retry finds the winner.
 */
import { allocateId } from '../db/sequences.js';
import { type Identifier, sameIdentifier } from '../domain/clinical/identifier.js';
import { DomainError } from '../domain/decider.js';
import {
  type ChangeNote,
  type Content,
  type ResourceState,
  type ResourceType,
  resourceDecider,
  resourceStream,
} from '../domain/fhir/resource.js';
import { identifierKey, reservationDecider } from '../domain/reservation/reservation.js';
import { MAX_IDENTIFIERS } from '../fhir/common.schema.js';
import type { ResourceDefinition } from '../fhir/definitions.js';
import { identifiersOf } from '../fhir/references.js';
import type { Token } from '../fhir/resources.js';
import { searchResources } from '../queries/resources.js';
import type { CommandContext } from './context.js';
import { type AnyDecider, type UnitOfWork, versionMismatch } from './handler.js';
import { UNKEYED_NAMING } from './identifier-naming.js';

/** The outcome of a write: the resource's id, its version after the write, and whether it is new. */
export interface WriteResult {
  readonly id: number;
  readonly versionId: number;
  readonly lastUpdated: string;
  readonly created: boolean;
  /** The resource's content after the write. */
  readonly content: Content;
}

const NONE: ResourceState = { status: 'none' };

const notFound = (type: ResourceType, id: number) =>
  new DomainError('not_found', 'ResourceNotFound', `${type}/${id} is not known`, undefined, {
    issueCode: 'not-found',
  });

/** A resource of the tenant as the unit of work sees it; other tenants' resources read as missing (404, never 403). */
export const loadResource = async (
  uow: UnitOfWork,
  type: ResourceType,
  id: number,
  tenantId: number,
): Promise<ResourceState> => {
  const state = await uow.load(resourceStream(type, id), resourceDecider(type));
  return state.status === 'none' || state.tenantId !== tenantId ? NONE : state;
};

/** The version (`meta.versionId`) of a loaded resource, with this unit of work's decisions. */
export const versionOf = (uow: UnitOfWork, type: ResourceType, id: number): number =>
  uow.version(resourceStream(type, id));

/**
 * Checks each reference points at a live resource of the tenant, and makes the append check that
 * none of them changed meanwhile (a concurrent delete then makes this command run again).
 * @throws {DomainError} 422.
 */
const checkReferences = async (
  uow: UnitOfWork,
  def: ResourceDefinition,
  tenantId: number,
  content: Content,
) => {
  const references = def.references(content);
  if (references.length === 0) return;
  await uow.loadAll(
    references.map((r) => [resourceStream(r.resourceType, r.id), resourceDecider(r.resourceType)] as const),
  );
  for (const ref of references) {
    const state = await loadResource(uow, ref.resourceType, ref.id, tenantId);
    if (state.status !== 'active')
      throw new DomainError(
        'unprocessable',
        'ReferenceNotFound',
        `${def.type}.${ref.expression}: ${ref.resourceType}/${ref.id} does not exist in this data tenant`,
        `${def.type}.${ref.expression}`,
        { issueCode: 'not-found' },
      );
    uow.require(resourceStream(ref.resourceType, ref.id));
  }
};

/**
 * Refuses content holding more than {@link MAX_IDENTIFIERS} identifiers (docs/interface.md §8). The
 * schemas bound what a client sends; this bounds what a write would store once a conditional
 * interaction adds its match or merges with the identifiers already held. A resource stored with
 * more before the bound existed can still be written, as long as the write adds none.
 * @param held how many identifiers the resource holds now (0 for a create).
 * @throws {DomainError} 422 `invalid` on `Type.identifier`.
 */
const checkIdentifierCount = (def: ResourceDefinition, content: Content, held = 0) => {
  const count = identifiersOf(content).length;
  if (count > MAX_IDENTIFIERS && count > held)
    throw new DomainError(
      'unprocessable',
      'TooManyIdentifiers',
      `the ${def.type} would hold ${count} identifiers; at most ${MAX_IDENTIFIERS} (docs/interface.md §8)`,
      `${def.type}.identifier`,
      { issueCode: 'invalid' },
    );
};

/** The reservation stream of an identifier, named as the store names them (src/commands/identifier-naming.ts). */
const reservationOf = (
  ctx: CommandContext,
  type: ResourceType,
  tenantId: number,
  { system, value }: Identifier,
) => (ctx.identifiers ?? UNKEYED_NAMING).stream(tenantId, identifierKey(type, tenantId, system, value));

/**
 * The streams {@link loadResource} and {@link findByIdentifier} read for these lookups, with their
 * deciders, for a caller that loads them all at once first (`UnitOfWork.loadAll`: one read instead
 * of one per lookup).
 * @param lookups resources by id, and identifiers whose reservation tells who holds them.
 */
export const lookupStreams = (
  ctx: CommandContext,
  tenantId: number,
  lookups: readonly ({ type: ResourceType; id: number } | { type: ResourceType; identifier: Identifier })[],
): [string, AnyDecider][] =>
  lookups.map((lookup) =>
    'id' in lookup
      ? [resourceStream(lookup.type, lookup.id), resourceDecider(lookup.type) as AnyDecider]
      : [reservationOf(ctx, lookup.type, tenantId, lookup.identifier), reservationDecider as AnyDecider],
  );

/**
 * Loads what {@link findMatch} reads for these conditional matches, in two reads instead of two
 * per match: the reservations of their identifiers, then the resources those reservations name.
 * A later `findMatch` of the same unit of work finds them loaded.
 * @param matches the resource type and identifier of each conditional update or create.
 */
export const prefetchMatches = async (
  uow: UnitOfWork,
  tenantId: number,
  matches: readonly { type: ResourceType; token: Token }[],
): Promise<void> => {
  const identified = matches.flatMap(({ type, token }) =>
    token.system ? [{ type, identifier: { system: token.system, value: token.value } }] : [],
  );
  if (identified.length === 0) return;
  await uow.loadAll(lookupStreams(uow.ctx, tenantId, identified));
  const holders: { type: ResourceType; id: number }[] = [];
  for (const { type, identifier } of identified) {
    const id = await findByIdentifier(uow, type, tenantId, identifier);
    if (id !== undefined) holders.push({ type, id });
  }
  await uow.loadAll(lookupStreams(uow.ctx, tenantId, holders));
};

/** The resource holding the reservation of `system|value` in the tenant, if any. */
export const findByIdentifier = async (
  uow: UnitOfWork,
  type: ResourceType,
  tenantId: number,
  identifier: Identifier,
): Promise<number | undefined> => {
  const state = await uow.load(reservationOf(uow.ctx, type, tenantId, identifier), reservationDecider);
  return state.status === 'claimed' ? Number(state.ownerId) : undefined;
};

/**
 * The resource a conditional interaction (`identifier=` of a conditional update or If-None-Exist)
 * matches, or undefined. Types with unique identifiers answer from the reservation (it sees this
 * command's own writes and never lags); the others from the reservations their conditional
 * creates claim and from the read model.
 * @throws {DomainError} 412 `multiple-matches` when more than one resource matches.
 */
export const findMatch = async (
  uow: UnitOfWork,
  def: ResourceDefinition,
  tenantId: number,
  token: Token,
  expression: string,
): Promise<number | undefined> => {
  const ids = new Set<number>();
  if (token.system) {
    const reserved = await findByIdentifier(uow, def.type, tenantId, {
      system: token.system,
      value: token.value,
    });
    if (reserved !== undefined && (await loadResource(uow, def.type, reserved, tenantId)).status === 'active')
      ids.add(reserved);
  }
  if (!def.uniqueIdentifiers || !token.system)
    for (const row of await searchResources(uow.ctx.sql, def.type, tenantId, {
      identifiers: [token],
      limit: 2,
    }))
      ids.add(row.id);
  if (ids.size > 1)
    throw new DomainError(
      'precondition_failed',
      'MultipleMatches',
      `${expression} matches more than one ${def.type}`,
      expression,
      { issueCode: 'multiple-matches' },
    );
  return ids.values().next().value;
};

/**
 * A 409 `duplicate` (docs/interface.md §4.3 rule 1, §7): `identifier` is held by `holder`. Its
 * message and `Location` name the holder; the FHIR application layer (commands/fhir.ts) answers a
 * caller that may not read the holder without them.
 */
export class DuplicateIdentifier extends DomainError {
  constructor(
    readonly holder: { readonly type: ResourceType; readonly id: number },
    identifier: Identifier,
  ) {
    super(
      'conflict',
      'DuplicateIdentifier',
      `a ${holder.type} with identifier ${identifier.system}|${identifier.value} already exists in this data tenant: ${holder.type}/${holder.id}`,
      `${holder.type}.identifier`,
      { issueCode: 'duplicate', location: `${holder.type}/${holder.id}` },
    );
  }
}

/**
 * Claims the reservation of `identifier` for resource `id`; `fresh` assumes it is free without
 * reading it (a taken one makes the append conflict, and the retry reads it).
 * @throws {DuplicateIdentifier} 409 `duplicate` naming the holder (docs/interface.md §7).
 */
const claim = async (
  uow: UnitOfWork,
  type: ResourceType,
  tenantId: number,
  id: number,
  identifier: Identifier,
  fresh: boolean,
) => {
  const key = identifierKey(type, tenantId, identifier.system, identifier.value);
  await uow.decide(
    (uow.ctx.identifiers ?? UNKEYED_NAMING).stream(tenantId, key),
    reservationDecider,
    (state) => {
      if (state.status === 'claimed' && state.ownerId !== String(id))
        throw new DuplicateIdentifier({ type, id: Number(state.ownerId) }, identifier);
      return { type: 'ClaimReservation' as const, key, ownerType: type, ownerId: String(id), now: uow.now };
    },
    { fresh },
  );
};

/** Releases the reservation of `identifier` held by resource `id` (nothing when another holds it). */
const release = async (
  uow: UnitOfWork,
  type: ResourceType,
  tenantId: number,
  id: number,
  identifier: Identifier,
) => {
  await uow.decide(reservationOf(uow.ctx, type, tenantId, identifier), reservationDecider, {
    type: 'ReleaseReservation',
    ownerType: type,
    ownerId: String(id),
    now: uow.now,
  });
};

const minus = <T extends Identifier>(a: readonly T[], b: readonly T[]) =>
  a.filter((x) => !b.some((y) => sameIdentifier(x, y)));

export interface CreateOptions {
  /** Questionnaire: its project (docs/interface.md §5.3 rule 3). */
  readonly project?: string;
  /** Session user (`Practitioner/<id>`) who authors it, for `user/` scopes. */
  readonly author?: string;
  /**
   * Identifiers to reserve even on a type without unique identifiers: the match of a conditional
   * create, so that racing conditional creates converge on one resource.
   */
  readonly reserve?: readonly Identifier[];
}

/**
 * Creates a resource (FHIR create) with a new id.
 * @throws {DomainError} 409 duplicate identifier (with the holder's Location), 422 broken reference.
 */
export const createResource = async (
  uow: UnitOfWork,
  def: ResourceDefinition,
  tenantId: number,
  content: Content,
  options: CreateOptions = {},
): Promise<WriteResult> => {
  checkIdentifierCount(def, content);
  await checkReferences(uow, def, tenantId, content);
  const id = await allocateId(uow.ctx.sql, def.type);
  const reserved = def.uniqueIdentifiers ? identifiersOf(content) : (options.reserve ?? []);
  for (const identifier of reserved) {
    // A reservation this command has read (a conditional create's lookup) is claimed from that state.
    const read = uow.revision(reservationOf(uow.ctx, def.type, tenantId, identifier)) !== undefined;
    await claim(uow, def.type, tenantId, id, identifier, !read);
  }
  const decider = resourceDecider(def.type);
  await uow.decide(
    resourceStream(def.type, id),
    decider,
    {
      type: 'CreateResource',
      id,
      tenantId,
      resource: content,
      now: uow.now,
      ...(options.project !== undefined ? { project: options.project } : {}),
      ...(options.author !== undefined ? { author: options.author } : {}),
    },
    { fresh: true },
  );
  return { id, versionId: 1, lastUpdated: uow.now, created: true, content };
};

/**
 * `value` without empty arrays and objects, at any depth (FHIR R5 json.html: an empty array is not
 * valid FHIR JSON; it means the element is absent).
 */
const pruned = (value: unknown): unknown => {
  if (Array.isArray(value)) {
    const items = value.map(pruned).filter((v) => v !== undefined);
    return items.length > 0 ? items : undefined;
  }
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .map(([k, v]) => [k, pruned(v)] as const)
      .filter(([, v]) => v !== undefined);
    return entries.length > 0 ? Object.fromEntries(entries) : undefined;
  }
  return value;
};

/**
 * docs/interface.md §4.3 rule 3: a partial update keeps omitted elements; a given identifier list
 * replaces the old one (an empty list removes them: the element is then absent).
 */
const merged = (def: ResourceDefinition, current: Content, given: Content): Content =>
  (pruned(def.partialUpdate ? { ...current, ...given } : given) ?? {}) as Content;

/**
 * Updates resource `id` (FHIR update). `ifMatch` is the version the client read (If-Match).
 * @throws {DomainError} 404 missing, 410 deleted, 412 version mismatch, 409 duplicate identifier,
 *   422 broken reference.
 */
export const updateResource = async (
  uow: UnitOfWork,
  def: ResourceDefinition,
  tenantId: number,
  id: number,
  content: Content,
  options: { ifMatch?: number; mergeIdentifiers?: boolean; note?: ChangeNote } = {},
): Promise<WriteResult> => {
  const state = await loadResource(uow, def.type, id, tenantId);
  if (state.status === 'none') throw notFound(def.type, id);
  const stream = resourceStream(def.type, id);
  const current = uow.version(stream);
  if (options.ifMatch !== undefined && options.ifMatch !== current)
    throw versionMismatch(`${def.type}/${id}`, options.ifMatch, current);
  let next = merged(def, state.resource, content);
  if (options.mergeIdentifiers) {
    // docs/interface.md §4.3 rule 2: conditional update merges submitted identifiers with the existing ones.
    const existing = identifiersOf(state.resource);
    next = { ...next, identifier: [...existing, ...minus(identifiersOf(content), existing)] };
  }
  checkIdentifierCount(def, next, identifiersOf(state.resource).length);
  const decider = resourceDecider(def.type);
  const command = {
    type: 'UpdateResource' as const,
    resource: next,
    now: uow.now,
    ...(options.note ? { note: options.note } : {}),
  };
  // An update that changes nothing decides nothing (the decider is pure: asking first is free).
  if (decider.decide(command, state).length === 0)
    return { id, versionId: current, lastUpdated: state.lastUpdated, created: false, content: next };
  await checkReferences(uow, def, tenantId, next);
  const before = identifiersOf(state.resource);
  const after = identifiersOf(next);
  if (def.uniqueIdentifiers)
    for (const identifier of minus(after, before)) await claim(uow, def.type, tenantId, id, identifier, true);
  // Released too on types whose conditional creates reserve their match.
  for (const identifier of minus(before, after)) await release(uow, def.type, tenantId, id, identifier);
  await uow.decide(stream, decider, command);
  return { id, versionId: current + 1, lastUpdated: uow.now, created: false, content: next };
};

/**
 * Conditional update by identifier (docs/interface.md §4.3 rule 2): updates the resource matching `match`
 * (merging identifiers), or creates it with that identifier, reserving it. Racing calls for the
 * same new identifier converge: the losers' retries find the winner's resource and update it.
 * @param content the content to update with (partial for the clinical context resources).
 * @param createContent the content to create with, parsed as strictly as a create; called only
 *   when nothing matches (throws the create's validation errors).
 * @returns created: true when no resource matched (the data server still answers 200 for Patient).
 * @throws {DomainError} 412 multiple matches, and those of create and update.
 */
export const conditionalUpdate = async (
  uow: UnitOfWork,
  def: ResourceDefinition,
  tenantId: number,
  match: Identifier,
  content: Content,
  options: CreateOptions = {},
  createContent: () => Content = () => content,
): Promise<WriteResult> => {
  const withMatch = (c: Content) => {
    const given = identifiersOf(c);
    return { ...c, identifier: [...given, ...minus([match], given)] };
  };
  const id = await findMatch(uow, def, tenantId, match, 'identifier');
  if (id !== undefined)
    return updateResource(uow, def, tenantId, id, withMatch(content), { mergeIdentifiers: true });
  return createResource(uow, def, tenantId, withMatch(createContent()), { ...options, reserve: [match] });
};

/**
 * Deletes resource `id` permanently (docs/interface.md §4.3 rule 4): refused with 409 while live resources of
 * `def.deleteBlockedBy` reference it; its identifier reservations are released. Deleting a deleted
 * resource changes nothing.
 * @param referencedBy the live resources referencing it (from the read model): those the message
 *   may name (`Type/id`), and how many others there are.
 * @throws {DomainError} 404 missing, 409 referenced, 412 version mismatch.
 */
export const deleteResource = async (
  uow: UnitOfWork,
  def: ResourceDefinition,
  tenantId: number,
  id: number,
  referencedBy: () => Promise<{ readonly named: readonly string[]; readonly unnamed: number }>,
  options: { ifMatch?: number } = {},
): Promise<void> => {
  const state = await loadResource(uow, def.type, id, tenantId);
  if (state.status === 'none') throw notFound(def.type, id);
  const current = uow.version(resourceStream(def.type, id));
  if (options.ifMatch !== undefined && options.ifMatch !== current)
    throw versionMismatch(`${def.type}/${id}`, options.ifMatch, current);
  if (state.status === 'deleted') return;
  const { named, unnamed } = await referencedBy();
  if (named.length + unnamed > 0) {
    const list = [
      ...named.slice(0, 5),
      ...(named.length > 5 ? ['…'] : []),
      ...(unnamed > 0 ? [`${unnamed} resource${unnamed > 1 ? 's' : ''} the caller may not read`] : []),
    ];
    throw new DomainError(
      'conflict',
      'ResourceReferenced',
      `${def.type}/${id} is referenced by ${list.join(', ')}; delete those first`,
      undefined,
      { issueCode: 'conflict' },
    );
  }
  for (const identifier of identifiersOf(state.resource))
    await release(uow, def.type, tenantId, id, identifier);
  await uow.decide(resourceStream(def.type, id), resourceDecider(def.type), {
    type: 'DeleteResource',
    now: uow.now,
  });
};
