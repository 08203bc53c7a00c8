/**
 * Parsing what a FHIR request names and carries, shared by every host that writes resources: the
 * resource type, the id, If-Match, token search values and resource bodies (docs/interface.md
 * §2.5–2.6, §4.3). These are FHIR rules, not HTTP: the data server, the transaction Bundle, the
 * app host and the launcher use them alike.
 */
import { ZodError, type z } from 'zod';
import { DomainError } from '../domain/decider.js';
import { type Content, isResourceType } from '../domain/fhir/resource.js';
import { DEFINITIONS, type ResourceDefinition } from './definitions.js';
import { findPrimitiveViolations } from './primitives.js';
import { resourceIdIn } from './references.js';

/** Tag system naming a Questionnaire's project on create (docs/interface.md §5.3 rule 3). */
export const PROJECT_TAG_SYSTEM = 'https://casebook.dev/fhir/CodeSystem/project';

/** A resource body that failed validation: answered 422 with one issue per problem. */
export class ResourceValidationError extends Error {
  constructor(
    readonly resourceType: string,
    readonly zodError: ZodError,
    /** The body that failed, to tell a missing element (`required`) from a wrong one (`invalid`). */
    readonly body?: unknown,
  ) {
    super(`invalid ${resourceType}`);
  }
}

/** The definition of a resource type named in a request. @throws {DomainError} 404 for other types. */
export const definitionOf = (type: string): ResourceDefinition => {
  if (!isResourceType(type))
    throw new DomainError(
      'not_found',
      'UnsupportedResourceType',
      `resource type ${type} is not supported by this server`,
      undefined,
      { issueCode: 'not-supported' },
    );
  return DEFINITIONS[type];
};

/** A resource id as an integer. @throws {DomainError} 404 when it is not one (ids are integers of at most 2,147,483,647, docs/interface.md §8). */
export const idOf = (type: string, raw: string | undefined): number => {
  const id = raw === undefined ? undefined : resourceIdIn(raw);
  if (id === undefined)
    throw new DomainError(
      'not_found',
      'ResourceNotFound',
      `${type}/${raw ?? ''} is not known (ids are integers)`,
      undefined,
      { issueCode: 'not-found' },
    );
  return id;
};

/**
 * Parses a request body as a resource of `def.type`.
 * @throws {DomainError} 400 when it is not a JSON object of that resourceType;
 *   {ResourceValidationError} 422 with one issue per problem.
 */
export const parseResource = (def: ResourceDefinition, body: unknown, mode: 'create' | 'update'): Content => {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    throw new DomainError('invalid', 'InvalidBody', `the body must be a ${def.type} resource (JSON object)`);
  const resourceType = (body as { resourceType?: unknown }).resourceType;
  if (resourceType !== def.type)
    throw new DomainError(
      'invalid',
      'WrongResourceType',
      `resourceType must be ${def.type}, not ${JSON.stringify(resourceType ?? null)}`,
      'resourceType',
    );
  // Typed primitives anywhere in the body (`valueInteger` beyond 32 bits, `valueDate` of year
  // 0000…), beside what the type's schema checks: every problem in one answer.
  const primitives: z.core.$ZodIssue[] = findPrimitiveViolations(body).map((v) => ({
    code: 'custom',
    path: [...v.path],
    message: `must be ${v.rule}`,
    input: undefined,
  }));
  let content: Content;
  try {
    content = def.parse(body, mode);
  } catch (error) {
    if (error instanceof ZodError)
      throw new ResourceValidationError(def.type, new ZodError([...error.issues, ...primitives]), body);
    throw error;
  }
  if (primitives.length > 0) throw new ResourceValidationError(def.type, new ZodError(primitives), body);
  return content;
};

/**
 * The HTTP status of a conditional update (as an interaction or a transaction entry): 201 when it
 * created the resource, 200 when it updated one — except a Patient, which answers 200 either way
 * (docs/interface.md §4.3 rules 2 and 12: a deliberate deviation from FHIR the interface demands).
 */
export const conditionalUpdateStatus = (type: string, created: boolean): 200 | 201 =>
  created && type !== 'Patient' ? 201 : 200;

/** `If-Match: W/"3"` (or `"3"`) → 3; undefined without one. @throws {DomainError} 400 when malformed. */
export const ifMatchOf = (header: string | undefined): number | undefined => {
  if (!header) return undefined;
  const match = /^(?:W\/)?"(\d{1,10})"$/.exec(header.trim());
  if (!match)
    throw new DomainError(
      'invalid',
      'InvalidIfMatch',
      `If-Match must be a version ETag such as W/"3", not ${header}`,
    );
  return Number(match[1]);
};

/** A token search value: `system|value`, `|value` (no system) or `value` (any system). */
export interface Token {
  readonly system: string | undefined;
  readonly value: string;
}

/** Parses a token search value (`identifier=system|value`). */
export const tokenOf = (raw: string): Token => {
  const bar = raw.indexOf('|');
  return bar < 0
    ? { system: undefined, value: raw }
    : { system: raw.slice(0, bar), value: raw.slice(bar + 1) };
};

/** The content of a stored resource without what the server owns (resourceType, id, meta). */
export const stripServerElements = (resource: Record<string, unknown>): Content => {
  const { resourceType: _r, id: _i, meta: _m, ...content } = resource;
  return content;
};
