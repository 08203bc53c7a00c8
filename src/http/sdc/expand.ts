/**
 * `ValueSet/$expand` on the form backend (issue 4): answer lists for the web SDK from ValueSets
 * stored in the tenant or contained in a Questionnaire, with `filter`, `count` and `offset`.
 *
 * - `GET|POST /ValueSet/$expand`: `url` (a tenant ValueSet's canonical, or
 *   `<Questionnaire canonical>#<contained id>`), or `context` (`<Questionnaire canonical>#<contained
 *   ValueSet id or item linkId>`), or `questionnaire` with `valueSet`/`url` `#<contained id>`; POST
 *   also takes an inline ValueSet in the `valueSet` parameter.
 * - `GET|POST /ValueSet/{id}/$expand`: a stored ValueSet by id.
 *
 * GET reads the query string; POST reads Parameters (and the query string for what they lack).
 */
import type { Context } from 'koa';
import { DomainError } from '../../domain/decider.js';
import { DEFINITIONS } from '../../fhir/definitions.js';
import { idOf } from '../../fhir/resources.js';
import { read } from '../../queries/fhir.js';
import { expandValueSet } from '../../sdc/expand.js';
import type { CanonicalResolver, Json } from '../../sdc/types.js';
import { requireFhirJson } from '../fhir/media.js';
import { resolvePrincipal } from '../fhir/principal.js';
import { tenantResolver } from './resolve.js';
import type { RegisterOperation } from './router.js';

const FHIR_JSON = 'application/fhir+json';

/** The operation's inputs, from the query string or Parameters. */
interface ExpandRequest {
  url?: string;
  context?: string;
  questionnaire?: string;
  /** `#id` of a contained ValueSet (a string), or an inline ValueSet (POST). */
  valueSet?: string | Json;
  filter?: string;
  count?: number;
  offset?: number;
}

const STRING_PARAMETERS = ['url', 'context', 'questionnaire', 'valueSet', 'filter'] as const;
const INTEGER_PARAMETERS = ['count', 'offset'] as const;
/** Accepted and ignored: formatting, and expansion options casebook has nothing to vary. */
const IGNORED = new Set([
  '_format',
  '_pretty',
  'valueSetVersion',
  'displayLanguage',
  'includeDesignations',
  'activeOnly',
]);

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const notFound = (message: string, expression?: string) =>
  new DomainError('not_found', 'ValueSetNotFound', message, expression, { issueCode: 'not-found' });

/** A non-negative integer parameter. @throws {DomainError} 400 otherwise. */
const integerOf = (name: string, raw: unknown): number => {
  const n =
    typeof raw === 'number'
      ? raw
      : typeof raw === 'string' && /^\d{1,9}$/.test(raw)
        ? Number(raw)
        : Number.NaN;
  if (!Number.isInteger(n) || n < 0)
    throw new DomainError('invalid', 'InvalidParameter', `${name} must be a non-negative integer`, name);
  return n;
};

/** Reads the query string. @throws {DomainError} 400 for a repeated or malformed parameter. */
const fromQuery = (query: Context['query']): ExpandRequest => {
  const request: ExpandRequest = {};
  for (const [name, raw] of Object.entries(query)) {
    if (IGNORED.has(name)) continue;
    if (Array.isArray(raw)) throw new DomainError('invalid', 'RepeatedParameter', `give ${name} once`, name);
    if (raw === undefined || raw === '') continue;
    if ((STRING_PARAMETERS as readonly string[]).includes(name))
      request[name as (typeof STRING_PARAMETERS)[number]] = raw;
    else if ((INTEGER_PARAMETERS as readonly string[]).includes(name))
      request[name as (typeof INTEGER_PARAMETERS)[number]] = integerOf(name, raw);
    else
      throw new DomainError(
        'invalid',
        'UnsupportedParameter',
        `$expand does not support the parameter ${name} (supported: url, context, questionnaire, valueSet, filter, count, offset)`,
        name,
        { issueCode: 'not-supported' },
      );
  }
  return request;
};

