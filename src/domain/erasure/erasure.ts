/**
 * Erasure of a patient (docs/architecture.md "Erasure"; `POST /Patient/{id}/$erase`, `casebook
 * erase`): one `PatientErased` event in the patient's erasure stream records it, PHI-free (the
 * references of what was erased, who asked is in the metadata, why in `reason`); the data key that
 * encrypted the patient's events is destroyed after it. Erasing again decides nothing new.
 */

import type { Event } from '../decider.js';
import { type Decider, DomainError } from '../decider.js';

export const PATIENT_ERASED = 'PatientErased';

/** A resource erased with its patient, by reference (type and id: no content). */
export interface ErasedResource {
  readonly resourceType: string;
  readonly id: number;
}

export interface PatientErasedData {
  readonly patientId: number;
  readonly tenantId: number;
  /** The Patient and every resource of its compartment, as they were when it was erased. */
  readonly resources: readonly ErasedResource[];
  /** Why, as the operator gave it. */
  readonly reason: string;
  /** Erased inside the tenant's retention period, on purpose (the reason says why). */
  readonly forced: boolean;
  readonly at: string;
}

export type ErasureEvent = Event<typeof PATIENT_ERASED, PatientErasedData>;

export type ErasureState = { readonly status: 'none' } | { readonly status: 'erased'; readonly at: string };

export type ErasureCommand = { readonly type: 'ErasePatient'; readonly now: string } & Omit<
  PatientErasedData,
  'at'
>;

/**
 * The refusal of a read of a resource erased with its patient (docs/interface.md §4.3 rule 17):
 * 410 Gone, code `PatientErased`, FHIR issue `deleted`. One for every way in (FHIR reads and
 * histories, the application host's pages, the SDC operations).
 * @param reference what was asked for (`Task/12`).
 */
export const patientErased = (reference: string): DomainError =>
  new DomainError('gone', 'PatientErased', `${reference} was erased with its patient`, undefined, {
    issueCode: 'deleted',
  });

/** The stream of Patient `patientId`'s erasure (an id: no PHI in a stream name). */
export const erasureStream = (patientId: number): string => `erasure-Patient-${patientId}`;

/** Longest reason kept, in characters. */
export const MAX_REASON_LENGTH = 1000;

export const erasureDecider: Decider<ErasureCommand, ErasureState, ErasureEvent> = {
  initialState: { status: 'none' },
  evolve: (_state, event) => {
    switch (event.type) {
      case PATIENT_ERASED:
        return { status: 'erased', at: event.data.at };
      default: {
        const _exhaustive: never = event.type;
        return _state;
      }
    }
  },
  decide: (command, state) => {
    // Idempotent: the erasure is recorded once; asking again completes it (the key) and adds nothing.
    if (state.status === 'erased') return [];
    const reason = command.reason.trim();
    if (reason === '' || reason.length > MAX_REASON_LENGTH)
      throw new DomainError(
        'invalid',
        'ErasureReasonInvalid',
        `an erasure needs a reason of 1 to ${MAX_REASON_LENGTH} characters`,
      );
    const { type: _type, now, ...data } = command;
    return [{ type: PATIENT_ERASED, data: { ...data, reason, at: now } }];
  },
};
