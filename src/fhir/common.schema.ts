/** zod building blocks of FHIR R5 JSON shared by the resource schemas (issue 3). */
import { z } from 'zod';
import { isCalendarDate } from './dates.js';
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
 * A list of identifiers, at most {@link MAX_IDENTIFIERS}. The same `system|value` twice is refused
 * (422 at the repeat): an identifier is held once, and its reservation can be claimed once.
 */
export const identifierList = identifiers.superRefine((list, ctx) => {
  // One pass with a map: linear in the list, whatever a client sends.
  const firstAt = new Map<string, number>();
  list.forEach((entry, index) => {
    if (typeof entry?.system !== 'string' || typeof entry?.value !== 'string') return;
    const key = JSON.stringify([entry.system, entry.value]);
    const first = firstAt.get(key);
    if (first === undefined) firstAt.set(key, index);
    else
      ctx.addIssue({
        code: 'custom',
        path: [index],
        message: `repeats identifier[${first}] (${entry.system}|${entry.value})`,
      });
  });
});

const FHIR_DATE = /^\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?)?$/;

/**
 * FHIR `date`: YYYY, YYYY-MM or YYYY-MM-DD, and a real calendar date. The calendar check only
 * runs on values of the right format, so a malformed value is reported once.
 */
export const fhirDate = z
  .string()
  .regex(FHIR_DATE, 'must be a FHIR date (YYYY, YYYY-MM or YYYY-MM-DD)')
  .refine(
    (v) =>
      !FHIR_DATE.test(v) ||
      v.length < 10 ||
      isCalendarDate(Number(v.slice(0, 4)), Number(v.slice(5, 7)), Number(v.slice(8, 10))),
    'is not a calendar date',
  );

const FHIR_DATE_TIME =
  /^\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01])(T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]((0\d|1[0-3]):[0-5]\d|14:00)))?)?)?$/;

/** FHIR `dateTime` (a date, or a date and time with a time zone); a malformed value is reported once. */
export const fhirDateTime = z
  .string()
  .regex(FHIR_DATE_TIME, 'must be a FHIR dateTime')
  .refine(
    (v) =>
      !FHIR_DATE_TIME.test(v) ||
      v.length < 10 ||
      !Number.isNaN(Date.parse(v.length === 10 ? `${v}T00:00:00Z` : v)),
    'is not a valid dateTime',
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
