/**
 * The FHIR write interactions of the application layer (docs/interface.md §4.3, §5.3; issue 3):
 * create, conditional create (If-None-Exist), update, conditional update and delete, each with its
 * scope checks, as decisions inside a {@link UnitOfWork}. The data server's routes, the
 * transaction Bundle, the app host and the launcher all write through these, so a resource is
 * checked and stored the same way whichever host wrote it.
 */
import { ZodError } from 'zod';
import { DomainError } from '../domain/decider.js';
import {
  type ChangeNote,
  type Content,
  type ResourceState,
  type ResourceType,
  resourceStream,
} from '../domain/fhir/resource.js';
import {
  type AccessTarget,
  authorize,
  type Principal,
  scopesOwner,
  targetOfContent,
} from '../fhir/access.js';
import type { ResourceDefinition } from '../fhir/definitions.js';
import { compartmentOf } from '../fhir/references.js';
import {
  PROJECT_TAG_SYSTEM,
  parseResource,
  ResourceValidationError,
  type Token,
  tokenOf,
} from '../fhir/resources.js';
import { referencingResources } from '../queries/resources.js';
import { visibleTo } from '../queries/visibility.js';
import { questionnaireProblems } from '../sdc/engine/definition-rules.js';
import type { Questionnaire } from '../sdc/types.js';
import type { UnitOfWork } from './handler.js';
import {
  createResource,
  DuplicateIdentifier,
  deleteResource,
  findMatch,
  loadResource,
  lookupStreams,
  updateResource,
  versionOf,
  type WriteResult,
} from './resources.js';

/**
 * A resource's content for a write: the type's schema (src/fhir/resources.ts parseResource) and,
 * for a Questionnaire, its own rules (R5 que-1 … que-15 and the item rules of
 * src/sdc/engine/definition-rules.ts, issue 35; docs/interface.md §2.6), which $validate shares.
 * @throws {ResourceValidationError} 422 naming each item (`Questionnaire.item[2].item[0]`).
 */
const parseContent = (def: ResourceDefinition, body: unknown, mode: 'create' | 'update') => {
  const content = parseResource(def, body, mode);
  if (def.type !== 'Questionnaire') return content;
  const issues = questionnaireProblems(body as Questionnaire)
    .filter((problem) => problem.severity === 'error')
    .map((problem) => ({
      code: 'custom' as const,
      path: [...problem.path],
      message: problem.diagnostics,
      input: undefined,
    }));
  if (issues.length > 0) throw new ResourceValidationError(def.type, new ZodError(issues), body);
  return content;
};
/** The scope-relevant facts of a resource as a command sees it (its stream's state). */
export const targetOfState = (type: ResourceType, id: number, state: ResourceState): AccessTarget =>
  state.status === 'none'
    ? { resourceType: type, id }
    : {
        resourceType: type,
        id,
        patientId: compartmentOf(type, id, state.resource).patientId ?? null,
        author: state.author ?? null,
        project: state.project ?? null,
        content: state.resource,
      };

const notFound = (type: ResourceType, id: number) =>
  new DomainError('not_found', 'ResourceNotFound', `${type}/${id} is not known`, undefined, {
    issueCode: 'not-found',
  });

const gone = (type: ResourceType, id: number) =>
  new DomainError('gone', 'ResourceDeleted', `${type}/${id} was deleted`, undefined, {
    issueCode: 'deleted',
  });

/**
 * The project a new Questionnaire belongs to: its `meta.tag` of {@link PROJECT_TAG_SYSTEM}, or the
 * caller's only project (docs/interface.md §5.3 rule 3).
 * @throws {DomainError} 422 when the caller has several projects and the tag names none.
 */
export const projectOf = (principal: Principal, body: unknown): string => {
  const tags = ((body as { meta?: { tag?: unknown } }).meta?.tag ?? []) as {
    system?: unknown;
    code?: unknown;
  }[];
  const tagged = Array.isArray(tags) ? tags.find((t) => t?.system === PROJECT_TAG_SYSTEM)?.code : undefined;
  if (typeof tagged === 'string') return tagged;
  if (principal.projects.length === 1) return principal.projects[0]!;
  throw new DomainError(
    'unprocessable',
    'ProjectRequired',
    `name the Questionnaire's project in meta.tag (system ${PROJECT_TAG_SYSTEM}); the caller has ${principal.projects.length} projects`,
    'Questionnaire.meta.tag',
    { issueCode: 'required' },
  );
};

