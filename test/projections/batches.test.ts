/**
 * `batches` (src/projections/runner/shared.ts): how the deferred follower and the async runner group the
 * events of a subscription. A batch closes when full, or a fixed wait after its first event, even
 * while events keep arriving (a window that restarted with every event never closed under a
 * steady stream of appends, and the follower read the log once per append).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'chai';
import { batches } from '../../src/projections/runner/index.js';

/** Yields 0, 1, 2… every `everyMs` milliseconds, `count` in all, and records when each was yielded. */
const steady = (count: number, everyMs: number) => {
  const yieldedAt: number[] = [];
  const source = (async function* () {
    for (let i = 0; i < count; i++) {
      await sleep(everyMs);
      yieldedAt.push(performance.now());
      yield i;
    }
  })();
  return { source, yieldedAt };
};

describe('batches', () => {
  it('closes a batch a fixed wait after its first event, while events keep arriving', async () => {
    const maxWaitMs = 10;
    const { source, yieldedAt } = steady(200, 2);
    const closed: { items: number[]; at: number }[] = [];
    for await (const batch of batches(source, 10_000, maxWaitMs))
      closed.push({ items: batch, at: performance.now() });
    // Every event, in order, once.
    expect(closed.flatMap((b) => b.items)).to.deep.equal([...Array(200).keys()]);
    // The stream lasts ≥ 400 ms without a gap of 10 ms (on a quiet machine): one window per
    // batch gives many batches, a window that restarts with every event gives one.
    expect(closed.length).to.be.at.least(4);
    for (const batch of closed.slice(0, -1)) {
      const waited = batch.at - yieldedAt[batch.items[0]!]!;
      // The wait, and room for a busy machine's timers: far below the stream's 400 ms.
      expect(waited, `batch from event ${batch.items[0]} closed after ${waited} ms`).to.be.below(
        maxWaitMs + 90,
      );
    }
  });

  it('yields a batch when it is full, and what is left when the stream ends', async () => {
    const { source } = steady(25, 0);
    const sizes: number[] = [];
    for await (const batch of batches(source, 10, 1000)) sizes.push(batch.length);
    expect(sizes).to.deep.equal([10, 10, 5]);
  });

  it('yields a batch after the wait when no further event comes', async () => {
    let release: () => void = () => undefined;
    const source = (async function* () {
      yield 'first';
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      yield 'second';
    })();
    const iterator = batches(source, 100, 20)[Symbol.asyncIterator]();
    const started = performance.now();
    const first = await iterator.next();
    expect(first.value).to.deep.equal(['first']);
    expect(performance.now() - started).to.be.at.least(15);
    release();
    expect((await iterator.next()).value).to.deep.equal(['second']);
    expect((await iterator.next()).done).to.equal(true);
  });
});
