/**
 * The hospital launch (docs/interface.md §1.6, §4.6; issue 6): a validated launch becomes the FHIR
 * transaction Bundle the spec describes (conditional update of Patient, Encounter and
 * Practitioners; the Task created if none exists) and the clinician's session, decided in ONE
 * unit of work: one atomic append, so a launch either happens whole or not at all, and concurrent
 * launches of the same new encounter converge on one Patient, Encounter and Task.
 */

import type { Principal } from '../fhir/access.js';
import {
  buildLaunchBundle,
  type LaunchRequest,
  type LaunchSystems,
  readLaunchResponse,
  sessionUserOf,
} from '../integration/launcher.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';
import { type ClientPrincipal, type CreatedSession, openSession } from './sessions.js';
import { transaction } from './transaction.js';

export interface LaunchOutcome {
  readonly patientId: number;
  readonly encounterId: number;
  readonly taskId: number;
  /** true when this launch created the Task, false when it already existed. */
  readonly taskCreated: boolean;
  readonly session: CreatedSession;
}

/**
 * Performs a launch as the launcher's API client: the transaction Bundle, then the session for the
 * user (else the supervisor) with the patient and encounter as context.
 * @param postSubmitRedirect where the session sends the browser after a submit.
 * @throws {DomainError} as the transaction and POST /sessions do (403, 409, 412, 422…); nothing is
 *   written then.
 */
export const launch = async (
  ctx: CommandContext,
  client: ClientPrincipal,
  principal: Principal,
  request: LaunchRequest,
  systems: LaunchSystems,
  postSubmitRedirect: string,
  globalOrigins: readonly string[],
): Promise<LaunchOutcome> => {
  const { result } = await execute(ctx, async (uow) => {
    const bundle = buildLaunchBundle(request, systems);
    const response = await transaction(uow, principal, bundle);
    const ids = readLaunchResponse(bundle, response);
    const session = await openSession(
      uow,
      client,
      {
        user: ids.practitioners.get(sessionUserOf(request))!,
        patient: ids.patientId,
        encounter: ids.encounterId,
        fhirContext: [],
        deploymentMode: 'embedded',
        postSubmitRedirect,
      },
      globalOrigins,
    );
    return {
      patientId: ids.patientId,
      encounterId: ids.encounterId,
      taskId: ids.taskId,
      taskCreated: ids.taskCreated,
      session,
    };
  });
  return result;
};
