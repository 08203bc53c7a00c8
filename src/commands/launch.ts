/**
 * The hospital launch (docs/interface.md §1.6, §4.6; issues 6 and 12): a verified launch becomes
 * the FHIR transaction Bundle the interface describes (conditional update of Patient, Encounter
 * and Practitioners; the Task created if none exists), the clinician's session, and the
 * `LaunchAccepted` fact on the launch's stream — decided in ONE unit of work: one atomic append.
 * A launch happens whole or not at all; concurrent launches of one new encounter converge on one
 * Patient, Encounter and Task; a nonce is used once.
 *
 * A launch never rewrites identity: an Encounter that belongs to another patient refuses the
 * launch (409), and a date of birth or sex that disagrees with the Patient on record is not
 * written (unless `updateDemographics`), only recorded.
 */
import { v4 as uuidv4 } from 'uuid';
import type { AuditRecord } from '../domain/audit/audit.js';
import { DomainError } from '../domain/decider.js';
import { launchDecider, launchStream } from '../domain/launch/launch.js';
import {
  buildLaunchBundle,
  type LaunchBundle,
  LaunchError,
  type LaunchIds,
  type LaunchRequest,
  type LaunchSystems,
  sessionUserOf,
} from '../domain/launch/request.js';
import type { Principal } from '../fhir/access.js';
import { idInReference, referenceId } from '../fhir/references.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';
import { findByIdentifier, loadResource } from './resources.js';
import { type ClientPrincipal, type CreatedSession, openSession } from './sessions.js';
import { transaction } from './transaction.js';

export interface LaunchOutcome {
  readonly patientId: number;
  readonly encounterId: number;
  readonly taskId: number;
  /** true when this launch created the Task, false when it already existed. */
  readonly taskCreated: boolean;
  readonly session: CreatedSession;
  /** Patient elements the link gave differently from the record (`birthDate`, `gender`). */
  readonly disagreements: readonly string[];
  /** The AuditEvent appended with the launch, when `options.audit` gave one. */
  readonly audited?: AuditRecord;
}

export interface LaunchOptions {
  readonly systems: LaunchSystems;
  /** Where the session sends the browser after a submit. */
  readonly postSubmitRedirect: string;
  readonly globalOrigins: readonly string[];
  /** The verified link's nonce, time stamp and key; undefined for an unsigned launch. */
  readonly signature?: { readonly nonce: string; readonly ts: number; readonly key: number };
  /** Write a disagreeing date of birth or sex over the Patient's (LAUNCHER_UPDATE_DEMOGRAPHICS). */
  readonly updateDemographics: boolean;
  /**
   * The scopes the session asks for (LAUNCHER_SCOPES): downscoped to the tenant's allowed scopes
   * like any POST /sessions, so a launch never gets the tenant's `system/` scopes.
   */
  readonly scopes: readonly string[];
  /** The request's AuditEvent, appended with the launch (`execute`'s `audit` option). */
  readonly audit?: (outcome: LaunchOutcome) => AuditRecord | undefined;
}

/**
 * Performs a launch as the launcher's API client: identity checks, the transaction Bundle, the
 * session for the user (else the supervisor) with the patient and encounter as context, and the
 * launch's own event.
 * @throws {DomainError} 401 the nonce was used before; 409 the encounter belongs to another
 *   patient; the Bundle's and POST /sessions' refusals (403, 412, 422…). Nothing is written then.
 */
