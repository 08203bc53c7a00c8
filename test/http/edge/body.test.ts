/**
 * Bounded body parsing (issue 10 "Bounded parsing"): the depth scan on JSON text, JSON and form
 * parsing with their limits. The HTTP behaviour (413, 415, 400 per encoding) is in
 * test/http/edge/regressions.test.ts and the hostile-input suite.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import {
  jsonNestsDeeperThan,
  MAX_FORM_FIELDS,
  MAX_JSON_DEPTH,
  parseFormBody,
  parseJsonBody,
} from '../../../src/http/edge/body.js';
import { HttpError } from '../../../src/http/errors.js';

const depthOf = (value: unknown): number => {
  let max = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (v !== null && typeof v === 'object') {
      max = Math.max(max, d + 1);
      for (const child of Object.values(v as object)) stack.push([child, d + 1]);
    }
  }
  return max;
};

const refusal = (fn: () => unknown): HttpError => {
  try {
    fn();
  } catch (error) {
    expect(error).to.be.instanceOf(HttpError);
    return error as HttpError;
  }
  expect.fail('expected an HttpError');
};

describe('bounded body parsing', () => {
  describe('jsonNestsDeeperThan', () => {
    it('counts arrays and objects, not brackets inside strings or after escapes', () => {
      expect(jsonNestsDeeperThan('{}', 1)).to.equal(false);
      expect(jsonNestsDeeperThan('{"a":[{}]}', 2)).to.equal(true);
      expect(jsonNestsDeeperThan('{"a":[{}]}', 3)).to.equal(false);
      expect(jsonNestsDeeperThan('{"a":"[[[[{{{{"}', 1)).to.equal(false);
      expect(jsonNestsDeeperThan('{"a":"\\"[[[["}', 1)).to.equal(false);
      expect(jsonNestsDeeperThan('[[],[],[]]', 2)).to.equal(false);
    });

    it('agrees with the depth of the parsed value (property)', () => {
      fc.assert(
        fc.property(fc.jsonValue(), fc.integer({ min: 0, max: 12 }), (value, max) => {
          const text = JSON.stringify(value);
          return jsonNestsDeeperThan(text, max) === depthOf(value) > max;
        }),
        { numRuns: 1000 },
      );
    });

    it('scans 10,000 levels without recursion', () => {
      expect(jsonNestsDeeperThan('['.repeat(10_000) + ']'.repeat(10_000), MAX_JSON_DEPTH)).to.equal(true);
    });
  });

  describe('parseJsonBody', () => {
    it('parses objects and arrays up to the depth limit; empty is {}', () => {
      expect(parseJsonBody('')).to.deep.equal({});
      expect(parseJsonBody(' {"a":1} ')).to.deep.equal({ a: 1 });
      const deepest = '['.repeat(MAX_JSON_DEPTH) + ']'.repeat(MAX_JSON_DEPTH);
      expect(depthOf(parseJsonBody(deepest))).to.equal(MAX_JSON_DEPTH);
    });

    it('answers 400 saying which rule: depth, syntax, or a bare scalar', () => {
      const deeper = '['.repeat(MAX_JSON_DEPTH + 1) + ']'.repeat(MAX_JSON_DEPTH + 1);
      expect(refusal(() => parseJsonBody(deeper))).to.include({ status: 400, code: 'JsonTooDeep' });
      expect(refusal(() => parseJsonBody('{"a":'))).to.include({ status: 400, code: 'InvalidJson' });
      expect(refusal(() => parseJsonBody('"text"')).message).to.match(/object or an array/);
    });
  });

  describe('parseFormBody', () => {
    it('keeps names as sent, repeated names as lists, and __proto__ as an ordinary field', () => {
      const form = parseFormBody('q%3A1.2=a&q%3A1.2=b&x%5By%5D=1&__proto__=p&action=save');
      expect(form).to.deep.equal({ 'q:1.2': ['a', 'b'], 'x[y]': '1', ['__proto__']: 'p', action: 'save' });
      expect(Object.getPrototypeOf(form)).to.equal(Object.prototype);
    });

    it(`answers 413 for more than ${MAX_FORM_FIELDS} fields`, () => {
      const text = Array.from({ length: MAX_FORM_FIELDS + 1 }, (_, i) => `f${i}=1`).join('&');
      expect(refusal(() => parseFormBody(text))).to.include({ status: 413, code: 'TooManyFields' });
    });
  });
});
