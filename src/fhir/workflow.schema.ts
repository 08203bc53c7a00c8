/** zod schemas of Task (docs/interface.md §2.6, §3.2), Questionnaire and QuestionnaireResponse (docs/interface.md §2.6). */
import { z } from 'zod';
import {
  anyIdentifierList,
  anyIdentifiers,
  codeableConcept,
  defined,
  envelope,
  fhirDateTime,
  reference,
} from './common.schema.js';

/** docs/interface.md §2.6: the Task statuses casebook works with. */
export const taskStatus = z.enum(['draft', 'ready', 'in-progress', 'completed', 'failed']);

/** A Task input/output: a `type` and one value[x] (e.g. valueUrl for the post-submit redirect). */
const parameter = z
  .object({ type: codeableConcept })
  .passthrough()
  .refine((p) => Object.keys(p).some((k) => k.startsWith('value')), { message: 'needs a value[x]' });

const taskFields = {
  ...envelope('Task'),
  identifier: anyIdentifierList.optional(),
  status: taskStatus,
  intent: z.enum([
    'unknown',
    'proposal',
    'plan',
    'order',
    'original-order',
    'reflex-order',
    'filler-order',
    'instance-order',
    'option',
  ]),
  description: z.string().optional(),
  for: reference('Patient').optional(),
  encounter: reference('Encounter').optional(),
  focus: reference('QuestionnaireResponse').optional(),
  owner: reference('Practitioner').optional(),
  requester: reference('Practitioner').optional(),
  authoredOn: fhirDateTime.optional(),
  lastModified: fhirDateTime.optional(),
  input: z.array(parameter).optional(),
  output: z.array(parameter).optional(),
};

const strip = <T extends { resourceType: unknown; id?: unknown; meta?: unknown }>({
  resourceType: _r,
  id: _i,
  meta: _m,
  ...content
}: T) => defined(content);

/** Task (issue 35): every R5 element is stored; the R5 schema checks them (src/fhir/definitions.ts). */
export const taskSchema = z.object(taskFields).passthrough().transform(strip);

/** Questionnaire items, recursively: linkId and type are required; everything else is kept. */
const questionnaireItem: z.ZodType<Record<string, unknown>> = z.lazy(() =>
  z
    .object({
      linkId: z.string().min(1, 'linkId is required'),
      type: z.enum([
        'group',
        'display',
        'boolean',
        'decimal',
        'integer',
        'date',
        'dateTime',
        'time',
        'string',
        'text',
        'url',
        'coding',
        'attachment',
        'reference',
        'quantity',
        'question',
      ]),
      item: z.array(questionnaireItem).optional(),
    })
    .passthrough(),
);

export const questionnaireSchema = z
  .object({
    ...envelope('Questionnaire'),
    url: z.string().url().optional(),
    version: z.string().optional(),
    identifier: anyIdentifiers.optional(),
    name: z.string().optional(),
    title: z.string().optional(),
    status: z.enum(['draft', 'active', 'retired', 'unknown']),
    item: z.array(questionnaireItem).optional(),
  })
  .passthrough()
  // The R5 invariants and item rules (issue 35) are checked on the write path
  // (src/commands/fhir.ts parseContent): they are the form engine's, a floor above (docs/architecture.md "Layers").
  .transform(strip);

/** QuestionnaireResponse items, recursively (docs/interface.md §2.6: linkId, text, answer with value[x]). */
const responseItem: z.ZodType<Record<string, unknown>> = z.lazy(() =>
  z
    .object({
      linkId: z.string().min(1, 'linkId is required'),
      text: z.string().optional(),
      answer: z
        .array(
          z
            .object({ item: z.array(responseItem).optional() })
            .passthrough()
            .refine((a) => Object.keys(a).some((k) => k.startsWith('value')), {
              message: 'an answer needs a value[x]',
            }),
        )
        .optional(),
      item: z.array(responseItem).optional(),
    })
    .passthrough(),
);

export const questionnaireResponseSchema = z
  .object({
    ...envelope('QuestionnaireResponse'),
    identifier: anyIdentifiers.optional(),
    questionnaire: z.string().min(1, 'questionnaire (a canonical URL) is required'),
    status: z.enum(['in-progress', 'completed', 'amended', 'entered-in-error', 'stopped']),
    subject: reference('Patient').optional(),
    encounter: reference('Encounter').optional(),
    author: reference('Practitioner').optional(),
    authored: fhirDateTime.optional(),
    item: z.array(responseItem).optional(),
  })
  // Issue 35: every R5 element is stored; the R5 schema checks them (src/fhir/definitions.ts).
  .passthrough()
  .transform(strip);

/** A ValueSet's concepts and compose (for ValueSet $expand, issue 4); other elements are kept. */
const valueSetConcept = z.object({ code: z.string().min(1), display: z.string().optional() }).passthrough();

export const valueSetSchema = z
  .object({
    ...envelope('ValueSet'),
    url: z.string().url().optional(),
    version: z.string().optional(),
    identifier: anyIdentifiers.optional(),
    name: z.string().optional(),
    title: z.string().optional(),
    status: z.enum(['draft', 'active', 'retired', 'unknown']),
    compose: z
      .object({
        include: z.array(
          z
            .object({
              system: z.string().optional(),
              version: z.string().optional(),
              concept: z.array(valueSetConcept).optional(),
            })
            .passthrough(),
        ),
        exclude: z
          .array(
            z
              .object({ system: z.string().optional(), concept: z.array(valueSetConcept).optional() })
              .passthrough(),
          )
          .optional(),
      })
      .passthrough()
      .optional(),
  })
  .passthrough()
  .transform(strip);