export const launch = async (
  ctx: CommandContext,
  client: ClientPrincipal,
  principal: Principal,
  request: LaunchRequest,
  options: LaunchOptions,
): Promise<LaunchOutcome> => {
  const { systems } = options;
  const tenantId = principal.tenantId;
  const { signature } = options;
  const stream = launchStream(signature?.nonce ?? uuidv4());
  const { result, audited } = await execute<LaunchOutcome>(
    ctx,
    async (uow) => {
      // A used nonce is refused before anything else is decided.
      if (signature && (await uow.load(stream, launchDecider)).status === 'accepted')
        throw new DomainError('unauthorized', 'LaunchReplayed', 'the launch link was already used');
      const patientId = await findByIdentifier(uow, 'Patient', tenantId, {
        system: systems.patientSystem,
        value: request.patient,
      });
      const patient =
        patientId !== undefined ? await loadResource(uow, 'Patient', patientId, tenantId) : undefined;
      const known = patient?.status === 'active' ? patient : undefined;

      // An encounter number names one patient's encounter: a launch never moves it to another.
      const encounterId = await findByIdentifier(uow, 'Encounter', tenantId, {
        system: systems.encounterSystem,
        value: request.encounter,
      });
      if (encounterId !== undefined) {
        const encounter = await loadResource(uow, 'Encounter', encounterId, tenantId);
        const subject =
          encounter.status === 'active' ? referenceId(encounter.resource.subject, 'Patient') : undefined;
        if (encounter.status === 'active' && (known === undefined || subject !== patientId))
          throw new DomainError(
            'conflict',
            'EncounterOfAnotherPatient',
            `encounter ${request.encounter} belongs to another patient`,
          );
      }

      // Demographics: filled in when missing; a disagreement is recorded, and written only on request.
      const disagreements: string[] = [];
      if (known) {
        if (
          request.dob !== undefined &&
          known.resource.birthDate !== undefined &&
          known.resource.birthDate !== request.dob
        )
          disagreements.push('birthDate');
        if (
          request.gender !== undefined &&
          known.resource.gender !== undefined &&
          known.resource.gender !== request.gender
        )
          disagreements.push('gender');
      }
      const effective: LaunchRequest =
        options.updateDemographics || disagreements.length === 0
          ? request
          : {
              ...request,
              ...(disagreements.includes('birthDate') ? { dob: undefined } : {}),
              ...(disagreements.includes('gender') ? { gender: undefined } : {}),
            };

      const bundle = buildLaunchBundle(stripUndefined(effective), systems);
      const response = await transaction(uow, principal, bundle);
      const ids = readLaunchResponse(bundle, response);
      const userId = ids.practitioners.get(sessionUserOf(request))!;
      const session = await openSession(
        uow,
        client,
        {
          scope: [...options.scopes],
          user: userId,
          patient: ids.patientId,
          encounter: ids.encounterId,
          fhirContext: [],
          deploymentMode: 'embedded',
          postSubmitRedirect: options.postSubmitRedirect,
        },
        options.globalOrigins,
      );
      await uow.decide(
        stream,
        launchDecider,
        {
          type: 'AcceptLaunch',
          signed: signature !== undefined,
          ...(signature ? { key: signature.key, ts: signature.ts } : {}),
          patientId: ids.patientId,
          encounterId: ids.encounterId,
          taskId: ids.taskId,
          taskCreated: ids.taskCreated,
          sessionId: session.sessionId,
          userId,
          disagreements,
          demographicsUpdated: options.updateDemographics && disagreements.length > 0,
          now: uow.now,
        },
        { fresh: signature === undefined },
      );
      return {
        patientId: ids.patientId,
        encounterId: ids.encounterId,
        taskId: ids.taskId,
        taskCreated: ids.taskCreated,
        session,
        disagreements,
      };
    },
    options.audit ? { audit: options.audit } : {},
  );
  return audited ? { ...result, audited } : result;
};

const stripUndefined = (request: LaunchRequest): LaunchRequest =>
  Object.fromEntries(Object.entries(request).filter(([, v]) => v !== undefined)) as unknown as LaunchRequest;

const idFromLocation = (location: unknown, type: string): number => {
  const id =
    typeof location === 'string'
      ? idInReference(location, type, { absolute: true, version: true })
      : undefined;
  if (id === undefined)
    throw new LaunchError(502, `the data server answered the launch without the location of its ${type}`);
  return id;
};

/**
 * Reads the ids out of a transaction-response to {@link buildLaunchBundle}'s Bundle.
 * @throws {LaunchError} 502 when the response does not have the expected shape.
 */
export const readLaunchResponse = (bundle: LaunchBundle, response: unknown): LaunchIds => {
  const entries = (response as { resourceType?: unknown; entry?: unknown })?.entry;
  if (
    (response as { resourceType?: unknown })?.resourceType !== 'Bundle' ||
    !Array.isArray(entries) ||
    entries.length !== bundle.entry.length
  )
    throw new LaunchError(502, 'the data server answered the launch with an unexpected response');
  const at = (i: number) => (entries[i] as { response?: { status?: unknown; location?: unknown } })?.response;
  const practitioners = new Map<string, number>();
  bundle.entry.forEach((e, i) => {
    if (e.resource.resourceType === 'Practitioner')
      practitioners.set(
        (e.resource.identifier as { value: string }[])[0]!.value,
        idFromLocation(at(i)?.location, 'Practitioner'),
      );
  });
  const last = bundle.entry.length - 1;
  return {
    patientId: idFromLocation(at(0)?.location, 'Patient'),
    encounterId: idFromLocation(at(1)?.location, 'Encounter'),
    practitioners,
    taskId: idFromLocation(at(last)?.location, 'Task'),
    taskCreated: String(at(last)?.status ?? '').startsWith('201'),
  };
};
