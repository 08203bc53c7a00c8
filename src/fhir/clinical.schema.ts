/** zod schemas of Patient (docs/interface.md §2.5), Encounter and Practitioner (issue 3). */
import { z } from 'zod';
import {
  anyIdentifierList,
  defined,
  envelope,
  fhirDate,
  fhirDateTime,
  firstNameOnly,
  gender,
  identifierList,
  reference,
} from './common.schema.js';

/**
 * Patient (docs/interface.md §2.5): identifiers of system and value only, the first name only;
 * every other R5 element (active, telecom, address, contact, managingOrganization, extensions…)
 * is stored as sent once the R5 schema accepts it (src/fhir/definitions.ts).
 */
export const patientSchema = z
  .object({
    ...envelope('Patient'),
    identifier: identifierList.optional(),
    name: firstNameOnly.optional(),
    gender: gender.optional(),
    birthDate: fhirDate.optional(),
  })
  .passthrough()
  .transform(({ resourceType: _r, id: _i, meta: _m, ...content }) => defined(content));

/**
 * Practitioner (issue 35): every R5 element is stored; the R5 schema checks them
 * (src/fhir/definitions.ts). Identifiers are any R5 Identifier.
 */
export const practitionerSchema = z
  .object({
    ...envelope('Practitioner'),
    identifier: anyIdentifierList.optional(),
    gender: gender.optional(),
    birthDate: fhirDate.optional(),
  })
  .passthrough()
  .transform(({ resourceType: _r, id: _i, meta: _m, ...content }) => defined(content));

/** FHIR R5 Encounter.status. */
export const encounterStatus = z.enum([
  'planned',
  'in-progress',
  'on-hold',
  'discharged',
  'completed',
  'cancelled',
  'discontinued',
  'entered-in-error',
  'unknown',
]);

/** Encounter.status on create: a missing status is `required`, a wrong one `invalid`. */
const requiredEncounterStatus = z
  .string({ error: (issue) => (issue.input === undefined ? 'status is required' : 'status must be a code') })
  .pipe(encounterStatus);

const encounterFields = {
  ...envelope('Encounter'),
  identifier: anyIdentifierList.optional(),
  status: requiredEncounterStatus,
  subject: reference('Patient'),
  actualPeriod: z
    .object({ start: fhirDateTime.optional(), end: fhirDateTime.optional() })
    .passthrough()
    .optional(),
};

/** Encounter (issue 35): every R5 element is stored; the R5 schema checks them (src/fhir/definitions.ts). */
export const encounterCreateSchema = z
  .object(encounterFields)
  .passthrough()
  .transform(({ resourceType: _r, id: _i, meta: _m, ...content }) => defined(content));

export const encounterUpdateSchema = z
  .object({
    ...encounterFields,
    status: encounterStatus.optional(),
    subject: reference('Patient').optional(),
  })
  .passthrough()
  .transform(({ resourceType: _r, id: _i, meta: _m, ...content }) => defined(content));
