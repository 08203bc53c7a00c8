/**
 * The calendar check every date casebook reads goes through: resource `date` elements
 * (src/fhir/common.schema.ts), SDC answers (src/sdc/validate.ts), search date values
 * (src/fhir/search.ts) and the launcher's date of birth (src/integration/launcher.ts).
 */

/**
 * Whether year, month (1–12) and day name a real day of the proleptic Gregorian calendar in UTC:
 * not 31 February, not month 13. Years 0–99 are years 0–99 (`Date.UTC` would take them for
 * 1900–1999).
 */
export const isCalendarDate = (year: number, month: number, day: number): boolean => {
  if (![year, month, day].every(Number.isInteger) || month < 1 || month > 12 || day < 1) return false;
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
};