/**
 * Reads a Parameters body over the query string's values.
 * @throws {DomainError} 400 for a body that is not Parameters or a malformed parameter.
 */
const fromParameters = (body: unknown, query: ExpandRequest): ExpandRequest => {
  if (body === undefined || (isObject(body) && Object.keys(body).length === 0)) return query;
  if (!isObject(body) || body.resourceType !== 'Parameters')
    throw new DomainError(
      'invalid',
      'InvalidBody',
      'POST $expand takes a Parameters resource',
      'resourceType',
    );
  const request: ExpandRequest = { ...query };
  const parameters = Array.isArray(body.parameter) ? body.parameter : [];
  parameters.forEach((p, i) => {
    const expression = `Parameters.parameter[${i}]`;
    if (!isObject(p) || typeof p.name !== 'string')
      throw new DomainError('invalid', 'InvalidParameter', 'every parameter needs a name', expression);
    const value = Object.entries(p).find(([k]) => k.startsWith('value'))?.[1];
    if (IGNORED.has(p.name)) return;
    if (p.name === 'valueSet' && p.resource !== undefined) {
      if (!isObject(p.resource) || p.resource.resourceType !== 'ValueSet')
        throw new DomainError(
          'invalid',
          'InvalidParameter',
          'the valueSet parameter must hold a ValueSet',
          expression,
        );
      request.valueSet = p.resource;
    } else if ((STRING_PARAMETERS as readonly string[]).includes(p.name)) {
      if (typeof value !== 'string')
        throw new DomainError('invalid', 'InvalidParameter', `${p.name} needs a string value`, expression);
      request[p.name as (typeof STRING_PARAMETERS)[number]] = value;
    } else if ((INTEGER_PARAMETERS as readonly string[]).includes(p.name))
      request[p.name as (typeof INTEGER_PARAMETERS)[number]] = integerOf(p.name, value);
    else
      throw new DomainError(
        'invalid',
        'UnsupportedParameter',
        `$expand does not support the parameter ${p.name}`,
        expression,
        { issueCode: 'not-supported' },
      );
  });
  return request;
};

/** A ValueSet contained in `questionnaire` by `#id` (or bare id). */
const containedValueSet = (questionnaire: Json, ref: string): Json | undefined => {
  const id = ref.startsWith('#') ? ref.slice(1) : ref;
  return (Array.isArray(questionnaire.contained) ? questionnaire.contained : []).find(
    (r): r is Json => isObject(r) && r.resourceType === 'ValueSet' && r.id === id,
  );
};

/** The answerValueSet of the item `linkId`, searched through the whole item tree. */
const answerValueSetOf = (items: unknown, linkId: string): string | undefined => {
  for (const item of Array.isArray(items) ? items : []) {
    if (!isObject(item)) continue;
    if (item.linkId === linkId && typeof item.answerValueSet === 'string') return item.answerValueSet;
    const nested = answerValueSetOf(item.item, linkId);
    if (nested) return nested;
  }
  return undefined;
};

/**
 * Finds the ValueSet a request names.
 * @throws {DomainError} 400 when it names none; 404 when the ValueSet or Questionnaire is unknown.
 */
