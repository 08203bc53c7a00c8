/**
 * Looking up and registering the context resources of a session (spec §2.2): Patient, Encounter
 * and Practitioner by identifier (via their reservation streams, so a lookup right after a
 * registration never misses it) and by id (via their streams).
 */

import { encounterDecider, encounterStream } from '../domain/clinical/encounter.js';
import type { Identifier } from '../domain/clinical/identifier.js';
import { patientDecider, patientStream } from '../domain/clinical/patient.js';
import { practitionerDecider, practitionerStream } from '../domain/clinical/practitioner.js';
import type { Event } from '../domain/decider.js';
import { identifierKey, reservationDecider, reservationStream } from '../domain/reservation/reservation.js';
import type { ExpectedState } from '../eventstore/port.js';
import { allocateId, type CommandContext } from './context.js';
import { load } from './handle.js';

export type ContextResourceType = 'Patient' | 'Encounter' | 'Practitioner';

export interface ContextResource {
  readonly resourceType: ContextResourceType;
  readonly id: number;
  /** For an Encounter: its subject Patient id. */
  readonly subjectPatientId?: number;
}

/** Finds the resource of `resourceType` holding `identifier` in the tenant, or undefined. */
export const findByIdentifier = async (
  ctx: CommandContext,
  resourceType: ContextResourceType,
  tenantId: number,
  identifier: Identifier,
): Promise<ContextResource | undefined> => {
  const { state } = await load(
    ctx,
    reservationStream(identifierKey(resourceType, tenantId, identifier.system, identifier.value)),
    reservationDecider,
  );
  if (state.status !== 'claimed') return undefined;
  return findById(ctx, resourceType, tenantId, Number(state.ownerId));
};

/** Loads a resource by id; undefined when missing or in another tenant (spec §5.3: isolation). */
export const findById = async (
  ctx: CommandContext,
  resourceType: ContextResourceType,
  tenantId: number,
  id: number,
): Promise<ContextResource | undefined> => {
  switch (resourceType) {
    case 'Patient': {
      const { state } = await load(ctx, patientStream(id), patientDecider);
      return state.status === 'active' && state.tenantId === tenantId ? { resourceType, id } : undefined;
    }
    case 'Encounter': {
      const { state } = await load(ctx, encounterStream(id), encounterDecider);
      return state.status === 'active' && state.tenantId === tenantId
        ? { resourceType, id, subjectPatientId: state.subjectPatientId }
        : undefined;
    }
    case 'Practitioner': {
      const { state } = await load(ctx, practitionerStream(id), practitionerDecider);
      return state.status === 'active' && state.tenantId === tenantId ? { resourceType, id } : undefined;
    }
  }
};

/** The streams a new registration appends: the identifier reservation and the resource stream. */
export interface PlannedRegistration {
  readonly resource: ContextResource;
  readonly parts: { streamName: string; expectedState: ExpectedState; events: Event[] }[];
}

/**
 * Plans the registration of a new context resource with one identifier (spec §2.2 role new):
 * allocates its id and builds the events, without appending (the caller appends them atomically
 * with the rest of its command; a concurrent registration makes the reservation conflict).
 */
export const planRegistration = async (
  ctx: CommandContext,
  resourceType: ContextResourceType,
  tenantId: number,
  identifier: Identifier,
  subjectPatientId?: number,
): Promise<PlannedRegistration> => {
  const key = identifierKey(resourceType, tenantId, identifier.system, identifier.value);
  const at = ctx.now.toISOString();
  const id = await allocateId(ctx.sql, resourceType);
  const reservation = {
    streamName: reservationStream(key),
    expectedState: 'no_stream' as const,
    events: reservationDecider.decide(
      { type: 'ClaimReservation', key, ownerType: resourceType, ownerId: String(id), now: at },
      reservationDecider.initialState,
    ) as Event[],
  };
  const identifiers = [{ system: identifier.system, value: identifier.value }];
  switch (resourceType) {
    case 'Patient':
      return {
        resource: { resourceType, id },
        parts: [
          reservation,
          {
            streamName: patientStream(id),
            expectedState: 'no_stream',
            events: patientDecider.decide(
              { type: 'RegisterPatient', patientId: id, tenantId, identifier: identifiers, at },
              patientDecider.initialState,
            ),
          },
        ],
      };
    case 'Encounter':
      if (subjectPatientId === undefined) throw new Error('an Encounter needs its subject Patient');
      return {
        resource: { resourceType, id, subjectPatientId },
        parts: [
          reservation,
          {
            streamName: encounterStream(id),
            expectedState: 'no_stream',
            events: encounterDecider.decide(
              {
                type: 'RegisterEncounter',
                encounterId: id,
                tenantId,
                identifier: identifiers,
                subjectPatientId,
                at,
              },
              encounterDecider.initialState,
            ),
          },
        ],
      };
    case 'Practitioner':
      return {
        resource: { resourceType, id },
        parts: [
          reservation,
          {
            streamName: practitionerStream(id),
            expectedState: 'no_stream',
            events: practitionerDecider.decide(
              { type: 'RegisterPractitioner', practitionerId: id, tenantId, identifier: identifiers, at },
              practitionerDecider.initialState,
            ),
          },
        ],
      };
  }
};
