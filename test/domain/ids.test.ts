/**
 * src/domain/ids.ts: UUIDv7 identifiers and the non-secret random bytes (IVs, key ids) drawn from
 * the same pool, each byte handed out once.
 */
import { expect } from 'chai';
import { newId, nonSecretRandomBytes } from '../../src/domain/ids.js';

describe('ids and non-secret random bytes', () => {
  it('makes UUIDv7s, distinct, their timestamps in time order', () => {
    const ids = Array.from({ length: 1000 }, () => newId());
    expect(new Set(ids).size).to.equal(1000);
    for (const id of ids)
      expect(id).to.match(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    // Their 48-bit millisecond timestamps never go back (within a millisecond the order is random).
    const times = ids.map((id) => id.replace(/-/g, '').slice(0, 12));
    expect([...times].sort()).to.deep.equal(times);
  });

  it('hands out bytes no other call gets, as copies, across refills of the pool', () => {
    // 3,000 IVs of 12 bytes: the 4 KiB pool is refilled several times, ids drawn in between.
    const seen = new Set<string>();
    const kept: Buffer[] = [];
    for (let i = 0; i < 3000; i++) {
      const iv = nonSecretRandomBytes(12);
      expect(iv).to.have.length(12);
      seen.add(iv.toString('hex'));
      kept.push(iv);
      if (i % 7 === 0) newId();
    }
    expect(seen.size).to.equal(3000);
    // Copies: later draws (and refills) do not change bytes already handed out.
    const first = kept[0]!.toString('hex');
    for (let i = 0; i < 1000; i++) nonSecretRandomBytes(16);
    expect(kept[0]!.toString('hex')).to.equal(first);
    // Not all zero: the pool was filled.
    expect(kept.some((b) => b.some((x) => x !== 0))).to.equal(true);
  });

  it('refuses sizes outside 1–4096 bytes', () => {
    for (const n of [0, -1, 1.5, 4097, Number.NaN])
      expect(() => nonSecretRandomBytes(n)).to.throw(RangeError);
    expect(nonSecretRandomBytes(4096)).to.have.length(4096);
  });
});
