import { ZodError, z } from 'zod';
import { DomainError } from '../../domain/decider.js';
import { ResourceValidationError } from '../../fhir/resources.js';
import { extract } from '../../sdc/extract.js';
import type { Json, Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { evaluationBudget } from '../edge/budget.js';
import { requireFhirJson } from '../fhir/media.js';
import { resolvePrincipal } from '../fhir/principal.js';
import { tenantResolver } from './resolve.js';
import type { RegisterOperation } from './router.js';

const FHIR_JSON = 'application/fhir+json';

/** Response items as far as extraction reads them; value[x] and the rest pass through. */
const responseItem: z.ZodType<Record<string, unknown>> = z.lazy(() =>
  z
    .object({
      linkId: z.string().min(1, 'linkId is required'),
      answer: z.array(z.object({ item: z.array(responseItem).optional() }).passthrough()).optional(),
      item: z.array(responseItem).optional(),
    })
    .passthrough(),
);

const reference = z.object({ reference: z.string().optional() }).passthrough();

/** Lenient on purpose: any status may be extracted; subject, author… only need to be References. */
const responseSchema = z
  .object({
    resourceType: z.literal('QuestionnaireResponse'),
    id: z.string().optional(),
    questionnaire: z.string().optional(),
    status: z.string().optional(),
    subject: reference.optional(),
    encounter: reference.optional(),
    author: reference.optional(),
    authored: z.string().optional(),
    contained: z.array(z.record(z.string(), z.unknown())).optional(),
    item: z.array(responseItem).optional(),
  })
  .passthrough();

const questionnaireItem: z.ZodType<Record<string, unknown>> = z.lazy(() =>
  z
    .object({
      linkId: z.string().min(1, 'linkId is required'),
      type: z.string().min(1, 'type is required'),
      definition: z.string().optional(),
      code: z.array(z.record(z.string(), z.unknown())).optional(),
      extension: z.array(z.object({ url: z.string() }).passthrough()).optional(),
      item: z.array(questionnaireItem).optional(),
    })
    .passthrough(),
);

const questionnaireSchema = z
  .object({
    resourceType: z.literal('Questionnaire'),
    extension: z.array(z.object({ url: z.string() }).passthrough()).optional(),
    item: z.array(questionnaireItem).optional(),
  })
  .passthrough();

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Parses one resource. @throws {DomainError} 400 for another type; {ResourceValidationError} 422. */
const parse = <T>(
  schema: z.ZodType<unknown>,
  resourceType: 'QuestionnaireResponse' | 'Questionnaire',
  value: unknown,
  where: string,
): T => {
  if (!isObject(value) || value.resourceType !== resourceType)
    throw new DomainError(
      'invalid',
      'WrongResourceType',
      `${where} must be a ${resourceType}, not ${JSON.stringify(isObject(value) ? (value.resourceType ?? null) : value)}`,
      where,
    );
  try {
    return schema.parse(value) as T;
  } catch (error) {
    if (error instanceof ZodError) throw new ResourceValidationError(resourceType, error);
    throw error;
  }
};

/**
 * The response (and an inline Questionnaire, if any) from the body: a QuestionnaireResponse, or
 * Parameters with `questionnaire-response` (a resource) and optionally `questionnaire`.
 * @throws {DomainError} 400 for any other body; {ResourceValidationError} 422 for a malformed resource.
 */
const requestOf = (body: unknown): { response: QuestionnaireResponse; questionnaire?: Questionnaire } => {
  if (!isObject(body))
    throw new DomainError(
      'invalid',
      'InvalidBody',
      'the body must be a QuestionnaireResponse, or Parameters with a questionnaire-response parameter',
    );
  if (body.resourceType !== 'Parameters')
    return { response: parse(responseSchema, 'QuestionnaireResponse', body, 'QuestionnaireResponse') };
  const parameters = Array.isArray(body.parameter) ? body.parameter.filter(isObject) : [];
  const named = (name: string) => parameters.find((p) => p.name === name);
  const responseParameter = named('questionnaire-response');
  if (!responseParameter)
    throw new DomainError(
      'invalid',
      'ParameterRequired',
      'Parameters need a questionnaire-response parameter holding the QuestionnaireResponse (resource)',
      'Parameters.parameter',
      { issueCode: 'required' },
    );
  const response = parse<QuestionnaireResponse>(
    responseSchema,
    'QuestionnaireResponse',
    responseParameter.resource,
    'Parameters.parameter.where(name=questionnaire-response).resource',
  );
  const questionnaireParameter = named('questionnaire');
  if (!questionnaireParameter) return { response };
  const questionnaire = parse<Questionnaire>(
    questionnaireSchema,
    'Questionnaire',
    questionnaireParameter.resource,
    'Parameters.parameter.where(name=questionnaire).resource',
  );
  return { response, questionnaire };
};

/**
 * The response's Questionnaire: its contained one (`#id`) or the caller's by canonical.
 * @throws {DomainError} 422 `required` without a canonical; 422 `not-found` when it resolves to nothing.
 */
const questionnaireOf = async (
  response: QuestionnaireResponse,
  resolve: ReturnType<typeof tenantResolver>,
): Promise<Questionnaire> => {
  const canonical = response.questionnaire;
  if (typeof canonical !== 'string' || canonical === '')
    throw new DomainError(
      'unprocessable',
      'QuestionnaireRequired',
      'the QuestionnaireResponse names no questionnaire: set questionnaire, or pass a questionnaire parameter',
      'QuestionnaireResponse.questionnaire',
      { issueCode: 'required' },
    );
  const found = canonical.startsWith('#')
    ? (Array.isArray(response.contained) ? response.contained : []).find(
        (r) => isObject(r) && r.resourceType === 'Questionnaire' && `#${String(r.id)}` === canonical,
      )
    : await resolve('Questionnaire', canonical);
  if (!found || found.resourceType !== 'Questionnaire')
    throw new DomainError(
      'unprocessable',
      'QuestionnaireNotFound',
      `Questionnaire ${canonical} is not known (or not readable with these credentials)`,
      'QuestionnaireResponse.questionnaire',
      { issueCode: 'not-found' },
    );
  return parse<Questionnaire>(
    questionnaireSchema,
    'Questionnaire',
    found,
    'QuestionnaireResponse.questionnaire',
  );
};

/**
 * Registers `POST /QuestionnaireResponse/$extract` (docs/interface.md §4.5, SDC $extract). The Questionnaire
 * is the `questionnaire` parameter, else the response's contained one, else the caller's
 * Questionnaire with the response's canonical. Stores nothing (no events).
 * Answers 401 without credentials, 415 for other content types, 400 for a body that is neither a
 * QuestionnaireResponse nor such Parameters, 422 for a malformed resource or an unknown
 * Questionnaire; what can't be extracted is a warning in `issues`, never an error.
 */
export const register: RegisterOperation = (router, casebook) => {
  router.post('/QuestionnaireResponse/$extract', async (ctx) => {
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const { response, questionnaire: inline } = requestOf(ctx.request.body);
    const questionnaire = inline ?? (await questionnaireOf(response, tenantResolver(casebook, principal)));
    const { bundle, issues } = await extract(response, questionnaire, {
      now: casebook.clock(),
      budget: evaluationBudget(ctx),
    });
    ctx.status = 200;
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Parameters',
      parameter: [
        { name: 'return', resource: bundle },
        ...(issues.issue.length > 0 ? [{ name: 'issues', resource: issues }] : []),
      ],
    };
  });
};
