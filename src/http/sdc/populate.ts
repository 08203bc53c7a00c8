/**
 * `POST /Questionnaire/$populate` and `POST /Questionnaire/{id}/$populate` on the form backend
 * (issue 4; docs/interface.md §4.4; SDC IG OperationDefinition Questionnaire-populate): reads the input
 * Parameters, resolves the Questionnaire (inline, by canonical, or the stored one) and context
 * references from the caller's tenant under its read scopes, and answers Parameters with the
 * populated `response` and, when there are any, the `issues`. Population itself is
 * src/sdc/populate.ts.
 */
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { DomainError } from '../../domain/decider.js';
import { isResourceType } from '../../domain/fhir/resource.js';
import type { Principal } from '../../fhir/access.js';
import { resourceIdIn } from '../../fhir/references.js';
import { idOf } from '../../fhir/resources.js';
import { readVisible } from '../../queries/visibility.js';
import { populate } from '../../sdc/populate.js';
import type { Json, Questionnaire } from '../../sdc/types.js';
import { noteAudit } from '../audit.js';
import { evaluationBudget } from '../edge/budget.js';
import { FHIR_JSON, requireFhirJson } from '../fhir/media.js';
import { resolvePrincipal } from '../fhir/principal.js';
import { assembledForUse } from './assemble.js';
import { queryBudget, queryRunner } from './query.js';
import { formResolver, tenantResolver } from './resolve.js';
import type { RegisterOperation } from './router.js';

/** The input parameters of SDC $populate this server reads (`local` is accepted and ignored). */
const PARAMETERS = ['questionnaire', 'canonical', 'url', 'questionnaireRef', 'subject', 'context', 'local'];

