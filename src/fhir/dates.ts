/**
 * FHIR's date and time primitives (R5 datatypes.html: date, dateTime, instant, time), the one
 * implementation every parser of a date casebook reads goes through: resource elements
 * (src/fhir/common.schema.ts, src/fhir/primitives.ts), SDC answers (src/sdc/validate.ts), the
 * report editor's fields (src/http/app/form-data.ts), search date values (src/fhir/search.ts)
 * and the launcher's date of birth (src/integration/launcher.ts).
 *
 * FHIR's regular expressions, plus what they cannot say: the day must exist (no 30 February).
 * Years run from 0001 to 9999: FHIR has no year 0000, and neither has PostgreSQL, which refuses
 * what JavaScript's `Date.parse` happily reads ("0000-01-01", "2026-02-30").
 */

const YEAR = '(?<year>[0-9](?:[0-9](?:[0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)';
const MONTH = '(?<month>0[1-9]|1[0-2])';
const DAY = '(?<day>0[1-9]|[12][0-9]|3[01])';
const TIME = '(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]{1,9})?';
const ZONE = '(?:Z|[+-](?:(?:0[0-9]|1[0-3]):[0-5][0-9]|14:00))';

const FHIR_DATE = new RegExp(`^${YEAR}(?:-${MONTH}(?:-${DAY})?)?$`);
const FHIR_DATE_TIME = new RegExp(`^${YEAR}(?:-${MONTH}(?:-${DAY}(?:T${TIME}${ZONE})?)?)?$`);
const FHIR_INSTANT = new RegExp(`^${YEAR}-${MONTH}-${DAY}T${TIME}${ZONE}$`);
const FHIR_TIME = new RegExp(`^${TIME}$`);

/** The first and last year FHIR (and PostgreSQL's ISO input) can write with four digits. */
export const MIN_YEAR = 1;
export const MAX_YEAR = 9999;

/**
 * Whether year, month (1–12) and day name a real day of the proleptic Gregorian calendar, in the
 * years FHIR can write (0001–9999): not 31 February, not month 13, not year 0. Years 1–99 are
 * years 1–99 (`Date.UTC` would take them for 1901–1999).
 */
export const isCalendarDate = (year: number, month: number, day: number): boolean => {
  if (![year, month, day].every(Number.isInteger) || month < 1 || month > 12 || day < 1) return false;
  if (year < MIN_YEAR || year > MAX_YEAR) return false;
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
};

/** `pattern` matched, and its year, month and day (when given) a real calendar day. */
const matchesCalendar = (pattern: RegExp, value: unknown): boolean => {
  if (typeof value !== 'string') return false;
  const groups = pattern.exec(value)?.groups;
  if (!groups) return false;
  const { year, month, day } = groups;
  return day === undefined || isCalendarDate(Number(year), Number(month), Number(day));
};

/** FHIR `date`: `YYYY`, `YYYY-MM` or `YYYY-MM-DD`, a real calendar date of year 0001–9999. */
export const isFhirDate = (value: unknown): value is string => matchesCalendar(FHIR_DATE, value);

/** FHIR `dateTime`: a FHIR date, or a date and a time with a zone (`2026-03-01T10:00:00+01:00`). */
export const isFhirDateTime = (value: unknown): value is string => matchesCalendar(FHIR_DATE_TIME, value);

/** FHIR `instant`: a full date and time with a zone, to the second at least. */
export const isFhirInstant = (value: unknown): value is string => matchesCalendar(FHIR_INSTANT, value);

/** FHIR `time`: `hh:mm:ss` with optional fractions, no zone. */
export const isFhirTime = (value: unknown): value is string =>
  typeof value === 'string' && FHIR_TIME.test(value);

/** Whether `value` is a full date `YYYY-MM-DD` (a FHIR date to the day). */
export const isFhirDay = (value: unknown): value is string =>
  isFhirDate(value) && (value as string).length === 10;
