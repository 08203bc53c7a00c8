/** zod building blocks of FHIR R5 JSON shared by the resource schemas (issue 3). */
import { z } from 'zod';
import { comparableText } from '../domain/clinical/identifier.js';
import { isFhirDate, isFhirDateTime } from './dates.js';
import { idInReference, MAX_RESOURCE_ID } from './references.js';

/** docs/interface.md §2.5: only `system` and `value`, both required; any other Identifier element is refused (422). */
export const identifier = z
  .object({
    system: z
      .string({
        error: (issue) => (issue.input === undefined ? 'system is required' : 'system must be a string'),
      })
      .min(1, 'system must not be empty')
      .max(1024),
    value: z
      .string({
        error: (issue) => (issue.input === undefined ? 'value is required' : 'value must be a string'),
      })
      .min(1, 'value must not be empty')
      .max(1024),
  })
  .strict();

/**
 * Most identifiers one resource holds (docs/interface.md §8). Each identifier of a type with unique
 * identifiers is a reservation stream written with the resource: without a bound, one request of
 * a megabyte could write tens of thousands of streams and hold the database for seconds.
 */
export const MAX_IDENTIFIERS = 100;

/** Identifiers of a resource: at most {@link MAX_IDENTIFIERS} (422 beyond). */
export const identifiers = z
  .array(identifier)
  .max(MAX_IDENTIFIERS, `holds more than ${MAX_IDENTIFIERS} identifiers (docs/interface.md §8)`);

/**
 * Any FHIR R5 Identifier (issue 35; docs/interface.md §2.6): `use`, `type`, `system` without
 * `value`, `period`, `assigner`… — its shape is checked by the R5 schema (src/fhir/r5-schema.ts).
 * Questionnaire, Encounter, Practitioner and Task take these; only Patient keeps {@link identifier}.
 */
export const anyIdentifier = z
  .object({ system: z.string().optional(), value: z.string().optional() })
  .passthrough();

/** Any R5 identifiers of a resource: at most {@link MAX_IDENTIFIERS} (422 beyond). */
export const anyIdentifiers = z
  .array(anyIdentifier)
  .max(MAX_IDENTIFIERS, `holds more than ${MAX_IDENTIFIERS} identifiers (docs/interface.md §8)`);

/**
 * Refuses the same `system|value` twice in one list (422 at the repeat): an identifier is held
 * once, and its reservation can be claimed once. Identifiers without both are not compared.
 */
const noRepeatedIdentifier = (
  list: readonly { system?: string | undefined; value?: string | undefined }[],
  ctx: z.core.$RefinementCtx,
) => {
  // One pass with a map: linear in the list, whatever a client sends.
  const firstAt = new Map<string, number>();
  list.forEach((entry, index) => {
    if (typeof entry?.system !== 'string' || typeof entry?.value !== 'string') return;
    // Compared in NFC (docs/interface.md §2.5): "é" in two spellings is one identifier.
    const key = JSON.stringify([comparableText(entry.system), comparableText(entry.value)]);
    const first = firstAt.get(key);
    if (first === undefined) firstAt.set(key, index);
    else
      ctx.addIssue({
        code: 'custom',
        path: [index],
        message: `repeats identifier[${first}] (${entry.system}|${entry.value})`,
      });
  });
};

/** Patient identifiers (docs/interface.md §2.5): system and value only, no `system|value` twice. */
export const identifierList = identifiers.superRefine(noRepeatedIdentifier);

/**
 * Identifiers of a type whose identifiers are unique in the tenant (Encounter, Practitioner):
 * any R5 Identifier, no `system|value` twice; those with both are reserved (docs/interface.md §4.3 rule 1).
 */
export const anyIdentifierList = anyIdentifiers.superRefine(noRepeatedIdentifier);

/**
 * FHIR `date`: YYYY, YYYY-MM or YYYY-MM-DD, a real calendar date of year 0001–9999
 * (src/fhir/dates.ts, the one implementation of the rule).
 */
export const fhirDate = z
  .string()
  .refine(
    isFhirDate,
    'must be a FHIR date (YYYY, YYYY-MM or YYYY-MM-DD), a real calendar date from year 0001',
  );

/** FHIR `dateTime`: a FHIR date, or a date and a time with a time zone (src/fhir/dates.ts). */
export const fhirDateTime = z
  .string()
  .refine(
    isFhirDateTime,
    'must be a FHIR dateTime (a FHIR date, or YYYY-MM-DDThh:mm:ss with a time zone), a real calendar date from year 0001',
  );

/**
 * A literal reference to a resource of `type` on this server: `{ "reference": "Type/<id>" }`, its id
 * one casebook can hold (docs/interface.md §8; a larger one would name no resource, and go unchecked).
 */
export const reference = (type: string) =>
  z
    .object({
      reference: z.string().superRefine((v, ctx) => {
        // The reference parser the rest of casebook reads references with (src/fhir/references.ts).
        if (idInReference(v, type) !== undefined) return;
        const spelled = v.startsWith(`${type}/`) && /^\d{1,10}$/.test(v.slice(type.length + 1));
        ctx.addIssue({
          code: 'custom',
          message: spelled
            ? `must reference a ${type} by an id of at most ${MAX_RESOURCE_ID}`
            : `must reference a ${type} as ${type}/<id>`,
        });
      }),
      display: z.string().optional(),
      type: z.literal(type).optional(),
    })
    .strict();

/** docs/interface.md §2.5: only prefix, given, family and text of a name are used; use, suffix, period… are ignored. */
export const humanName = z
  .object({
    prefix: z.array(z.string()).optional(),
    given: z.array(z.string()).optional(),
    family: z.string().optional(),
    text: z.string().optional(),
  })
  .strip();

/** docs/interface.md §2.5: only the first name is stored. */
export const firstNameOnly = z
  .array(humanName)
  .transform((names) => (names.length === 0 ? [] : [names[0]!]))
  .transform((names) =>
    names.map((n) => Object.fromEntries(Object.entries(n).filter(([, v]) => v !== undefined))),
  );

export const gender = z.enum(['male', 'female', 'other', 'unknown']);

/** A CodeableConcept, kept as given. */
export const codeableConcept = z
  .object({
    coding: z
      .array(
        z
          .object({
            system: z.string().optional(),
            code: z.string().optional(),
            display: z.string().optional(),
          })
          .passthrough(),
      )
      .optional(),
    text: z.string().optional(),
  })
  .passthrough();

/** The envelope every resource body shares; `id` and `meta` are the server's and ignored on input. */
export const envelope = (resourceType: string) => ({
  resourceType: z.literal(resourceType, { error: `resourceType must be ${resourceType}` }),
  id: z.string().optional(),
  meta: z.unknown().optional(),
});

/** Drops undefined members so stored content only has what the request gave. */
export const defined = <T extends Record<string, unknown>>(value: T): Record<string, unknown> =>
  Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined));
