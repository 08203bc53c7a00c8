/**
 * A hospital launch's pure parts (docs/interface.md §1.6, §4.6; issues 6 and 12): the validated
 * request, and the one FHIR transaction Bundle it becomes (conditional update of Patient,
 * Encounter and Practitioners; the Task created if none exists). No I/O and nothing above the
 * domain floor (docs/architecture.md "Layers"): `integration/launcher.ts` parses the launch URL
 * into a {@link LaunchRequest}; `commands/launch.ts` runs the Bundle and reads its response.
 */

import { randomUUID } from 'node:crypto';

/** A failure of the launch, shown to the clinician as an error page with `status`. */
export class LaunchError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'LaunchError';
  }
}

export type Gender = 'male' | 'female' | 'other' | 'unknown';

/** A validated launch: hospital numbers (not casebook ids) plus demographics. */
export interface LaunchRequest {
  readonly patient: string;
  readonly encounter: string;
  readonly user?: string;
  readonly supervisor?: string;
  /** YYYY-MM-DD */
  readonly dob?: string;
  readonly gender?: Gender;
}

/** The identifier systems of the hospital, as used in the Bundle. */
export interface LaunchSystems {
  readonly patientSystem: string;
  readonly encounterSystem: string;
  readonly staffSystem: string;
  readonly taskSystem: string;
}

/** The staff number the session is opened for: the user, else the supervisor. */
export const sessionUserOf = (request: LaunchRequest): string => request.user ?? request.supervisor!;

/** `identifier=<system>|<value>` for a conditional URL or ifNoneExist. */
export const identifierQuery = (system: string, value: string): string =>
  `identifier=${encodeURIComponent(`${system}|${value}`)}`;

export interface LaunchBundle {
  readonly resourceType: 'Bundle';
  readonly type: 'transaction';
  readonly entry: {
    readonly fullUrl: string;
    readonly resource: Record<string, unknown>;
    readonly request: {
      readonly method: 'PUT' | 'POST';
      readonly url: string;
      readonly ifNoneExist?: string;
    };
  }[];
}

/**
 * The transaction Bundle of a launch: conditional update of Patient, Encounter and each
 * Practitioner (user, supervisor), and a Task for the encounter created only if none with the
 * encounter's task identifier exists. Entry order: Patient, Encounter, Practitioner(s), Task.
 */
export const buildLaunchBundle = (
  request: LaunchRequest,
  systems: LaunchSystems,
  uuid: () => string = randomUUID,
): LaunchBundle => {
  const urn = () => `urn:uuid:${uuid()}`;
  const patientUrn = urn();
  const encounterUrn = urn();
  const staff = [...new Set([request.user, request.supervisor].filter((s): s is string => s !== undefined))];
  const practitioners = staff.map((number) => ({
    number,
    fullUrl: urn(),
  }));
  const ownerUrn = practitioners.find((p) => p.number === sessionUserOf(request))!.fullUrl;
  return {
    resourceType: 'Bundle',
    type: 'transaction',
    entry: [
      {
        fullUrl: patientUrn,
        resource: {
          resourceType: 'Patient',
          identifier: [{ system: systems.patientSystem, value: request.patient }],
          ...(request.dob !== undefined ? { birthDate: request.dob } : {}),
          ...(request.gender !== undefined ? { gender: request.gender } : {}),
        },
        request: { method: 'PUT', url: `Patient?${identifierQuery(systems.patientSystem, request.patient)}` },
      },
      {
        fullUrl: encounterUrn,
        resource: {
          resourceType: 'Encounter',
          identifier: [{ system: systems.encounterSystem, value: request.encounter }],
          status: 'in-progress',
          subject: { reference: patientUrn },
        },
        request: {
          method: 'PUT',
          url: `Encounter?${identifierQuery(systems.encounterSystem, request.encounter)}`,
        },
      },
      ...practitioners.map((p) => ({
        fullUrl: p.fullUrl,
        resource: {
          resourceType: 'Practitioner',
          identifier: [{ system: systems.staffSystem, value: p.number }],
        },
        request: {
          method: 'PUT' as const,
          url: `Practitioner?${identifierQuery(systems.staffSystem, p.number)}`,
        },
      })),
      {
        fullUrl: urn(),
        resource: {
          resourceType: 'Task',
          identifier: [{ system: systems.taskSystem, value: request.encounter }],
          status: 'draft',
          intent: 'order',
          for: { reference: patientUrn },
          encounter: { reference: encounterUrn },
          owner: { reference: ownerUrn },
        },
        request: {
          method: 'POST',
          url: 'Task',
          ifNoneExist: identifierQuery(systems.taskSystem, request.encounter),
        },
      },
    ],
  };
};

/** The ids the data server assigned, read from the transaction-response. */
export interface LaunchIds {
  readonly patientId: number;
  readonly encounterId: number;
  /** Practitioner id per staff number. */
  readonly practitioners: ReadonlyMap<string, number>;
  readonly taskId: number;
  /** true when this launch created the Task (201), false when it already existed. */
  readonly taskCreated: boolean;
}
