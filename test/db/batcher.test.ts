/**
 * Batcher (docs/architecture.md "The write pipeline"): a lone item goes at once; items that
 * arrive while a send is in flight go together next, in order; a batch that fails is resent item
 * by item, so each item gets its own answer.
 */
import { expect } from 'chai';
import { Batcher } from '../../src/db/batcher.js';

/** A send that records its batches, answers each item with its double, and waits for `release`. */
const recorder = (refuse: (item: number) => boolean = () => false) => {
  const batches: number[][] = [];
  let release: () => void = () => undefined;
  let gate = Promise.resolve();
  const hold = () => {
    gate = new Promise<void>((resolve) => {
      release = resolve;
    });
  };
  const send = async (items: readonly number[]) => {
    batches.push([...items]);
    await gate;
    const refused = items.find(refuse);
    if (refused !== undefined) throw new Error(`refused ${refused}`);
    return items.map((i) => i * 2);
  };
  return { batches, send, hold, release: () => release() };
};

describe('Batcher', () => {
  it('sends a lone item at once, alone', async () => {
    const r = recorder();
    const group = new Batcher(r.send);
    expect(await group.submit(4)).to.equal(8);
    expect(r.batches).to.deep.equal([[4]]);
  });

  it('sends the items that arrived during a send together next, in order, each with its own output', async () => {
    const r = recorder();
    r.hold();
    const group = new Batcher(r.send);
    const first = group.submit(1);
    const rest = [2, 3, 4, 5].map((i) => group.submit(i));
    r.release();
    expect(await first).to.equal(2);
    expect(await Promise.all(rest)).to.deep.equal([4, 6, 8, 10]);
    expect(r.batches).to.deep.equal([[1], [2, 3, 4, 5]]);
  });

  it('resends a failed batch item by item: the refused item gets its error, the others their outputs', async () => {
    const r = recorder((item) => item === 3);
    r.hold();
    const group = new Batcher(r.send);
    const first = group.submit(1);
    const rest = [2, 3, 4].map((i) => group.submit(i).catch((error: Error) => error.message));
    r.release();
    await first;
    expect(await Promise.all(rest)).to.deep.equal([4, 'refused 3', 8]);
    expect(r.batches.slice(0, 2)).to.deep.equal([[1], [2, 3, 4]]);
    expect(r.batches.slice(2).sort()).to.deep.equal([[2], [3], [4]]);
  });

  it('stops a batch before the item that would pass maxWeight; a heavier item goes alone', async () => {
    const r = recorder();
    r.hold();
    const group = new Batcher(r.send, 64, (item: number) => item, 10);
    const all = [1, 4, 5, 2, 30, 3, 3].map((i) => group.submit(i));
    r.release();
    expect(await Promise.all(all)).to.deep.equal([2, 8, 10, 4, 60, 6, 6]);
    expect(r.batches).to.deep.equal([[1], [4, 5], [2], [30], [3, 3]]);
  });

  it('sends at most maxBatch items at a time', async () => {
    const r = recorder();
    r.hold();
    const group = new Batcher(r.send, 3);
    const all = [0, 1, 2, 3, 4, 5, 6, 7].map((i) => group.submit(i));
    r.release();
    expect(await Promise.all(all)).to.deep.equal([0, 2, 4, 6, 8, 10, 12, 14]);
    expect(r.batches).to.deep.equal([[0], [1, 2, 3], [4, 5, 6], [7]]);
  });
});
