/**
 * The hospital launcher's way in (docs/interface.md §1.6, §4.6; issue 6): a launch URL of the
 * hospital's EHR (`/launch?patient=…&encounter=…[&supervisor=…][&user=…][&dob=…][&sex=…]`) becomes
 * a validated {@link LaunchRequest} ({@link parseLaunchParams}). The request's transaction Bundle
 * is built in `domain/launch/request.ts`; `commands/launch.ts` runs it and opens the session in
 * one append, with the launcher's client identity; the launch page sends the browser through the
 * handover to the app.
 */

import { type Gender, LaunchError, type LaunchRequest } from '../domain/launch/request.js';
import { isFhirDay } from '../fhir/dates.js';

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

// The error the launch page shows: the launch URL's parser throws it, as do the domain's parts.
export { LaunchError };
