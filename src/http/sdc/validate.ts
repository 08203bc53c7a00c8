import type { Casebook } from '../../casebook.js';
import { DomainError } from '../../domain/decider.js';
import type { Principal } from '../../fhir/access.js';
import { idInReference } from '../../fhir/references.js';
import { readIfVisible } from '../../queries/visibility.js';
import { usesAnswerExpressions } from '../../sdc/answer-expression.js';
import type { FhirPathEnv } from '../../sdc/fhirpath.js';
import type { Json, Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { validateResponse } from '../../sdc/validate.js';
import { evaluationBudget } from '../edge/budget.js';
import { FHIR_JSON, requireFhirJson } from '../fhir/media.js';
import { resolvePrincipal } from '../fhir/principal.js';
import { assembledForUse } from './assemble.js';
import { queryRun } from './query.js';
import { tenantResolver } from './resolve.js';
import type { RegisterOperation } from './router.js';

const isObject = (value: unknown): value is Json =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The response and the optional inline Questionnaire of a $validate body.
 * @throws {DomainError} 400 when the body is neither a QuestionnaireResponse nor a Parameters
 *   resource carrying one (and, if given, a Questionnaire).
 */
export const validateInput = (
  body: unknown,
): { response: QuestionnaireResponse; questionnaire: Questionnaire | undefined } => {
  if (!isObject(body))
    throw new DomainError(
      'invalid',
      'InvalidBody',
      'the body must be a QuestionnaireResponse or a Parameters resource (JSON object)',
    );
  if (body.resourceType === 'QuestionnaireResponse')
    return { response: body as QuestionnaireResponse, questionnaire: undefined };
  if (body.resourceType !== 'Parameters')
    throw new DomainError(
      'invalid',
      'WrongResourceType',
      `resourceType must be QuestionnaireResponse or Parameters, not ${JSON.stringify(body.resourceType ?? null)}`,
      'resourceType',
    );
  const parameters = Array.isArray(body.parameter) ? body.parameter : [];
  const named = (name: string): { index: number; resource: unknown } | undefined => {
    const index = parameters.findIndex((p) => isObject(p) && p.name === name);
    return index < 0 ? undefined : { index, resource: (parameters[index] as Json).resource };
  };
  const resource = named('resource');
  if (!resource)
    throw new DomainError(
      'invalid',
      'MissingParameter',
      'the Parameters need a `resource` parameter holding the QuestionnaireResponse',
      'Parameters.parameter',
      { issueCode: 'required' },
    );
  if (!isObject(resource.resource) || resource.resource.resourceType !== 'QuestionnaireResponse')
    throw new DomainError(
      'invalid',
      'WrongResourceType',
      'the `resource` parameter must hold a QuestionnaireResponse',
      `Parameters.parameter[${resource.index}].resource`,
    );
  const inline = named('questionnaire');
  if (inline && (!isObject(inline.resource) || inline.resource.resourceType !== 'Questionnaire'))
    throw new DomainError(
      'invalid',
      'WrongResourceType',
      'the `questionnaire` parameter must hold a Questionnaire resource',
      `Parameters.parameter[${inline.index}].resource`,
    );
  return {
    response: resource.resource as QuestionnaireResponse,
    questionnaire: inline?.resource as Questionnaire | undefined,
  };
};

/**
 * The Questionnaire a response contains (`questionnaire` `#id`; R5 Resource.contained, issue 35),
 * with the response's other contained resources beside its own: contained resources cannot nest,
 * so a ValueSet its `answerValueSet` `#vs` names is the response's sibling resource.
 */
const containedQuestionnaire = (
  response: QuestionnaireResponse,
  reference: string,
): Questionnaire | undefined => {
  const contained = (Array.isArray(response.contained) ? response.contained : []).filter(isObject);
  const found = contained.find((r) => r.resourceType === 'Questionnaire' && `#${String(r.id)}` === reference);
  if (!found) return undefined;
  const own = Array.isArray(found.contained) ? found.contained : [];
  const siblings = contained.filter((r) => r !== found);
  return {
    ...(found as unknown as Questionnaire),
    ...(own.length + siblings.length > 0 ? { contained: [...own, ...siblings] } : {}),
  };
};

/**
 * `%patient` for the form's answerExpressions (issue 35): the response's local `Patient/{id}`
 * subject as the caller may read it; nothing when the form computes no answers, the subject is
 * elsewhere, or the caller may not read it (then only the id is known, src/sdc/validate.ts).
 */
const subjectEnvironment = async (
  casebook: Casebook,
  principal: Principal,
  response: QuestionnaireResponse,
  form: Questionnaire,
): Promise<FhirPathEnv> => {
  if (!usesAnswerExpressions(form)) return {};
  const reference = (response.subject as { reference?: unknown } | undefined)?.reference;
  const id = typeof reference === 'string' ? idInReference(reference, 'Patient') : undefined;
  if (id === undefined) return {};
  const row = await readIfVisible(casebook.sql, principal, 'Patient', id);
  return row ? { patient: { ...row.resource, resourceType: 'Patient', id: String(row.id) } } : {};
};

/** Registers `POST /QuestionnaireResponse/$validate` (docs/interface.md §4.4). */
export const register: RegisterOperation = (router, casebook) => {
  router.post('/QuestionnaireResponse/$validate', async (ctx) => {
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const input = validateInput(ctx.request.body);
    const resolve = tenantResolver(casebook, principal);
    let questionnaire = input.questionnaire;
    if (!questionnaire) {
      const canonical = input.response.questionnaire;
      if (typeof canonical !== 'string' || canonical === '')
        throw new DomainError(
          'invalid',
          'QuestionnaireRequired',
          'the QuestionnaireResponse names no questionnaire: set QuestionnaireResponse.questionnaire or pass a `questionnaire` parameter',
          'QuestionnaireResponse.questionnaire',
          { issueCode: 'required' },
        );
      questionnaire = canonical.startsWith('#')
        ? containedQuestionnaire(input.response, canonical)
        : ((await resolve('Questionnaire', canonical)) as Questionnaire | undefined);
      if (!questionnaire)
        throw new DomainError(
          'unprocessable',
          'QuestionnaireNotFound',
          `Questionnaire ${canonical} is not known (or not readable with your scopes)`,
          'QuestionnaireResponse.questionnaire',
          { issueCode: 'not-found' },
        );
    }
    // SDC modular forms (issue 35): a form that needs assembling is assembled first.
    const budget = evaluationBudget(ctx);
    const form = await assembledForUse(questionnaire, resolve, budget);
    ctx.status = 200;
    ctx.type = FHIR_JSON;
    ctx.body = await validateResponse(input.response, form, {
      resolve,
      budget,
      environment: await subjectEnvironment(casebook, principal, input.response, form),
      // answerExpression queries (issue 35) run under the caller's scopes, within the query budget.
      queries: queryRun(ctx, casebook.sql, principal, casebook.config),
    });
  });
};
