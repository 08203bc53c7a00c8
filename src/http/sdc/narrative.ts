import { ZodError, z } from 'zod';
import { DomainError } from '../../domain/decider.js';
import { membersOf, resolveAnswerValueSets } from '../../sdc/engine/valuesets.js';
import { generateNarrative } from '../../sdc/narrative.js';
import type { Coding, Json, Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { requireFhirJson } from '../fhir/media.js';
import { resolvePrincipal } from '../fhir/principal.js';
import { formResolver, tenantResolver } from './resolve.js';
import type { RegisterOperation } from './router.js';

const FHIR_JSON = 'application/fhir+json';

/** Response items as far as the narrative reads them; value[x] and the rest pass through. */
const responseItem: z.ZodType<Record<string, unknown>> = z.lazy(() =>
  z
    .object({
      linkId: z.string().min(1, 'linkId is required'),
      text: z.string().optional(),
      answer: z.array(z.object({ item: z.array(responseItem).optional() }).passthrough()).optional(),
      item: z.array(responseItem).optional(),
    })
    .passthrough(),
);

/** Lenient on purpose: a draft response (no status, no questionnaire) still has a narrative. */
const responseSchema = z
  .object({
    resourceType: z.literal('QuestionnaireResponse'),
    questionnaire: z.string().optional(),
    status: z.string().optional(),
    contained: z.array(z.record(z.string(), z.unknown())).optional(),
    item: z.array(responseItem).optional(),
  })
  .passthrough();

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The response (and an inline Questionnaire, if any) from the body: a QuestionnaireResponse, or
 * Parameters with a `resource` (also accepted: `response`) and optionally a `questionnaire`.
 * @throws {DomainError} 400 for any other body; {ZodError} 400 (every issue) for a malformed response.
 */
const requestOf = (body: unknown): { response: QuestionnaireResponse; questionnaire?: Questionnaire } => {
  if (!isObject(body))
    throw new DomainError(
      'invalid',
      'InvalidBody',
      'the body must be a QuestionnaireResponse, or Parameters with a resource parameter holding one',
    );
  let candidate: unknown = body;
  let questionnaire: Questionnaire | undefined;
  if (body.resourceType === 'Parameters') {
    const parameters = Array.isArray(body.parameter) ? body.parameter.filter(isObject) : [];
    const named = (name: string) => parameters.find((p) => p.name === name);
    const resource = named('resource') ?? named('response');
    if (!resource || !isObject(resource.resource))
      throw new DomainError(
        'invalid',
        'ResourceRequired',
        'Parameters needs a resource parameter holding the QuestionnaireResponse',
        'Parameters.parameter',
        { issueCode: 'required' },
      );
    candidate = resource.resource;
    const inline = named('questionnaire')?.resource;
    if (inline !== undefined) {
      if (!isObject(inline) || inline.resourceType !== 'Questionnaire')
        throw new DomainError(
          'invalid',
          'InvalidQuestionnaire',
          'the questionnaire parameter must hold a Questionnaire resource',
          'Parameters.parameter',
        );
      questionnaire = inline as Questionnaire;
    }
  }
  const resourceType = isObject(candidate) ? candidate.resourceType : undefined;
  if (resourceType !== 'QuestionnaireResponse')
    throw new DomainError(
      'invalid',
      'WrongResourceType',
      `expected a QuestionnaireResponse, not ${JSON.stringify(resourceType ?? null)}`,
      'resourceType',
    );
  const parsed = responseSchema.safeParse(candidate);
  // Every problem, each with its FHIRPath (QuestionnaireResponse.item[0].linkId), answered 400.
  if (!parsed.success)
    throw new ZodError(
      parsed.error.issues.map((issue) => ({ ...issue, path: ['QuestionnaireResponse', ...issue.path] })),
    );
  return { response: candidate as QuestionnaireResponse, ...(questionnaire ? { questionnaire } : {}) };
};

/**
 * Registers `POST /QuestionnaireResponse/$generate-narrative` (docs/interface.md §4.4). The response's
 * `questionnaire` is resolved among the caller's Questionnaires (or its contained one, `#id`)
 * for question texts and the title; when it can't be found the narrative uses the response alone.
 * Answers 401 without credentials, 415 for other content types, 400 OperationOutcome for a body
 * that is not a usable QuestionnaireResponse.
 */
export const register: RegisterOperation = (router, casebook) => {
  router.post('/QuestionnaireResponse/$generate-narrative', async (ctx) => {
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const { response, questionnaire: inline } = requestOf(ctx.request.body);
    let questionnaire = inline;
    const canonical = response.questionnaire;
    if (!questionnaire && typeof canonical === 'string' && canonical !== '') {
      if (canonical.startsWith('#')) {
        const contained = (Array.isArray(response.contained) ? response.contained : []).find(
          (r) => isObject(r) && r.resourceType === 'Questionnaire' && `#${String(r.id)}` === canonical,
        );
        questionnaire = contained as Questionnaire | undefined;
      } else {
        const found = await tenantResolver(casebook, principal)('Questionnaire', canonical);
        questionnaire = found?.resourceType === 'Questionnaire' ? (found as Questionnaire) : undefined;
      }
    }
    // Coded answers without a display read by their answerValueSet's display (the form's rights).
    const valueSetCodings = new Map<string, Coding[]>();
    if (questionnaire)
      for (const [canonical, valueSet] of await resolveAnswerValueSets(
        questionnaire,
        formResolver(casebook, principal, questionnaire),
      ))
        valueSetCodings.set(
          canonical,
          membersOf(valueSet).codes.map((c) => ({
            ...(c.system !== undefined ? { system: c.system } : {}),
            code: c.code,
            ...(c.display !== undefined ? { display: c.display } : {}),
          })),
        );
    const { xhtml, text } = generateNarrative(response, questionnaire, { valueSetCodings });
    ctx.status = 200;
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Parameters',
      parameter: [
        { name: 'narrative', valueString: xhtml },
        { name: 'text', valueString: text },
      ],
    };
  });
};