const authorOf = (principal: Principal) => principal.userRef ?? undefined;

/**
 * Runs a write that may claim identifiers. A 409 `duplicate` names the resource holding the
 * identifier (its message and `Location`) only to a caller that may read it: to any other it says
 * only that the identifier is taken, so a caller cannot learn which resource holds another
 * patient's identifier (docs/interface.md §4.3 rule 1; src/queries/visibility.ts).
 * @throws {DomainError} the write's errors, a duplicate without its holder for such a caller.
 */
const namingReadableHolder = async <T>(
  uow: UnitOfWork,
  principal: Principal,
  write: () => Promise<T>,
): Promise<T> => {
  try {
    return await write();
  } catch (error) {
    if (!(error instanceof DuplicateIdentifier)) throw error;
    const { type, id } = error.holder;
    const holder = await loadResource(uow, type, id, principal.tenantId);
    if (visibleTo(principal, targetOfState(type, id, holder))) throw error;
    throw new DomainError(
      'conflict',
      'DuplicateIdentifier',
      `a ${type} with this identifier already exists in this data tenant`,
      error.expression,
      { issueCode: 'duplicate' },
    );
  }
};

/**
 * The resource a conditional interaction matched, when the caller may read it: its answer shows
 * it (the match itself, or the resource updated). A match the caller may not read is refused
 * without naming it.
 * @throws {DomainError} 403 `forbidden`.
 */
const readableMatch = (
  principal: Principal,
  type: ResourceType,
  target: AccessTarget,
  expression: string,
): AccessTarget => {
  if (!visibleTo(principal, target))
    throw new DomainError(
      'forbidden',
      'ScopeNotGranted',
      `${expression} matches a ${type} that ${scopesOwner(principal)} scopes do not allow reading`,
      expression,
      { issueCode: 'forbidden' },
    );
  return target;
};

/**
 * Refuses content that points the readers of a resource at resources its writer may not read
 * (`ResourceDefinition.shownWith`: a Task's Patient, Encounter and QuestionnaireResponses, which
 * the app host opens; docs/interface.md §2.6). References to nothing are left to the reference
 * checks; the append checks that the referenced resources did not change meanwhile.
 * @throws {DomainError} 403 `forbidden` naming the element.
 */
const checkShownWith = async (
  uow: UnitOfWork,
  principal: Principal,
  def: ResourceDefinition,
  content: Content,
): Promise<void> => {
  const references = def.shownWith(content);
  if (references.length === 0) return;
  await uow.loadAll(
    lookupStreams(
      uow.ctx,
      principal.tenantId,
      references.map((r) => ({ type: r.resourceType, id: r.id })),
    ),
  );
  for (const ref of references) {
    const state = await loadResource(uow, ref.resourceType, ref.id, principal.tenantId);
    if (state.status === 'none') continue;
    uow.require(resourceStream(ref.resourceType, ref.id));
    if (!visibleTo(principal, targetOfState(ref.resourceType, ref.id, state)))
      throw new DomainError(
        'forbidden',
        'ReferenceNotReadable',
        `${def.type}.${ref.expression}: ${scopesOwner(principal)} scopes do not allow reading the ${ref.resourceType} it references`,
        `${def.type}.${ref.expression}`,
        { issueCode: 'forbidden' },
      );
  }
};

/**
 * FHIR create (POST /{type}).
 * @throws {DomainError} 400/422 invalid body, 403 scopes, 409 duplicate identifier, 422 broken reference.
 */
export const create = async (
  uow: UnitOfWork,
  principal: Principal,
  def: ResourceDefinition,
  body: unknown,
): Promise<WriteResult> => {
  const content = parseContent(def, body, 'create');
  const project = def.type === 'Questionnaire' ? projectOf(principal, body) : undefined;
  const author = authorOf(principal);
  authorize(
    principal,
    'c',
    targetOfContent(def.type, undefined, content, { author: author ?? null, project: project ?? null }),
  );
  await checkShownWith(uow, principal, def, content);
  return namingReadableHolder(uow, principal, () =>
    createResource(uow, def, principal.tenantId, content, {
      ...(project !== undefined ? { project } : {}),
      ...(author !== undefined ? { author } : {}),
    }),
  );
};

