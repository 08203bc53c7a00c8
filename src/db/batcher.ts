/**
 * Batches of concurrent requests to the database (docs/architecture.md "The write pipeline",
 * "Reads"): items submitted while one send is in flight wait for it and then go together, in one
 * statement, so that under N concurrent callers one round trip serves many of them. It is the
 * group commit of appends (one statement, one transaction and one WAL flush for many writers) and
 * the batching of point reads (one statement for many reads by key). An item alone is sent at
 * once: nothing waits for company.
 */
import type { Sql } from './sql.js';

interface Waiting<I, O> {
  readonly item: I;
  readonly resolve: (output: O) => void;
  readonly reject: (error: unknown) => void;
}

/** Most items one send carries. */
const MAX_BATCH = 64;
/** Most weight (by `weigh`: bytes of the statement, for appends) one send carries, past its first item. */
const MAX_WEIGHT = 1 << 20;

/**
 * Sends items one batch at a time through `send`, which answers each item of a batch in order, or
 * throws for the whole batch. A batch of several items that fails is nobody's answer: each of its
 * items is sent again alone (all at once), and gets its own output or error. So an item's answer
 * never depends on the items it happened to travel with, only on the order in which items commit.
 */
export class Batcher<I, O> {
  private readonly waiting: Waiting<I, O>[] = [];
  private inFlight = false;

  /**
   * @param send sends a batch (≥ 1 item) in one transaction: all of it commits, or it throws and
   *   nothing does.
   * @param maxBatch most items per send.
   * @param weigh an item's weight (an append: the bytes it adds to the statement); a batch stops
   *   before the item that would take it past `maxWeight`, and an item heavier than that goes alone.
   * @param joins whether `item` may travel with the items of `batch` (false: the batch is sent
   *   without it, and it starts the next): the event store never batches two appends of one stream.
   */
  constructor(
    private readonly send: (items: readonly I[]) => Promise<readonly O[]>,
    private readonly maxBatch = MAX_BATCH,
    private readonly weigh: (item: I) => number = () => 0,
    private readonly maxWeight = MAX_WEIGHT,
    private readonly joins: (batch: readonly I[], item: I) => boolean = () => true,
  ) {}

  /**
   * Sends `item` now, or with the next batch when a send is in flight.
   * @returns its output, once its batch committed.
   * @throws what sending it alone threw.
   */
  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      if (!this.inFlight) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.inFlight = true;
    try {
      while (this.waiting.length > 0) {
        let count = 1;
        let weight = this.weigh(this.waiting[0]!.item);
        while (count < Math.min(this.maxBatch, this.waiting.length)) {
          const next = this.waiting[count]!.item;
          weight += this.weigh(next);
          if (weight > this.maxWeight) break;
          if (
            !this.joins(
              this.waiting.slice(0, count).map((w) => w.item),
              next,
            )
          )
            break;
          count++;
        }
        const batch = this.waiting.splice(0, count);
        if (batch.length > 1) {
          const outputs = await this.send(batch.map((w) => w.item)).catch(() => undefined);
          if (outputs) {
            for (const [i, w] of batch.entries()) w.resolve(outputs[i]!);
            continue;
          }
        }
        await Promise.all(
          batch.map((w) =>
            this.send([w.item]).then(
              (outputs) => w.resolve(outputs[0]!),
              (error: unknown) => w.reject(error),
            ),
          ),
        );
      }
    } finally {
      this.inFlight = false;
    }
  }
}

/**
 * `send` with a {@link Batcher} per shared handle: on a shared {@link Sql} (a pool, PGlite; see
 * `Sql.shared`) items submitted while a batch is in flight go together in the next one; on any other
 * handle (a transaction, a held connection, which must see its own writes) each item is sent alone.
 * @param send runs one batch (≥ 1 item) on `sql` and answers each item in order.
 * @returns a function that answers one item on `sql`, or throws what sending it alone threw.
 */
export const batchedOnShared = <I, O>(
  send: (sql: Sql, items: readonly I[]) => Promise<readonly O[]>,
  maxBatch?: number,
): ((sql: Sql, item: I) => Promise<O>) => {
  const batchers = new WeakMap<Sql, Batcher<I, O>>();
  return async (sql, item) => {
    if (!sql.shared) return (await send(sql, [item]))[0] as O;
    let batcher = batchers.get(sql);
    if (!batcher) {
      batcher = new Batcher((items) => send(sql, items), maxBatch);
      batchers.set(sql, batcher);
    }
    return batcher.submit(item);
  };
};
