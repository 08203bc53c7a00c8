/**
 * Patient aggregate, the part the session interface needs (issue 2): a Patient registered in a
 * tenant with identifiers, found by identifier (spec §2.2 fhirContext role new/find). Stream
 * `Patient-<id>`; each identifier is reserved in the tenant (DESIGN.md §2 "Uniqueness").
 */
import { type Decider, DomainError, type Event } from '../decider.js';
import type { Identifier } from './identifier.js';

export interface PatientRegisteredData {
  readonly patientId: number;
  readonly tenantId: number;
  readonly identifier: readonly Identifier[];
  readonly at: string;
}

export type PatientEvent = Event<'PatientRegistered', PatientRegisteredData>;

export type Patient =
  | { readonly status: 'none' }
  | {
      readonly status: 'active';
      readonly patientId: number;
      readonly tenantId: number;
      readonly identifier: readonly Identifier[];
    };

export type PatientCommand = { readonly type: 'RegisterPatient' } & PatientRegisteredData;

export const patientDecider: Decider<PatientCommand, Patient, PatientEvent> = {
  initialState: { status: 'none' },
  evolve: (state, event) => {
    switch (event.type) {
      case 'PatientRegistered':
        return {
          status: 'active',
          patientId: event.data.patientId,
          tenantId: event.data.tenantId,
          identifier: event.data.identifier,
        };
      default: {
        const _exhaustive: never = event.type;
        return state;
      }
    }
  },
  decide: (command, state) => {
    if (state.status !== 'none')
      throw new DomainError('conflict', 'PatientExists', `Patient/${command.patientId} already exists`);
    const { type: _type, ...data } = command;
    return [{ type: 'PatientRegistered', data: { ...data, identifier: [...command.identifier] } }];
  },
};

export const patientStream = (patientId: number): string => `Patient-${patientId}`;
