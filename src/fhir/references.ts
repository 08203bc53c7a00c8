/**
 * FHIR references and the compartment facts derived from a resource's content: which Patient
 * and Encounter it belongs to (docs/interface.md §5.3 `patient/` compartment, docs/interface.md §4.3 rule 4 references).
 */
import type { ClinicalType, Content, ResourceType } from '../domain/fhir/resource.js';

/** Where a reference may point beyond `Type/<id>`: after a base URL, and at one version. */
export interface ReferenceForms {
  /** `https://…/fhir/r5/Type/<id>` as well (a full URL, a Location header). */
  readonly absolute?: boolean;
  /** `Type/<id>/_history/<vid>` as well (a Location header, a versioned reference). */
  readonly version?: boolean;
}

/** The largest resource id (docs/interface.md §8): ids are PostgreSQL `integer`s. */
export const MAX_RESOURCE_ID = 2_147_483_647;

/**
 * The resource id that `text` spells (1 to 10 decimal digits, at most {@link MAX_RESOURCE_ID}), or
 * undefined. A longer or larger number names nothing casebook holds (docs/interface.md §8): callers
 * answer it as unknown, and it must never reach SQL, where it overflows `integer`.
 */
export const resourceIdIn = (text: string): number | undefined =>
  /^\d{1,10}$/.test(text) && Number(text) <= MAX_RESOURCE_ID ? Number(text) : undefined;

/**
 * The id of `type` that the literal reference text `ref` names (`Patient/12` → 12), or undefined.
 * Ids are 32-bit (docs/interface.md §8). Parsed without a regular expression built from `type`.
 */
export const idInReference = (ref: string, type: string, forms: ReferenceForms = {}): number | undefined => {
  const parts = ref.split('/');
  if (forms.version && parts.length >= 4 && parts.at(-2) === '_history' && /^\d{1,10}$/.test(parts.at(-1)!))
    parts.splice(-2);
  const [id, named] = [parts.at(-1)!, parts.at(-2)];
  if (named !== type || (parts.length > 2 && !forms.absolute)) return undefined;
  return resourceIdIn(id);
};

/** The id of a literal relative reference `Type/<id>` (e.g. `Patient/12`) in a Reference, or undefined. */
export const referenceId = (reference: unknown, type: string, forms?: ReferenceForms): number | undefined => {
  const ref = (reference as { reference?: unknown } | undefined)?.reference;
  return typeof ref === 'string' ? idInReference(ref, type, forms) : undefined;
};

/**
 * The element naming the Patient of each clinical type (FHIR R5 compartmentdefinition-patient;
 * docs/interface.md §2.7), and whether its `encounter` is its Encounter. Medication belongs to no
 * patient.
 */
export const CLINICAL_COMPARTMENT: Record<ClinicalType, { patient?: string; encounter?: boolean }> = {
  Observation: { patient: 'subject', encounter: true },
  Condition: { patient: 'subject', encounter: true },
  MedicationStatement: { patient: 'subject', encounter: true },
  Medication: {},
  AllergyIntolerance: { patient: 'patient', encounter: true },
  Immunization: { patient: 'patient', encounter: true },
  DocumentReference: { patient: 'subject' },
};

/** Patient and Encounter a resource belongs to (its compartment), from its content. */
export const compartmentOf = (
  resourceType: ResourceType,
  id: number,
  content: Content,
): { patientId: number | undefined; encounterId: number | undefined } => {
  switch (resourceType) {
    case 'Patient':
      return { patientId: id, encounterId: undefined };
    case 'Encounter':
      return { patientId: referenceId(content.subject, 'Patient'), encounterId: id };
    case 'Task':
      return {
        patientId: referenceId(content.for, 'Patient'),
        encounterId: referenceId(content.encounter, 'Encounter'),
      };
    case 'QuestionnaireResponse':
      return {
        patientId: referenceId(content.subject, 'Patient'),
        encounterId: referenceId(content.encounter, 'Encounter'),
      };
    case 'Practitioner':
    case 'Questionnaire':
    case 'ValueSet':
      return { patientId: undefined, encounterId: undefined };
    default: {
      const { patient, encounter } = CLINICAL_COMPARTMENT[resourceType];
      return {
        patientId: patient ? referenceId(content[patient], 'Patient') : undefined,
        encounterId: encounter ? referenceId(content.encounter, 'Encounter') : undefined,
      };
    }
  }
};

/** `system|value` pairs of a resource's identifiers (only complete ones). */
export const identifiersOf = (content: Content): { system: string; value: string }[] => {
  const list = Array.isArray(content.identifier)
    ? content.identifier
    : content.identifier
      ? [content.identifier]
      : [];
  return list.flatMap((i: unknown) => {
    const { system, value } = (i ?? {}) as { system?: unknown; value?: unknown };
    return typeof system === 'string' && typeof value === 'string' ? [{ system, value }] : [];
  });
};

/** The full FHIR JSON of a stored version (resourceType, id, meta first). */
export const toFhirResource = (
  resourceType: ResourceType,
  id: number,
  versionId: number,
  lastUpdated: string,
  content: Content,
  extraMeta: Record<string, unknown> = {},
): Record<string, unknown> => ({
  resourceType,
  id: String(id),
  meta: { versionId: String(versionId), lastUpdated, ...extraMeta },
  ...content,
});