/** The match of an If-None-Exist / ifNoneExist (`identifier=system|value` only). @throws {DomainError} 400. */
export const ifNoneExistToken = (ifNoneExist: string, expression: string): Token => {
  const params = new URLSearchParams(ifNoneExist);
  const identifier = params.get('identifier');
  if (!identifier || [...params.keys()].some((k) => k !== 'identifier'))
    throw new DomainError(
      'invalid',
      'UnsupportedIfNoneExist',
      `${expression} supports identifier=system|value only`,
      expression,
    );
  return tokenOf(identifier);
};

/**
 * FHIR conditional create (POST with If-None-Exist): the resource matching `token` when there is
 * one (created: false; the caller must be allowed to read it, since answering reveals it), else a
 * create that reserves the match, so racing conditional creates converge on one resource.
 * @throws {DomainError} 412 multiple matches, 403, and those of {@link create}.
 */
export const conditionalCreate = async (
  uow: UnitOfWork,
  principal: Principal,
  def: ResourceDefinition,
  token: Token,
  body: unknown,
  expression: string,
): Promise<WriteResult> => {
  const match = await findMatch(uow, def, principal.tenantId, token, expression);
  if (match !== undefined) {
    const state = await loadResource(uow, def.type, match, principal.tenantId);
    if (state.status !== 'active') throw notFound(def.type, match);
    readableMatch(principal, def.type, targetOfState(def.type, match, state), expression);
    return {
      id: match,
      versionId: versionOf(uow, def.type, match),
      lastUpdated: state.lastUpdated,
      created: false,
      content: state.resource,
    };
  }
  const content = parseContent(def, body, 'create');
  const project = def.type === 'Questionnaire' ? projectOf(principal, body) : undefined;
  const author = authorOf(principal);
  authorize(
    principal,
    'c',
    targetOfContent(def.type, undefined, content, { author: author ?? null, project: project ?? null }),
  );
  await checkShownWith(uow, principal, def, content);
  return namingReadableHolder(uow, principal, () =>
    createResource(uow, def, principal.tenantId, content, {
      ...(project !== undefined ? { project } : {}),
      ...(author !== undefined ? { author } : {}),
      ...(token.system ? { reserve: [{ system: token.system, value: token.value }] } : {}),
    }),
  );
};

/**
 * FHIR update (PUT /{type}/{id}); partial for the clinical context resources (docs/interface.md §4.3 rule 3).
 * `note`: the reason (and author) kept in the event, for an amendment or entered-in-error.
 * @throws {DomainError} 400 id mismatch, 404, 410, 412 If-Match, 403 scopes (before and after),
 *   409 duplicate identifier, 422 invalid body or broken reference.
 */
export const update = async (
  uow: UnitOfWork,
  principal: Principal,
  def: ResourceDefinition,
  id: number,
  body: unknown,
  ifMatch?: number,
  note?: ChangeNote,
): Promise<WriteResult> => {
  const content = parseContent(def, body, def.partialUpdate ? 'update' : 'create');
  const bodyId = (body as { id?: unknown }).id;
  if (bodyId !== undefined && String(bodyId) !== String(id))
    throw new DomainError(
      'invalid',
      'IdMismatch',
      `the body's id ${JSON.stringify(bodyId)} differs from the URL's ${id}`,
      `${def.type}.id`,
    );
  const state = await loadResource(uow, def.type, id, principal.tenantId);
  if (state.status === 'none') throw notFound(def.type, id);
  authorize(principal, 'u', targetOfState(def.type, id, state));
  if (state.status === 'deleted') throw gone(def.type, id);
  const next = def.partialUpdate ? { ...state.resource, ...content } : content;
  authorize(
    principal,
    'u',
    targetOfContent(def.type, id, next, { author: state.author ?? null, project: state.project ?? null }),
  );
  await checkShownWith(uow, principal, def, next);
  return namingReadableHolder(uow, principal, () =>
    updateResource(uow, def, principal.tenantId, id, content, {
      ...(ifMatch !== undefined ? { ifMatch } : {}),
      ...(note ? { note } : {}),
    }),
  );
};

/**
 * FHIR conditional update (PUT /{type}?identifier=system|value; docs/interface.md §4.3 rule 2): updates the
 * match, merging identifiers, or creates the resource with the identifier.
 * @returns created: true when nothing matched.
 * @throws {DomainError} 422 without identifier, or when creating without a system; 412 multiple
 *   matches; those of create and update.
 */
