/**
 * FHIR search date values (src/fhir/search.ts `searchDateRange`; R5 search.html "date"), and the
 * calendar check every date goes through (src/fhir/dates.ts `isCalendarDate`): a year, a
 * month, a day or an instant, each the range of instants it covers, and only real calendar values.
 */
import { expect } from 'chai';
import { isCalendarDate } from '../../src/fhir/dates.js';
import { searchDateRange } from '../../src/fhir/search.js';

const iso = (range: { start: Date; end: Date } | undefined) =>
  range && [range.start.toISOString(), range.end.toISOString()];

describe('searchDateRange', () => {
  it('gives a year, a month, a day (UTC) and an instant as [start, end)', () => {
    for (const [text, start, end] of [
      ['2026', '2026-01-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
      ['2026-12', '2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
      ['2028-02-29', '2028-02-29T00:00:00.000Z', '2028-03-01T00:00:00.000Z'],
      ['2026-03-01T10:00:00+02:00', '2026-03-01T08:00:00.000Z', '2026-03-01T08:00:00.001Z'],
      ['0005-01-01', '0005-01-01T00:00:00.000Z', '0005-01-02T00:00:00.000Z'],
    ] as const)
      expect(iso(searchDateRange(text)), text).to.deep.equal([start, end]);
  });

  it('refuses what Date would roll over or cannot read', () => {
    for (const text of [
      '2026-13',
      '2026-00',
      '2026-02-29',
      '2026-02-31',
      '2026-04-31',
      '2026-13-45',
      '2026-01-01T25:00:00Z',
      '2026-01-01T23:60:00Z',
      '2026-01-01T23:59:60Z',
      '2026-01-01T10:00:00+99:99',
      '2026-01-01T10:00',
      '0000',
      '0000-01-01',
      '0000-12-31T23:00:00Z',
      '26',
      '',
      'gt2026',
    ])
      expect(searchDateRange(text), text).to.equal(undefined);
  });
});

describe('isCalendarDate', () => {
  it("knows month lengths and leap years, years 1–99 included, and FHIR's years only (0001–9999)", () => {
    for (const [y, m, d, expected] of [
      [2026, 2, 28, true],
      [2026, 2, 29, false],
      [2028, 2, 29, true],
      [1900, 2, 29, false],
      [2000, 2, 29, true],
      [0, 2, 29, false],
      [0, 1, 1, false],
      [-1, 1, 1, false],
      [1, 1, 1, true],
      [4, 2, 29, true],
      [9999, 12, 31, true],
      [10000, 1, 1, false],
      [2026, 4, 31, false],
      [2026, 12, 31, true],
      [2026, 13, 1, false],
      [2026, 0, 1, false],
      [2026, 1, 0, false],
      [2026, 1.5, 1, false],
    ] as const)
      expect(isCalendarDate(y, m, d), `${y}-${m}-${d}`).to.equal(expected);
  });
});
