/**
 * FHIR references and the compartment facts derived from a resource's content: which Patient
 * and Encounter it belongs to (docs/interface.md §5.3 `patient/` compartment, docs/interface.md §4.3 rule 4 references).
 */
import type { Content, ResourceType } from '../domain/fhir/resource.js';

/** The id of a literal relative reference `Type/<id>` (e.g. `Patient/12`), or undefined. */
export const referenceId = (reference: unknown, type: string): number | undefined => {
  const ref = (reference as { reference?: unknown } | undefined)?.reference;
  if (typeof ref !== 'string') return undefined;
  const match = /^([A-Za-z]+)\/(\d{1,10})$/.exec(ref);
  if (!match || match[1] !== type) return undefined;
  return Number(match[2]);
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
    default:
      return { patientId: undefined, encounterId: undefined };
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
