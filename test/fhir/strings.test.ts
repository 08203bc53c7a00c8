/**
 * FHIR's string rule (issue 10; FHIR R5 string: nothing below U+0020 but tab, CR and LF) plus
 * well-formed UTF-16, on single strings and on parsed JSON with the path of the first violation.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import {
  escapeForbidden,
  findJsonStringViolation,
  isFhirString,
  stringViolation,
} from '../../src/fhir/strings.js';

describe('FHIR string rule', () => {
  it('allows tab, CR, LF, ordinary text and surrogate pairs', () => {
    for (const s of ['', 'plain', 'a\tb\r\nc', 'Zoë', '😀 emoji', '\u007f', '\uFFFF'])
      expect(isFhirString(s), JSON.stringify(s)).to.equal(true);
  });

  it('refuses every other character below U+0020 and lone surrogates, saying which and where', () => {
    for (let c = 0; c < 0x20; c++) {
      if (c === 0x09 || c === 0x0a || c === 0x0d) continue;
      expect(stringViolation(`ab${String.fromCharCode(c)}`)).to.deep.equal({
        index: 2,
        reason: `control character U+${c.toString(16).toUpperCase().padStart(4, '0')}`,
      });
    }
    expect(stringViolation('x\uD800')).to.deep.equal({ index: 1, reason: 'lone surrogate U+D800' });
    expect(stringViolation('\uDC00x')).to.deep.equal({ index: 0, reason: 'lone surrogate U+DC00' });
    expect(stringViolation('\uDC00\uD800')?.index).to.equal(0);
  });

  it('agrees with a character-by-character definition on any string (property)', () => {
    const reference = (s: string): boolean => {
      for (let i = 0; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c < 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return false;
        if (c >= 0xd800 && c <= 0xdbff) {
          const next = s.charCodeAt(i + 1);
          if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
          i++;
        } else if (c >= 0xdc00 && c <= 0xdfff) return false;
      }
      return true;
    };
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (s) => isFhirString(s) === reference(s)),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(
        fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) }),
        (s) => isFhirString(s) === reference(s),
      ),
      { numRuns: 2000 },
    );
  });

  it('answers the same for the same string every time, whatever was checked before (no state kept)', () => {
    const bad = 'ab\u0001cd\u0002';
    for (let i = 0; i < 3; i++) {
      expect(isFhirString(bad)).to.equal(false);
      expect(stringViolation(bad)).to.deep.equal({ index: 2, reason: 'control character U+0001' });
      expect(escapeForbidden(bad)).to.equal('ab\\u0001cd\\u0002');
    }
  });

  it('escapes what it forbids for quoting', () => {
    expect(escapeForbidden('a\u0000b\uD800')).to.equal('a\\u0000b\\uD800');
  });

  describe('findJsonStringViolation', () => {
    it('names the first offending value with its path under the root', () => {
      const patient = {
        resourceType: 'Patient',
        identifier: [{ system: 'urn:x', value: 'ok' }, { value: 'a\u0000' }],
      };
      expect(findJsonStringViolation(patient, 'Patient')).to.deep.include({
        path: 'Patient.identifier[1].value',
        inKey: false,
        reason: 'control character U+0000',
      });
      expect(findJsonStringViolation({ a: ['x', 'y\u0001'] })?.path).to.equal('a[1]');
    });

    it('names an offending object key, escaped', () => {
      const found = findJsonStringViolation({ name: [{ 'giv\u0000en': 'x' }] }, 'Patient');
      expect(found).to.deep.include({ path: 'Patient.name[0]["giv\\\\u0000en"]', inKey: true });
    });

    it('answers undefined for valid JSON of any shape, numbers, booleans and null included', () => {
      expect(findJsonStringViolation({ a: [1, true, null, { b: 'c\td' }], e: 2.5 })).to.equal(undefined);
    });

    it('walks 100,000 levels deep without recursion', () => {
      let deep: unknown = 'bad\u0002';
      for (let i = 0; i < 100_000; i++) deep = [deep];
      expect(findJsonStringViolation(deep)?.reason).to.equal('control character U+0002');
    });
  });
});
