/**
 * Looking up and registering the context resources of a session (spec §2.2): Patient, Encounter
 * and Practitioner by identifier (via their reservation streams, so a lookup right after a
 * registration never misses it) and by id (via their streams).
 */

import type { Identifier } from '../domain/clinical/identifier.js';
import type { Event } from '../domain/decider.js';
import { type Content, resourceDecider, resourceStream } from '../domain/fhir/resource.js';
import { identifierKey, reservationDecider, reservationStream } from '../domain/reservation/reservation.js';
import type { ExpectedState } from '../eventstore/port.js';
import { referenceId } from '../fhir/references.js';
import { allocateId, type CommandContext } from './context.js';
import { findByIdentifier as findIdByIdentifier, loadResource } from './resources.js';

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
  const id = await findIdByIdentifier(ctx, resourceType, tenantId, identifier.system, identifier.value);
  return id === undefined ? undefined : findById(ctx, resourceType, tenantId, id);
};

/** Loads a resource by id; undefined when missing, deleted or in another tenant (spec §5.3: isolation). */
export const findById = async (
  ctx: CommandContext,
  resourceType: ContextResourceType,
  tenantId: number,
  id: number,
): Promise<ContextResource | undefined> => {
  const { state } = await loadResource(ctx, resourceType, id, tenantId);
  if (state.status !== 'active') return undefined;
  if (resourceType !== 'Encounter') return { resourceType, id };
  const subjectPatientId = referenceId(state.resource.subject, 'Patient');
  return subjectPatientId === undefined ? { resourceType, id } : { resourceType, id, subjectPatientId };
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
  const now = ctx.now.toISOString();
  const id = await allocateId(ctx.sql, resourceType);
  const reservation = {
    streamName: reservationStream(key),
    expectedState: 'no_stream' as const,
    events: reservationDecider.decide(
      { type: 'ClaimReservation', key, ownerType: resourceType, ownerId: String(id), now },
      reservationDecider.initialState,
    ) as Event[],
  };
  const content: Content = {
    identifier: [{ system: identifier.system, value: identifier.value }],
    ...(resourceType === 'Encounter'
      ? { status: 'unknown', subject: { reference: `Patient/${subjectPatientId}` } }
      : {}),
  };
  if (resourceType === 'Encounter' && subjectPatientId === undefined)
    throw new Error('an Encounter needs its subject Patient');
  const decider = resourceDecider(resourceType);
  return {
    resource: { resourceType, id, ...(subjectPatientId !== undefined ? { subjectPatientId } : {}) },
    parts: [
      reservation,
      {
        streamName: resourceStream(resourceType, id),
        expectedState: 'no_stream',
        events: decider.decide(
          { type: 'CreateResource', id, tenantId, resource: content, now },
          decider.initialState,
        ),
      },
    ],
  };
};
