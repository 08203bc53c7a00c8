/**
 * The sort order of the signed launch link's canonical string, as README.md "Signed launch links"
 * states it (issue 12): names and values by their decoded text, in UTF-16 code-unit order
 * (JavaScript's default sort), not by their percent-encoded form nor by code point.
 */
import { expect } from 'chai';
import { canonicalString } from '../../src/integration/launch-signature.js';

describe('launch link canonical string order (README)', () => {
  it('sorts decoded text in UTF-16 code-unit order, before percent-encoding', () => {
    // `z` before `é`, although `%C3%A9` would sort before `z`.
    expect(canonicalString({ x: ['é', 'z'] })).to.equal('x=z&x=%C3%A9');
    // `a b` before `a!`, although `a%20b` would sort after `a!`.
    expect(canonicalString({ x: ['a!', 'a b'] })).to.equal('x=a%20b&x=a!');
    // U+1F600 (code units D83D DE00) before U+FF01: code-unit order, not code-point order.
    expect(canonicalString({ x: ['！', '😀'] })).to.equal(
      `x=${encodeURIComponent('😀')}&x=${encodeURIComponent('！')}`,
    );
    // Names the same way, before values.
    expect(canonicalString({ é: '1', z: '2', 'a b': '3', 'a!': '4' })).to.equal('a%20b=3&a!=4&z=2&%C3%A9=1');
  });
});