interface ParameterPart {
  readonly name?: unknown;
  readonly resource?: unknown;
  readonly part?: unknown;
  readonly [valueX: string]: unknown;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

const invalid = (message: string, expression?: string): DomainError =>
  new DomainError('invalid', 'InvalidPopulateParameters', message, expression);

const notFound = (message: string, expression?: string): DomainError =>
  new DomainError('not_found', 'ResourceNotFound', message, expression, { issueCode: 'not-found' });

/**
 * Checks the parts of a Questionnaire that population walks (items with a string linkId and type,
 * nested item arrays), so a malformed one is a 422 rather than silently skipped items.
 * @throws {DomainError} unprocessable with the FHIRPath of the first bad element.
 */
const checkQuestionnaire = (resource: Record<string, unknown>, path: string): Questionnaire => {
  const walk = (items: unknown, at: string): void => {
    if (items === undefined) return;
    if (!Array.isArray(items))
      throw new DomainError('unprocessable', 'InvalidQuestionnaire', `${at} must be an array`, at, {
        issueCode: 'structure',
      });
    items.forEach((item, i) => {
      const here = `${at}[${i}]`;
      if (!isObject(item) || typeof item.linkId !== 'string' || typeof item.type !== 'string')
        throw new DomainError(
          'unprocessable',
          'InvalidQuestionnaire',
          `${here} must be an item with a string linkId and type`,
          here,
          { issueCode: 'structure' },
        );
      walk(item.item, `${here}.item`);
    });
  };
  walk(resource.item, `${path}.item`);
  return resource as Questionnaire;
};

/** `Type/id` (relative, or absolute under this server's FHIR base) → its parts; undefined otherwise. */
const parseReference = (
  reference: string,
  bases: readonly string[],
): { type: string; id: string } | undefined => {
  let relative = reference;
  for (const base of bases) if (reference.startsWith(`${base}/`)) relative = reference.slice(base.length + 1);
  const match = /^([A-Z][A-Za-z]+)\/([^/]+)$/.exec(relative);
  return match ? { type: match[1]!, id: match[2]! } : undefined;
};

/**
 * Reads a referenced resource of the caller's tenant.
 * @throws {DomainError} 422 for an unsupported or malformed reference, 404 when it is not live in
 *   the tenant, 403 when the caller's scopes do not allow reading it.
 */
const readReferenced = async (
  ctx: Context,
  casebook: Casebook,
  principal: Principal,
  reference: unknown,
  expression: string,
): Promise<Json> => {
  if (!isObject(reference) || typeof reference.reference !== 'string')
    throw invalid(`${expression} must be a Reference with a reference (e.g. Patient/1)`, expression);
  const parsed = parseReference(reference.reference, [casebook.config.fhirUrl, casebook.config.sdcUrl]);
  if (!parsed || !isResourceType(parsed.type))
    throw new DomainError(
      'unprocessable',
      'UnsupportedReference',
      `${expression}: ${reference.reference} is not a reference to a resource this server holds (Type/id)`,
      expression,
      { issueCode: 'not-supported' },
    );
  const id = resourceIdIn(parsed.id);
  // src/queries/visibility.ts: a context resource the caller may not read is refused (403), never used.
  const row = id === undefined ? undefined : await readVisible(casebook.sql, principal, parsed.type, id);
  if (!row || row.deleted) throw notFound(`${expression}: ${reference.reference} is not known`, expression);
  // Issue 14: the operation read this resource; its AuditEvent names it with its patient.
  noteAudit(ctx, { entities: [{ reference: `${row.resourceType}/${row.id}`, patientId: row.patientId }] });
  return row.resource as Json;
};

/** The value[x] of a parameter (its only `value…` element). */
const parameterValue = (part: ParameterPart): [string, unknown] | undefined => {
  const key = Object.keys(part).find((k) => k.startsWith('value'));
  return key ? [key, part[key]] : undefined;
};

/**
 * Handles one $populate request. `storedId` is the `{id}` of the instance-level operation.
 * @throws {DomainError|HttpError} 400 for a body that is not Parameters or bad parameters, 401
 *   without credentials, 403/404 for an unreadable Questionnaire or context resource, 415 for
 *   another content type, 422 for an unsupported reference or malformed Questionnaire.
 */
const handle = async (ctx: Context, casebook: Casebook, storedId?: string): Promise<void> => {
  requireFhirJson(ctx);
  const principal = await resolvePrincipal(ctx, casebook);
  const body: unknown = ctx.request.body;
  if (!isObject(body) || body.resourceType !== 'Parameters')
    throw invalid('the body must be a Parameters resource (SDC $populate input parameters)', 'Parameters');
  if (body.parameter !== undefined && !Array.isArray(body.parameter))
    throw invalid('Parameters.parameter must be an array', 'Parameters.parameter');
  const parameters = (body.parameter ?? []) as unknown[];

  let questionnaire: Questionnaire | undefined;
  let questionnaireFrom: string | undefined;
  let questionnaireReference: string | undefined;
  const setQuestionnaire = (q: Questionnaire, from: string, stored: boolean | string = false) => {
    if (questionnaireFrom)
      throw invalid(`give the Questionnaire once (${questionnaireFrom} and ${from})`, from);
    questionnaire = q;
    questionnaireFrom = from;
    if (typeof stored === 'string') questionnaireReference = stored;
    else if (stored && typeof q.id === 'string') questionnaireReference = `Questionnaire/${q.id}`;
  };
  if (storedId !== undefined) {
    const id = idOf('Questionnaire', storedId);
    const row = await readVisible(casebook.sql, principal, 'Questionnaire', id);
    if (!row || row.deleted) throw notFound(`Questionnaire/${id} is not known`);
    setQuestionnaire(row.resource as Questionnaire, `Questionnaire/${id}`, `Questionnaire/${id}`);
  }

  let subject: Json | undefined;
  const context: { name: string; content: Json }[] = [];
  const resolver = tenantResolver(casebook, principal);
  for (const [index, raw] of parameters.entries()) {
    const at = `Parameters.parameter[${index}]`;
    if (!isObject(raw) || typeof raw.name !== 'string')
      throw invalid(`${at} must be a parameter with a name`, at);
    const part = raw as ParameterPart;
    const value = parameterValue(part);
    switch (raw.name) {
      case 'questionnaire': {
        // SDC 4.0: the Questionnaire itself, or its canonical (`url` or `url|version`).
        if (value && /^value(Canonical|Uri|Url)$/.test(value[0])) {
          if (typeof value[1] !== 'string' || value[1] === '')
            throw invalid(`${at} (questionnaire) must be a canonical URL`, at);
          const found = await resolver('Questionnaire', value[1]);
          if (!found) throw notFound(`no Questionnaire with canonical ${value[1]} is available`, at);
          setQuestionnaire(checkQuestionnaire(found, at), at, true);
          break;
        }
        const resource = part.resource;
        if (!isObject(resource) || resource.resourceType !== 'Questionnaire')
          throw invalid(
            `${at} (questionnaire) must carry a Questionnaire resource or a valueCanonical`,
            `${at}.resource`,
          );
        setQuestionnaire(checkQuestionnaire(resource, `${at}.resource`), at);
        break;
      }
      case 'canonical':
      case 'url': {
        if (!value || typeof value[1] !== 'string' || !/^value(Canonical|Uri|Url|String)$/.test(value[0]))
          throw invalid(`${at} (${raw.name}) must be a valueCanonical or valueUri`, at);
        const found = await resolver('Questionnaire', value[1]);
        if (!found) throw notFound(`no Questionnaire with canonical ${value[1]} is available`, at);
        setQuestionnaire(found as Questionnaire, at, true);
        break;
      }
      case 'questionnaireRef': {
        const reference = value?.[0] === 'valueReference' ? value[1] : undefined;
        const found = await readReferenced(ctx, casebook, principal, reference, at);
        if (found.resourceType !== 'Questionnaire')
          throw invalid(`${at} (questionnaireRef) must reference a Questionnaire`, at);
        setQuestionnaire(found as Questionnaire, at, true);
        break;
      }
      case 'subject': {
        if (value?.[0] !== 'valueReference' || !isObject(value[1]) || typeof value[1].reference !== 'string')
          throw invalid(`${at} (subject) must be a valueReference with a reference`, at);
        if (subject) throw invalid('give subject once', at);
        // Copied as it is: a subject on another server stays that server's reference (issue 35).
        subject = value[1] as Json;
        break;
      }
      case 'context': {
        const parts = Array.isArray(part.part) ? (part.part as unknown[]) : [];
        const nameIndex = parts.findIndex((p) => isObject(p) && p.name === 'name');
        const contentIndex = parts.findIndex((p) => isObject(p) && p.name === 'content');
        const namePart = parts[nameIndex] as ParameterPart | undefined;
        const contentPart = parts[contentIndex] as ParameterPart | undefined;
        const name = namePart ? parameterValue(namePart)?.[1] : undefined;
        if (typeof name !== 'string' || !name)
          throw invalid(`${at} (context) needs a part name with a valueString`, `${at}.part`);
        if (!contentPart)
          throw invalid(
            `${at} (context ${name}) needs a part content (a resource or valueReference)`,
            `${at}.part`,
          );
        const contentAt = `${at}.part[${contentIndex}]`;
        if (isObject(contentPart.resource) && typeof contentPart.resource.resourceType === 'string')
          context.push({ name, content: contentPart.resource as Json });
        else if (isObject(contentPart.valueReference))
          context.push({
            name,
            content: await readReferenced(ctx, casebook, principal, contentPart.valueReference, contentAt),
          });
        else
          throw invalid(`${contentAt} (context ${name}) must be a resource or a valueReference`, contentAt);
        break;
      }
      case 'local':
        break;
      default:
        throw new DomainError(
          'invalid',
          'UnsupportedParameter',
          `${at}: parameter ${raw.name} is not supported by $populate (supported: ${PARAMETERS.join(', ')})`,
          at,
          { issueCode: 'not-supported' },
        );
    }
  }
  if (!questionnaire)
    throw new DomainError(
      'invalid',
      'QuestionnaireRequired',
      'name the Questionnaire: a questionnaire (resource), canonical or questionnaireRef parameter, or POST /Questionnaire/{id}/$populate',
      'Parameters.parameter',
      { issueCode: 'required' },
    );

  // SDC modular forms (issue 35): a form that needs assembling is assembled first.
  const budget = evaluationBudget(ctx);
  const form = await assembledForUse(questionnaire, resolver, budget);
  const { response, issues } = await populate({
    budget,
    questionnaire: form,
    ...(questionnaireReference ? { questionnaireReference } : {}),
    ...(subject ? { subject } : {}),
    context,
    // answerValueSets with the form's rights (src/http/sdc/resolve.ts), like the report editor.
    resolve: formResolver(casebook, principal, form),
    query: queryRunner(ctx, casebook.sql, principal, casebook.config.fhirUrl),
    queryBudget: queryBudget(ctx),
    fhirBases: [casebook.config.fhirUrl, casebook.config.sdcUrl],
    now: casebook.clock(),
  });
  // QuestionnaireResponse.questionnaire is 1..1 in R5 (issue 13): an inline Questionnaire with no
  // url (and not stored) travels contained in the response, and the caller is told.
  let populated = response;
  let allIssues = issues;
  if (!response.questionnaire) {
    populated = {
      ...response,
      contained: [{ ...form, id: 'questionnaire' }],
      questionnaire: '#questionnaire',
    } as typeof response;
    allIssues = {
      ...issues,
      issue: [
        ...issues.issue,
        {
          severity: 'warning',
          code: 'required',
          diagnostics:
            'the Questionnaire has no url and is not stored: the response refers to a copy contained in it (#questionnaire); give the Questionnaire a url to refer to it',
          expression: ['Questionnaire.url'],
        },
      ],
    };
  }
  ctx.status = 200;
  ctx.type = FHIR_JSON;
  ctx.body = {
    resourceType: 'Parameters',
    parameter: [
      { name: 'response', resource: populated },
      ...(allIssues.issue.length > 0 ? [{ name: 'issues', resource: allIssues }] : []),
    ],
  };
};

/** Registers `$populate` (type and instance level) on the form-backend router. */
export const register: RegisterOperation = (router, casebook) => {
  router.post('/Questionnaire/$populate', (ctx) => handle(ctx, casebook));
  router.post('/Questionnaire/:id/$populate', (ctx) => handle(ctx, casebook, ctx.params.id));
};