export const conditionalUpdate = async (
  uow: UnitOfWork,
  principal: Principal,
  def: ResourceDefinition,
  identifier: string | undefined,
  body: unknown,
): Promise<WriteResult> => {
  // docs/interface.md §4.3 rule 2, §7: conditional update needs the identifier query parameter.
  if (!identifier)
    throw new DomainError(
      'unprocessable',
      'IdentifierRequired',
      `conditional update needs ?identifier=system|value (PUT ${def.type}?identifier=…)`,
      'identifier',
      { issueCode: 'required' },
    );
  const token = tokenOf(identifier);
  const content = parseContent(def, body, def.partialUpdate ? 'update' : 'create');
  const withMatch = (c: Content): Content => {
    if (!token.system) return c;
    const given = Array.isArray(c.identifier)
      ? (c.identifier as { system?: unknown; value?: unknown }[])
      : [];
    const present = given.some((i) => i?.system === token.system && i?.value === token.value);
    return present ? c : { ...c, identifier: [...given, { system: token.system, value: token.value }] };
  };
  const id = await findMatch(uow, def, principal.tenantId, token, 'identifier');
  if (id !== undefined) {
    const state = await loadResource(uow, def.type, id, principal.tenantId);
    authorize(
      principal,
      'u',
      readableMatch(principal, def.type, targetOfState(def.type, id, state), 'identifier'),
    );
    const merged = withMatch(content);
    if (state.status !== 'none')
      await checkShownWith(
        uow,
        principal,
        def,
        def.partialUpdate ? { ...state.resource, ...merged } : merged,
      );
    return namingReadableHolder(uow, principal, () =>
      updateResource(uow, def, principal.tenantId, id, merged, { mergeIdentifiers: true }),
    );
  }
  if (!token.system)
    throw new DomainError(
      'unprocessable',
      'IdentifierSystemRequired',
      `no ${def.type} matches; to create one the identifier needs a system (identifier=system|value)`,
      'identifier',
      { issueCode: 'required' },
    );
  // Creating validates like a create (required elements), not like a partial update.
  const created = withMatch(parseContent(def, body, 'create'));
  // A Questionnaire created here belongs to a project like one created by POST (docs/interface.md §5.3 rule 3).
  const project = def.type === 'Questionnaire' ? projectOf(principal, body) : undefined;
  const author = authorOf(principal);
  authorize(
    principal,
    'c',
    targetOfContent(def.type, undefined, created, { author: author ?? null, project: project ?? null }),
  );
  await checkShownWith(uow, principal, def, created);
  const reserve = [{ system: token.system, value: token.value }];
  return namingReadableHolder(uow, principal, () =>
    createResource(uow, def, principal.tenantId, created, {
      ...(project !== undefined ? { project } : {}),
      ...(author !== undefined ? { author } : {}),
      reserve,
    }),
  );
};

/**
 * FHIR delete (docs/interface.md §4.3 rule 4): refused with 409 while live resources reference it.
 * @throws {DomainError} 404, 403, 409 referenced, 412 If-Match.
 */
export const remove = async (
  uow: UnitOfWork,
  principal: Principal,
  def: ResourceDefinition,
  id: number,
  ifMatch?: number,
): Promise<{ readonly patientId: number | null }> => {
  const state = await loadResource(uow, def.type, id, principal.tenantId);
  if (state.status === 'none') throw notFound(def.type, id);
  const target = targetOfState(def.type, id, state);
  authorize(principal, 'd', target);
  const column = def.type === 'Patient' ? 'patient_id' : 'encounter_id';
  await deleteResource(
    uow,
    def,
    principal.tenantId,
    id,
    async () => {
      // The 409 names only the referencing resources the caller may read, and counts the others.
      const referencing = await referencingResources(
        uow.ctx.sql,
        principal.tenantId,
        column,
        id,
        def.deleteBlockedBy,
      );
      const named = referencing
        .filter((r) => visibleTo(principal, r))
        .map((r) => `${r.resourceType}/${r.id}`);
      return { named, unnamed: referencing.length - named.length };
    },
    ifMatch !== undefined ? { ifMatch } : {},
  );
  return { patientId: target.patientId ?? null };
};
