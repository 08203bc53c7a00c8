/**
 * Looking up and registering the context resources of a session (docs/interface.md §2.2):
 * Patient, Encounter and Practitioner by identifier (via their reservation streams, so a lookup
 * right after a registration never misses it) and by id (via their streams), inside the unit of
 * work of the command that needs them.
 */

import type { Identifier } from '../domain/clinical/identifier.js';
import type { Content } from '../domain/fhir/resource.js';
import { DEFINITIONS } from '../fhir/definitions.js';
import { referenceId } from '../fhir/references.js';
import type { UnitOfWork } from './handler.js';
import { createResource, findByIdentifier as findIdByIdentifier, loadResource } from './resources.js';

export type ContextResourceType = 'Patient' | 'Encounter' | 'Practitioner';

export interface ContextResource {
  readonly resourceType: ContextResourceType;
  readonly id: number;
  /** For an Encounter: its subject Patient id. */
  readonly subjectPatientId?: number;
}

/** Finds the resource of `resourceType` holding `identifier` in the tenant, or undefined. */
export const findByIdentifier = async (
  uow: UnitOfWork,
  resourceType: ContextResourceType,
  tenantId: number,
  identifier: Identifier,
): Promise<ContextResource | undefined> => {
  const id = await findIdByIdentifier(uow, resourceType, tenantId, identifier);
  return id === undefined ? undefined : findById(uow, resourceType, tenantId, id);
};

/** Loads a resource by id; undefined when missing, deleted or in another tenant (docs/interface.md §5.3: isolation). */
export const findById = async (
  uow: UnitOfWork,
  resourceType: ContextResourceType,
  tenantId: number,
  id: number,
): Promise<ContextResource | undefined> => {
  const state = await loadResource(uow, resourceType, id, tenantId);
  if (state.status !== 'active') return undefined;
  if (resourceType !== 'Encounter') return { resourceType, id };
  const subjectPatientId = referenceId(state.resource.subject, 'Patient');
  return subjectPatientId === undefined ? { resourceType, id } : { resourceType, id, subjectPatientId };
};

/**
 * Registers a new context resource with one identifier (docs/interface.md §2.2 role new) as decisions of `uow`:
 * its identifier reservation and its creation. A concurrent registration of the same identifier
 * makes the append conflict; the command's retry then finds it.
 */
export const register = async (
  uow: UnitOfWork,
  resourceType: ContextResourceType,
  tenantId: number,
  identifier: Identifier,
  subjectPatientId?: number,
): Promise<ContextResource> => {
  if (resourceType === 'Encounter' && subjectPatientId === undefined)
    throw new Error('an Encounter needs its subject Patient');
  const content: Content = {
    identifier: [{ system: identifier.system, value: identifier.value }],
    ...(resourceType === 'Encounter'
      ? { status: 'unknown', subject: { reference: `Patient/${subjectPatientId}` } }
      : {}),
  };
  const { id } = await createResource(uow, DEFINITIONS[resourceType], tenantId, content);
  return { resourceType, id, ...(subjectPatientId !== undefined ? { subjectPatientId } : {}) };
};
