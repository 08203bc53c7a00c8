/**
 * Whose protected health information an event holds (docs/architecture.md "Erasure"): the Patient
 * whose data key encrypts the event's data in the log, so that destroying that one key erases
 * every event about the patient and nothing else.
 *
 * - a resource version (created, updated, a status change) of a resource in a patient's
 *   compartment (FHIR R5 compartmentdefinition-patient, {@link compartmentOf}): the Patient
 *   itself, its Encounters, Tasks, QuestionnaireResponses and clinical resources;
 * - a report queued for export (its text, the patient's and encounter's identifiers);
 * - an identifier reservation of a Patient (its key is the MRN).
 *
 * Everything else stays plaintext: PHI-free metadata (stream names, types, actors, references,
 * times), deletions (no content), sessions (ids and scopes), resources about nobody
 * (Practitioner, Questionnaire, ValueSet, a Medication).
 */
import { REPORT_EXPORT_QUEUED } from '../domain/export/export.js';
import { type Content, resourceEventKind } from '../domain/fhir/resource.js';
import { compartmentOf } from './references.js';

/** The data-key subject of Patient `id`: what the key store names its key by. */
export const patientSubject = (id: number): string => `Patient/${id}`;

/**
 * The subject (`Patient/<id>`) whose data key encrypts an event's data, or undefined when the
 * event holds no patient's PHI and is stored as it is.
 * @param type the event type; `data` its data as appended (plaintext).
 */
export const phiSubjectOf = (type: string, data: unknown): string | undefined => {
  const d = (data ?? {}) as Record<string, unknown>;
  const kind = resourceEventKind(type);
  if (kind) {
    if (kind.kind === 'deleted' || typeof d.resource !== 'object' || d.resource === null) return undefined;
    const id = Number(d.id);
    if (!Number.isSafeInteger(id)) return undefined;
    const { patientId } = compartmentOf(kind.resourceType, id, d.resource as Content);
    return patientId === undefined ? undefined : patientSubject(patientId);
  }
  if (type === REPORT_EXPORT_QUEUED)
    return typeof d.patientId === 'number' ? patientSubject(d.patientId) : undefined;
  if ((type === 'ReservationClaimed' || type === 'ReservationReleased') && d.ownerType === 'Patient') {
    const id = Number(d.ownerId);
    return Number.isSafeInteger(id) ? patientSubject(id) : undefined;
  }
  return undefined;
};

/**
 * Whether the event creates its subject: a Patient's first version. Its data key cannot exist yet
 * (unless an attempt of the same creation stored one and failed), so the key store inserts a new
 * key without looking for one first (src/eventstore/shredding/key-store.ts `getOrCreate`'s
 * `fresh`). A hint only: a wrong true costs one lookup more, never a second key.
 */
export const createsPhiSubject = (type: string): boolean => {
  const kind = resourceEventKind(type);
  return kind?.resourceType === 'Patient' && kind.kind === 'created';
};
