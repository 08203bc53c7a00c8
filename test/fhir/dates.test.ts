/**
 * FHIR's date and time primitives (src/fhir/dates.ts) and its numeric primitives
 * (src/fhir/primitives.ts): FHIR's regular expressions, real calendar days, years 0001–9999, and
 * the ranges of integer, unsignedInt, positiveInt and integer64 (issue 33).
 */
import { expect } from 'chai';
import { isFhirDate, isFhirDateTime, isFhirInstant, isFhirTime } from '../../src/fhir/dates.js';
import {
  findPrimitiveViolations,
  isFhirInteger,
  isFhirInteger64,
  typedPrimitiveProblem,
} from '../../src/fhir/primitives.js';

describe('FHIR date primitives', () => {
  const table = (check: (v: unknown) => boolean, valid: unknown[], invalid: unknown[]) => {
    for (const v of valid) expect(check(v), `${String(v)} valid`).to.equal(true);
    for (const v of invalid) expect(check(v), `${String(v)} invalid`).to.equal(false);
  };

  it('date: YYYY, YYYY-MM, YYYY-MM-DD of a real day, years 0001–9999', () =>
    table(
      isFhirDate,
      ['2026', '2026-02', '2028-02-29', '0001-01-01', '9999-12-31', '0010', '0100'],
      [
        '0000',
        '0000-01-01',
        '2026-02-30',
        '2026-02-29',
        '2026-13',
        '2026-00',
        '26',
        '20260101',
        '2026-1-1',
        2026,
        null,
        '2026-01-01T00:00:00Z',
      ],
    ));

  it('dateTime: a date, or a time with a zone (leap second 60 allowed, as FHIR does)', () =>
    table(
      isFhirDateTime,
      [
        '2026',
        '2026-03-01',
        '2026-03-01T10:00:00Z',
        '2026-03-01T10:00:00.123456789+14:00',
        '2026-06-30T23:59:60Z',
        '0001-01-01T00:00:00-13:59',
      ],
      [
        '0000-06-01T10:00:00Z',
        '2026-02-30T10:00:00Z',
        '2026-03-01T10:00:00',
        '2026-03-01T10:00Z',
        '2026-03-01T24:00:00Z',
        '2026-03-01T10:00:00+14:30',
        '2026-03-01T10:00:00.1234567890Z',
      ],
    ));

  it('instant: a full date-time with a zone', () =>
    table(
      isFhirInstant,
      ['2026-03-01T10:00:00Z', '2026-03-01T10:00:00.000000Z', '9999-12-31T23:59:59+01:00'],
      ['2026-03-01', '2026', '0000-01-01T00:00:00Z', '2026-02-30T00:00:00.000000Z', '2026-03-01T10:00:00'],
    ));

  it('time: hh:mm:ss with optional fractions, no zone', () =>
    table(isFhirTime, ['00:00:00', '23:59:60', '10:30:00.5'], ['24:00:00', '10:30', '10:30:00Z', '1:00:00']));
});

describe('FHIR numeric primitives', () => {
  it('integer is 32-bit; integer64 is a string within 64 bits', () => {
    for (const [v, expected] of [
      [0, true],
      [2147483647, true],
      [-2147483648, true],
      [2147483648, false],
      [-2147483649, false],
      [1.5, false],
      ['1', false],
      [Number.NaN, false],
    ] as const)
      expect(isFhirInteger(v), String(v)).to.equal(expected);
    for (const [v, expected] of [
      ['0', true],
      ['9223372036854775807', true],
      ['-9223372036854775808', true],
      ['+12', true],
      ['9223372036854775808', false],
      ['-9223372036854775809', false],
      ['00', false],
      ['-0', false],
      ['1e3', false],
      [12, false],
      ['99999999999999999999999', false],
    ] as const)
      expect(isFhirInteger64(v), String(v)).to.equal(expected);
  });

  it('names the rule a typed choice element breaks, and nothing for untyped or valid ones', () => {
    expect(typedPrimitiveProblem('valueInteger', 2 ** 31)).to.match(/32-bit/);
    expect(typedPrimitiveProblem('answerInteger', 2 ** 31)).to.match(/32-bit/);
    expect(typedPrimitiveProblem('valuePositiveInt', 0)).to.match(/from 1/);
    expect(typedPrimitiveProblem('valueUnsignedInt', -1)).to.match(/from 0/);
    expect(typedPrimitiveProblem('valueInteger64', 5)).to.match(/string/);
    expect(typedPrimitiveProblem('valueDecimal', null)).to.match(/finite/);
    expect(typedPrimitiveProblem('valueDate', '0000-01-01')).to.match(/from year 0001/);
    expect(typedPrimitiveProblem('valueInteger', 7)).to.equal(undefined);
    expect(typedPrimitiveProblem('valueString', 7)).to.equal(undefined);
    expect(typedPrimitiveProblem('value', 7)).to.equal(undefined);
    expect(typedPrimitiveProblem('valueConstructor', 7)).to.equal(undefined);
    expect(typedPrimitiveProblem('integer', 2 ** 40)).to.equal(undefined);
  });

  it('finds every violation of a resource with its path, at any depth', () => {
    const found = findPrimitiveViolations({
      resourceType: 'QuestionnaireResponse',
      item: [
        { linkId: 'a', answer: [{ valueInteger: 2 ** 31 }, { valueDate: '2026-02-30' }] },
        {
          linkId: 'b',
          item: [
            { linkId: 'c', answer: [{ valueDecimal: 1.5, extension: [{ url: 'x', valueInteger64: 1 }] }] },
          ],
        },
      ],
    });
    expect(found.map((v) => v.path.join('.'))).to.have.members([
      'item.0.answer.0.valueInteger',
      'item.0.answer.1.valueDate',
      'item.1.item.0.answer.0.extension.0.valueInteger64',
    ]);
  });
});