const valueSetOf = async (request: ExpandRequest, resolve: CanonicalResolver): Promise<Json> => {
  if (isObject(request.valueSet)) return request.valueSet;
  const questionnaireNamed = async (canonical: string, expression: string) => {
    const found = await resolve('Questionnaire', canonical);
    if (!found) throw notFound(`no Questionnaire ${canonical} is known to this tenant`, expression);
    return found;
  };
  const byCanonical = async (canonical: string, expression: string): Promise<Json> => {
    const hash = canonical.indexOf('#');
    if (hash > 0) {
      const questionnaire = await questionnaireNamed(canonical.slice(0, hash), expression);
      const contained = containedValueSet(questionnaire, canonical.slice(hash));
      if (!contained)
        throw notFound(
          `Questionnaire ${canonical.slice(0, hash)} contains no ValueSet ${canonical.slice(hash)}`,
          expression,
        );
      return contained;
    }
    const found = await resolve('ValueSet', canonical);
    if (!found) throw notFound(`no ValueSet ${canonical} is known to this tenant`, expression);
    return found;
  };
  const local = [request.valueSet, request.url].find(
    (r): r is string => typeof r === 'string' && r.startsWith('#'),
  );
  if (local) {
    const owner = request.questionnaire ?? (request.context ? request.context.split('#')[0] : undefined);
    if (!owner)
      throw new DomainError(
        'invalid',
        'QuestionnaireRequired',
        `${local} is a contained ValueSet: name its Questionnaire (questionnaire or context)`,
        'questionnaire',
        { issueCode: 'required' },
      );
    const questionnaire = await questionnaireNamed(owner, 'questionnaire');
    const contained = containedValueSet(questionnaire, local);
    if (!contained) throw notFound(`Questionnaire ${owner} contains no ValueSet ${local}`, 'valueSet');
    return contained;
  }
  if (request.url) return byCanonical(request.url, 'url');
  if (typeof request.valueSet === 'string') return byCanonical(request.valueSet, 'valueSet');
  if (request.context) {
    const hash = request.context.indexOf('#');
    if (hash <= 0)
      throw new DomainError(
        'invalid',
        'InvalidContext',
        'context must be <Questionnaire canonical>#<contained ValueSet id or item linkId>',
        'context',
      );
    const owner = request.context.slice(0, hash);
    const fragment = request.context.slice(hash + 1);
    const questionnaire = await questionnaireNamed(owner, 'context');
    const contained = containedValueSet(questionnaire, fragment);
    if (contained) return contained;
    const answerValueSet = answerValueSetOf(questionnaire.item, fragment);
    if (!answerValueSet)
      throw notFound(
        `Questionnaire ${owner} has no ValueSet or item answerValueSet for ${fragment}`,
        'context',
      );
    if (answerValueSet.startsWith('#')) {
      const local = containedValueSet(questionnaire, answerValueSet);
      if (!local) throw notFound(`Questionnaire ${owner} contains no ValueSet ${answerValueSet}`, 'context');
      return local;
    }
    return byCanonical(answerValueSet, 'context');
  }
  throw new DomainError(
    'invalid',
    'ValueSetRequired',
    'name the ValueSet to expand: url, context, or questionnaire with valueSet=#id (or GET /ValueSet/{id}/$expand)',
    'url',
    { issueCode: 'required' },
  );
};

/**
 * Registers `GET|POST /ValueSet/$expand` and `GET|POST /ValueSet/{id}/$expand` (issue 4).
 * Answers the ValueSet with its `expansion`; 400 for missing or malformed parameters, 404
 * OperationOutcome for an unknown ValueSet or Questionnaire, 422 `not-supported` for a ValueSet
 * that includes a whole code system (see expandValueSet).
 */
export const register: RegisterOperation = (router, casebook) => {
  const expand = async (ctx: Context, id: string | undefined) => {
    if (ctx.method === 'POST' && ctx.request.length) requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const query = fromQuery(ctx.query);
    const request = ctx.method === 'POST' ? fromParameters(ctx.request.body, query) : query;
    let valueSet: Json;
    if (id !== undefined) {
      valueSet = (await read(casebook.sql, principal, DEFINITIONS.ValueSet, idOf('ValueSet', id))).resource;
    } else valueSet = await valueSetOf(request, tenantResolver(casebook, principal));
    ctx.status = 200;
    ctx.type = FHIR_JSON;
    ctx.body = expandValueSet(valueSet, {
      ...(request.filter !== undefined ? { filter: request.filter } : {}),
      ...(request.count !== undefined ? { count: request.count } : {}),
      ...(request.offset !== undefined ? { offset: request.offset } : {}),
      now: casebook.clock().toISOString(),
    });
  };
  router.get('/ValueSet/$expand', (ctx) => expand(ctx, undefined));
  router.post('/ValueSet/$expand', (ctx) => expand(ctx, undefined));
  router.get('/ValueSet/:id/$expand', (ctx) => expand(ctx, ctx.params.id));
  router.post('/ValueSet/:id/$expand', (ctx) => expand(ctx, ctx.params.id));
};
