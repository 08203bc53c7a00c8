/** zod schemas of Patient (docs/interface.md §2.5), Encounter and Practitioner (issue 3). */
import { z } from 'zod';
import {
  defined,
  envelope,
  fhirDate,
  fhirDateTime,
  firstNameOnly,
  gender,
  identifierList,
  reference,
} from './common.schema.js';

export const patientSchema = z
  .object({
    ...envelope('Patient'),
    identifier: identifierList.optional(),
    name: firstNameOnly.optional(),
    gender: gender.optional(),
    birthDate: fhirDate.optional(),
  })
  .strip()
  .transform(({ resourceType: _r, id: _i, meta: _m, ...content }) => defined(content));

export const practitionerSchema = z
  .object({
    ...envelope('Practitioner'),
    identifier: identifierList.optional(),
    name: firstNameOnly.optional(),
    gender: gender.optional(),
    birthDate: fhirDate.optional(),
  })
  .strip()
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
  identifier: identifierList.optional(),
  status: requiredEncounterStatus,
  subject: reference('Patient'),
  actualPeriod: z
    .object({ start: fhirDateTime.optional(), end: fhirDateTime.optional() })
    .strict()
    .optional(),
};

export const encounterCreateSchema = z
  .object(encounterFields)
  .strip()
  .transform(({ resourceType: _r, id: _i, meta: _m, ...content }) => defined(content));

export const encounterUpdateSchema = z
  .object({
    ...encounterFields,
    status: encounterStatus.optional(),
    subject: reference('Patient').optional(),
  })
  .strip()
  .transform(({ resourceType: _r, id: _i, meta: _m, ...content }) => defined(content));
