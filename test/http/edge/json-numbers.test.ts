/**
 * Numbers JSON.parse would change (src/http/edge/json-numbers.ts; issue 33 finding 7): found in the
 * text, with their path, before anything reads the parsed body.
 */
import { expect } from 'chai';
import { parseJsonBody } from '../../../src/http/edge/body.js';
import { findLossyNumber, lossOf } from '../../../src/http/edge/json-numbers.js';

describe('lossOf', () => {
  it('keeps what a double carries as written, and names what it cannot', () => {
    for (const kept of [
      '0',
      '-0',
      '0.0',
      '0e5',
      '1',
      '-1',
      '0.1',
      '1.5e300',
      '1.000000000000000000E-245',
      '9007199254740991',
      '1000000000000000000',
      '9223372036854775808',
      '1e308',
    ])
      expect(lossOf(kept), kept).to.equal(undefined);
    for (const [lost, reason] of [
      ['1e400', /largest/],
      ['-1E+400', /largest/],
      ['1e-400', /from 0/],
      ['0.0000e-400', undefined],
      ['9007199254740993', /2\^53/],
      ['-9007199254740993', /2\^53/],
      ['123456789012345678901', /2\^53/],
    ] as const)
      if (reason) expect(lossOf(lost), lost).to.match(reason);
      else expect(lossOf(lost), lost).to.equal(undefined);
  });
});

describe('findLossyNumber', () => {
  it('gives the first lossy number with its path, skipping strings and keys', () => {
    expect(findLossyNumber('{"a":"1e400","1e400":[1,2]}')).to.equal(undefined);
    expect(findLossyNumber('{"a":[1,{"b":{"c":[0,0,1e400]}}]}')).to.deep.include({
      literal: '1e400',
      path: ['a', 1, 'b', 'c', 2],
    });
    expect(findLossyNumber('[{},[],{"x\\"y":9007199254740993}]')?.path).to.deep.equal([2, 'x"y']);
    expect(findLossyNumber('{"a":{},"b":[[]],"c":{"d":1,"e":-1e-999}}')?.path).to.deep.equal(['c', 'e']);
  });

  it('is what the body parser refuses with: 400 naming the element', () => {
    let thrown: unknown;
    try {
      parseJsonBody('{"resourceType":"Observation","valueQuantity":{"value":1e400}}');
    } catch (error) {
      thrown = error;
    }
    expect(thrown).to.have.property('code', 'UnrepresentableNumber');
    expect(thrown).to.have.property('expression', 'Observation.valueQuantity.value');
    expect(parseJsonBody('{"a":1e300,"b":"1e400"}')).to.deep.equal({ a: 1e300, b: '1e400' });
  });
});
