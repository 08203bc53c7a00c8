/**
 * Follow mode of the projection runner (docs/architecture.md "Projections", "On KurrentDB"):
 * projections stay asynchronous. One elected runner (the runner's advisory lock) applies `$all`
 * from each projection's checkpoint in pages, then follows the subscription in batches (what
 * arrived up to 5 ms after a batch's first event), one transaction per projection and batch, with
 * a checkpoint per projection. Commands wait for it ({@link LogFollower.waitFor}) for
 * read-your-writes across replicas.
 */

import { comparePositions, type Position } from '../../eventstore/port.js';
import { applyPage } from './apply-page.js';
import { batches, FOLLOW_BATCH_WAIT_MS, leastPosition, type RunnerContext, sleep } from './shared.js';

/** What this process's runner has applied of a KurrentDB log, and the waits of its commands. */
export class LogFollower {
  /** The position every live projection has applied, once known (this process's runner). */
  private progress: Position | undefined;

  constructor(private readonly ctx: RunnerContext) {}

  /** Forgets the position reached: the read models were dropped to be built again from the start. */
  forget(): void {
    this.progress = undefined;
  }

  /**
   * Applies `$all` to every projection that is not stopped, from its checkpoint, in pages; with
   * `live` it then follows the subscription until `signal` aborts. Run under the runner's lock.
   * @param onProgress after each page: events read so far and the position reached.
   * @returns the events read.
   */
  async follow(
    onProgress: ((read: number, position: Position) => void) | undefined,
    signal: AbortSignal | undefined,
    live: boolean,
  ): Promise<number> {
    const { ctx } = this;
    const states = await ctx.states();
    const checkpoints = new Map(
      states.filter((s) => s.status !== 'stopped').map((s) => [s.name, s.checkpoint] as const),
    );
    const least = () => leastPosition(checkpoints.values());
    const reached = (position: Position) => {
      this.progress = position;
      ctx.applied$.next(undefined);
    };
    let read = 0;
    while (!signal?.aborted && checkpoints.size > 0) {
      const from = least();
      const page = await ctx.store.readAll({ ...(from ? { from } : {}), maxCount: ctx.pageSize });
      if (page.length === 0) break;
      await applyPage(ctx, page, checkpoints, ctx.sql);
      read += page.length;
      onProgress?.(read, page.at(-1)!.position);
      reached(page.at(-1)!.position);
    }
    if (this.progress === undefined) {
      const from = least();
      if (from) reached(from);
    }
    if (!live) return read;
    const from = least();
    const events = ctx.store.subscribeToAll({ ...(from ? { from } : {}), ...(signal ? { signal } : {}) });
    for await (const batch of batches(events, ctx.pageSize, FOLLOW_BATCH_WAIT_MS)) {
      if (checkpoints.size === 0) break;
      await applyPage(ctx, batch, checkpoints, ctx.sql);
      read += batch.length;
      reached(batch.at(-1)!.position);
    }
    return read;
  }

  /**
   * Read-your-writes: resolves true once every projection that is not stopped has applied
   * `position`, as this process's runner reports it or as the checkpoints another process writes
   * show it (polled every 25 ms).
   * @param timeoutMs bound of the wait, milliseconds.
   * @returns false when the bound passed first.
   */
  async waitFor(position: Position, timeoutMs: number): Promise<boolean> {
    const reached = (p: Position | undefined) => p !== undefined && comparePositions(p, position) >= 0;
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (reached(this.progress)) return true;
      const states = (await this.ctx.states()).filter((s) => s.status !== 'stopped');
      if (states.length > 0 && states.every((s) => reached(s.checkpoint))) return true;
      await sleep(Math.min(25, Math.max(1, deadline - Date.now())));
    }
    return false;
  }
}
