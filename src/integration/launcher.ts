/**
 * The hospital launcher's pure parts (docs/interface.md §1.6, §4.6; issue 6): a launch URL of the
 * hospital's EHR (`/launch?patient=…&encounter=…[&supervisor=…][&user=…][&dob=…][&sex=…]`) becomes
 *   1. a validated {@link LaunchRequest} ({@link parseLaunchParams});
 *   2. one FHIR transaction Bundle ({@link buildLaunchBundle}) whose response gives the ids
 *      ({@link readLaunchResponse}).
 * `commands/launch.ts` runs the Bundle and opens the session in one append, with the launcher's
 * client identity; the launch page sends the browser through the handover to the app.
 */

import { randomUUID } from 'node:crypto';
import { isFhirDay } from '../fhir/dates.js';
import { idInReference } from '../fhir/references.js';

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

const SEX: Record<string, Gender> = {
  male: 'male',
  female: 'female',
  other: 'other',
  unknown: 'unknown',
  m: 'male',
  f: 'female',
  o: 'other',
  u: 'unknown',
};

const MAX_NUMBER = 128;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
const CONTROL = /[\u0000-\u001f\u007f]/;

type Query = Readonly<Record<string, string | readonly string[] | undefined>>;

const single = (query: Query, name: string): string | undefined => {
  const raw = query[name];
  if (raw === undefined) return undefined;
  if (typeof raw !== 'string') {
    if (raw.length > 1) throw new LaunchError(400, `the launch link gives ${name} more than once`);
    return raw[0];
  }
  return raw;
};

/** A hospital number: trimmed, non-empty, printable, bounded. */
const hospitalNumber = (query: Query, name: string, required: boolean): string | undefined => {
  const raw = single(query, name)?.trim();
  if (raw === undefined || raw === '') {
    if (required) throw new LaunchError(400, `the launch link has no ${name} number (${name}= is required)`);
    return undefined;
  }
  if (raw.length > MAX_NUMBER)
    throw new LaunchError(400, `${name} is too long (at most ${MAX_NUMBER} characters)`);
  if (CONTROL.test(raw)) throw new LaunchError(400, `${name} contains control characters`);
  return raw;
};

/** `YYYY-MM-DD` naming a real calendar date, not after `today`. */
const birthDate = (raw: string, today: Date): string => {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(raw))
    throw new LaunchError(400, `dob must be a date as YYYY-MM-DD, not "${raw}"`);
  // The FHIR date rule (src/fhir/dates.ts): a real day of year 0001–9999, as the Patient stores it.
  if (!isFhirDay(raw)) throw new LaunchError(400, `dob ${raw} is not a real date`);
  if (raw > today.toISOString().slice(0, 10)) throw new LaunchError(400, `dob ${raw} is in the future`);
  return raw;
};

/**
 * Validates the launch URL's query (docs/interface.md §4.6). Unknown parameters are ignored.
 * @throws {LaunchError} 400 with a message for the clinician.
 */
export const parseLaunchParams = (query: Query, today: Date = new Date()): LaunchRequest => {
  const patient = hospitalNumber(query, 'patient', true)!;
  const encounter = hospitalNumber(query, 'encounter', true)!;
  const user = hospitalNumber(query, 'user', false);
  const supervisor = hospitalNumber(query, 'supervisor', false);
  if (user === undefined && supervisor === undefined)
    throw new LaunchError(400, 'user or supervisor is required to open a session');
  const dobRaw = single(query, 'dob')?.trim();
  const dob = dobRaw ? birthDate(dobRaw, today) : undefined;
  const sexRaw = single(query, 'sex')?.trim();
  let gender: Gender | undefined;
  if (sexRaw) {
    // Own keys only: `sex=__proto__` must not find Object.prototype.
    gender = Object.hasOwn(SEX, sexRaw.toLowerCase()) ? SEX[sexRaw.toLowerCase()] : undefined;
    if (!gender)
      throw new LaunchError(
        400,
        `sex "${sexRaw}" is not a known code (use male, female, other, unknown or M, F, O, U)`,
      );
  }
  return {
    patient,
    encounter,
    ...(user !== undefined ? { user } : {}),
    ...(supervisor !== undefined ? { supervisor } : {}),
    ...(dob !== undefined ? { dob } : {}),
    ...(gender !== undefined ? { gender } : {}),
  };
};

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
