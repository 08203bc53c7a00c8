/**
 * Encounter aggregate, the part the session interface needs (issue 2): registered in a tenant with
 * identifiers and its subject Patient, found by identifier. Stream `Encounter-<id>`.
 */
import { type Decider, DomainError, type Event } from '../decider.js';
import type { Identifier } from './identifier.js';

export interface EncounterRegisteredData {
  readonly encounterId: number;
  readonly tenantId: number;
  readonly identifier: readonly Identifier[];
  /** Patient id of Encounter.subject. */
  readonly subjectPatientId: number;
  readonly at: string;
}

export type EncounterEvent = Event<'EncounterRegistered', EncounterRegisteredData>;

export type Encounter =
  | { readonly status: 'none' }
  | {
      readonly status: 'active';
      readonly encounterId: number;
      readonly tenantId: number;
      readonly identifier: readonly Identifier[];
      readonly subjectPatientId: number;
    };

export type EncounterCommand = { readonly type: 'RegisterEncounter' } & EncounterRegisteredData;

export const encounterDecider: Decider<EncounterCommand, Encounter, EncounterEvent> = {
  initialState: { status: 'none' },
  evolve: (state, event) => {
    switch (event.type) {
      case 'EncounterRegistered':
        return {
          status: 'active',
          encounterId: event.data.encounterId,
          tenantId: event.data.tenantId,
          identifier: event.data.identifier,
          subjectPatientId: event.data.subjectPatientId,
        };
      default: {
        const _exhaustive: never = event.type;
        return state;
      }
    }
  },
  decide: (command, state) => {
    if (state.status !== 'none')
      throw new DomainError('conflict', 'EncounterExists', `Encounter/${command.encounterId} already exists`);
    const { type: _type, ...data } = command;
    return [{ type: 'EncounterRegistered', data: { ...data, identifier: [...command.identifier] } }];
  },
};

export const encounterStream = (encounterId: number): string => `Encounter-${encounterId}`;
