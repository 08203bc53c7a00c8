/**
 * Practitioner aggregate, the part the session interface needs (issue 2): the session user,
 * registered in a tenant with identifiers, found by identifier. Stream `Practitioner-<id>`.
 */
import { type Decider, DomainError, type Event } from '../decider.js';
import type { Identifier } from './identifier.js';

export interface PractitionerRegisteredData {
  readonly practitionerId: number;
  readonly tenantId: number;
  readonly identifier: readonly Identifier[];
  readonly at: string;
}

export type PractitionerEvent = Event<'PractitionerRegistered', PractitionerRegisteredData>;

export type Practitioner =
  | { readonly status: 'none' }
  | {
      readonly status: 'active';
      readonly practitionerId: number;
      readonly tenantId: number;
      readonly identifier: readonly Identifier[];
    };

export type PractitionerCommand = { readonly type: 'RegisterPractitioner' } & PractitionerRegisteredData;

export const practitionerDecider: Decider<PractitionerCommand, Practitioner, PractitionerEvent> = {
  initialState: { status: 'none' },
  evolve: (state, event) => {
    switch (event.type) {
      case 'PractitionerRegistered':
        return {
          status: 'active',
          practitionerId: event.data.practitionerId,
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
      throw new DomainError(
        'conflict',
        'PractitionerExists',
        `Practitioner/${command.practitionerId} already exists`,
      );
    const { type: _type, ...data } = command;
    return [{ type: 'PractitionerRegistered', data: { ...data, identifier: [...command.identifier] } }];
  },
};

export const practitionerStream = (practitionerId: number): string => `Practitioner-${practitionerId}`;
