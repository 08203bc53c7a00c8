/**
 * Catch-up mode of the projection runner (docs/architecture.md "Projections", "building" and
 * "Catch-up on PostgreSQL"; SQL stores): a `building` projection is brought from its checkpoint
 * to the head of the log in pages beside the appends — on PostgreSQL pipelined, each projection at
 * its own pace — then the last pages are applied while holding the append lock exclusively, and
 * it turns live in that transaction: no append falls between the catch-up and the first inline
 * application. A rebuild beside the live read models builds the same way ({@link InlineBuild}).
 */

import type { Sql } from '../../db/sql.js';
import type { Position, RecordedEvent } from '../../eventstore/port.js';
import { applyPage } from './apply-page.js';
import { leastPosition, type RunnerContext, signalled, sleep, withRunnerLock } from './shared.js';

/** Pages a projection may apply ahead of the slowest while building on PostgreSQL (pipelinedCatchUp). */
const PIPELINE_LEAD = 2;
/** How often a runner looks whether another process's build is done, milliseconds. */
const BUILD_WAIT_POLL_MS = 200;

type OnProgress = ((read: number, position: Position) => void) | undefined;

/**
 * A build of the `building` projections under way ({@link startBuild}), from their checkpoints to
 * the head of the log.
 */
export interface InlineBuild {
  /**
   * Applies the log in pages beside the appends, up to its last full page (the rest is for
   * `finish`). May be called again to catch up with what was appended meanwhile.
   * @returns the events of the pages applied.
   */
  pages(onProgress: OnProgress, signal: AbortSignal | undefined): Promise<number>;
  /**
   * Applies the rest of the log in `tx`, which must hold the append lock (so the log is complete
   * to its end), and turns the projections live in it.
   * @returns the events applied.
   */
  finish(tx: Sql, onProgress: OnProgress): Promise<number>;
  /**
   * The transaction given to the last `finish` was rolled back: the checkpoints go back to where
   * they were before it, so that the next `pages` or `finish` applies those events again.
   */
  undoFinish(): void;
  /** The projections still being built (one that stopped on an event has left). */
  names(): string[];
  /** Where projection `name` has applied the log to. */
  checkpoint(name: string): Position | undefined;
}

/**
 * Runs `build` under the runner's advisory lock (one process builds per schema); while another
 * process holds it, waits until no projection is `building` (inline mode) — on KurrentDB that
 * process follows the log, and this returns at once.
 * @returns what `build` returned (the events read), or 0 when another process did the work.
 */
export const catchUp = async (
  ctx: RunnerContext,
  build: () => Promise<number>,
  signal: AbortSignal | undefined,
): Promise<number> => {
  for (;;) {
    const result = await withRunnerLock<number | undefined>(ctx.sql, build, async () => undefined);
    if (result !== undefined) return result;
    // Another process is building: wait until it is done.
    if (signal?.aborted) return 0;
    const states = await ctx.states();
    if (ctx.mode === 'inline' && !states.some((s) => s.status === 'building')) return 0;
    if (ctx.mode === 'async') return 0;
    await sleep(BUILD_WAIT_POLL_MS, signal);
  }
};

/**
 * Inline mode: catches `building` projections up in pages, then turns them live.
 * @returns the events read.
 */
export const buildInline = async (
  ctx: RunnerContext,
  onProgress: OnProgress,
  signal: AbortSignal | undefined,
): Promise<number> => {
  const build = await startBuild(ctx);
  if (!build) return 0;
  let read = await build.pages(onProgress, signal);
  if (signal?.aborted || build.names().length === 0) return read;
  // The last pages under the append lock, then live: no append can fall in between.
  read += await ctx.sql.transaction(async (tx) => {
    await ctx.appends().lockAppends(tx);
    return build.finish(tx, (n, position) => onProgress?.(read + n, position));
  });
  ctx.applied$.next(undefined);
  return read;
};

/**
 * Starts a build of the projections that are `building` in the runner's `projection_state`
 * (inline mode): the caller reads pages with `pages` beside the appends, then, holding the append
 * lock in a transaction, applies the rest with `finish`, which turns them live in that
 * transaction. A rebuild beside the live read models (src/projections/rebuild-beside.ts) runs it on a
 * runner whose handle sees its own schema first.
 * @returns undefined when no projection is building.
 */
export const startBuild = async (ctx: RunnerContext): Promise<InlineBuild | undefined> => {
  const pending = (await ctx.states()).filter((s) => s.status === 'building');
  if (pending.length === 0) return undefined;
  const checkpoints = new Map(pending.map((s) => [s.name, s.checkpoint]));
  const least = () => leastPosition(checkpoints.values());
  // Types no building projection handles, learnt from the pages read: the next pages leave them
  // out (a log's identifier reservations: a fifth of its events, and of a rebuild's reading).
  const classified = new Set<string>();
  const excluded: string[] = [];
  const classify = (page: readonly RecordedEvent[]) => {
    for (const { type } of page)
      if (!classified.has(type)) {
        classified.add(type);
        if (![...checkpoints.keys()].some((name) => ctx.byName.get(name)!.handles(type))) excluded.push(type);
      }
  };
  const range = (from: Position | undefined) => ({
    ...(from ? { from } : {}),
    maxCount: ctx.pageSize,
    ...(excluded.length ? { excludeTypes: [...excluded] } : {}),
  });
  const readPage = (from: Position | undefined) => {
    const page = ctx.store.readAll(range(from));
    page.then(classify, () => undefined); // awaited below, or dropped when the loop ends early
    return page;
  };
  // Catch up without blocking appends while there is more than a page to read. On Postgres the
  // next page is read (on another pool connection) while this one is applied, and several
  // projections go through the pages each at its own pace; after a page every remaining
  // checkpoint is at its end, so that is where the next one starts.
  const pages = async (onProgress: OnProgress, signal: AbortSignal | undefined): Promise<number> => {
    const prefetch = ctx.sql.kind === 'postgres';
    if (checkpoints.size === 0) return 0;
    if (prefetch && checkpoints.size > 1)
      return pipelinedCatchUp(ctx, readPage, least(), checkpoints, onProgress, signal);
    let read = 0;
    let next = readPage(least());
    while (!signal?.aborted && checkpoints.size > 0) {
      const page = await next;
      if (page.length < ctx.pageSize) break;
      const last = page.at(-1)!.position;
      if (prefetch) next = readPage(last);
      await applyPage(ctx, page, checkpoints, ctx.sql);
      read += page.length;
      onProgress?.(read, last);
      // PGlite answers in microtasks: without a turn of the event loop between pages, a build in
      // a serving process (a projection added later) held every request until its end.
      if (!prefetch) await new Promise<void>((resolve) => setImmediate(resolve));
      if (!prefetch) next = readPage(least());
    }
    return read;
  };
  let beforeFinish: Map<string, Position | undefined> | undefined;
  const finish = async (tx: Sql, onProgress: OnProgress): Promise<number> => {
    beforeFinish = new Map(checkpoints);
    let count = 0;
    for (;;) {
      if (checkpoints.size === 0) break;
      const page = await ctx.appends().readAllIn(tx, range(least()), false);
      if (page.length === 0) break;
      classify(page);
      await applyPage(ctx, page, checkpoints, tx);
      count += page.length;
      onProgress?.(count, page.at(-1)!.position);
    }
    for (const name of checkpoints.keys())
      await tx.query(
        `UPDATE projection_state SET status = 'live', detail = NULL, updated_at = now() WHERE name = $1 AND status = 'building'`,
        [name],
      );
    return count;
  };
  const undoFinish = () => {
    if (!beforeFinish) return;
    checkpoints.clear();
    for (const [name, position] of beforeFinish) checkpoints.set(name, position);
    beforeFinish = undefined;
  };
  return {
    pages,
    finish,
    undoFinish,
    names: () => [...checkpoints.keys()],
    checkpoint: (name) => checkpoints.get(name),
  };
};

/**
 * The catch-up of {@link buildInline} on PostgreSQL, up to the last full page: the log is read
 * page after page once (the next page while the current one is applied), and each projection
 * applies the pages on its own, in its own transactions on the pool, up to
 * {@link PIPELINE_LEAD} pages ahead of the slowest. So one projection's long statement does not
 * hold the others, and this process folds the next page while the server writes the last one
 * (docs/architecture.md "Projections"). Moves each projection's entry of `checkpoints` to the end
 * of the pages it applied; removes a projection that stopped on an event.
 * @returns the events of the pages every projection has applied.
 * @throws the first failure that is not a projection's own (a lost connection): after every
 *   projection has stopped at its current page.
 */
const pipelinedCatchUp = async (
  ctx: RunnerContext,
  readPage: (from: Position | undefined) => Promise<RecordedEvent[]>,
  from: Position | undefined,
  checkpoints: Map<string, Position | undefined>,
  onProgress: OnProgress,
  signal: AbortSignal | undefined,
): Promise<number> => {
  // Page k, read once, after page k - 1 (an empty page: the log ended before it).
  const pages = new Map<number, Promise<readonly RecordedEvent[]>>();
  const pageAt = (k: number): Promise<readonly RecordedEvent[]> => {
    let page = pages.get(k);
    if (page === undefined) {
      page =
        k === 0
          ? readPage(from)
          : pageAt(k - 1).then((before) =>
              before.length < ctx.pageSize ? [] : readPage(before.at(-1)!.position),
            );
      page.catch(() => undefined); // awaited by a projection, or dropped when they stop
      pages.set(k, page);
    }
    return page;
  };
  // Pages each running projection has applied; a page is dropped once every one has.
  const applied = new Map([...checkpoints.keys()].map((name) => [name, 0]));
  // The end of each full page, once read.
  const ends = new Map<number, Position>();
  let read = 0;
  let failed = false;
  // Resolved (and replaced) whenever a projection moves on: the ones ahead wait on it.
  let moved = signalled();
  const slowest = () => Math.min(...applied.values());
  const settle = () => {
    const done = slowest(); // +Infinity once none runs
    for (const k of pages.keys())
      if (k < done && ends.has(k)) {
        pages.delete(k);
        read += ctx.pageSize;
        onProgress?.(read, ends.get(k)!);
        ends.delete(k);
      }
    moved.resolve();
    moved = signalled();
  };
  const run = async (name: string) => {
    const own = new Map([[name, checkpoints.get(name)]]);
    try {
      for (let k = 0; !failed && !signal?.aborted; k++) {
        while (k - slowest() > PIPELINE_LEAD && !failed) await moved.promise;
        const page = await pageAt(k);
        if (page.length < ctx.pageSize || failed) return; // the rest: under the append lock
        ends.set(k, page.at(-1)!.position);
        void pageAt(k + 1);
        await applyPage(ctx, page, own, ctx.sql);
        if (!own.has(name)) {
          checkpoints.delete(name); // stopped on an event of this page
          return;
        }
        checkpoints.set(name, page.at(-1)!.position);
        applied.set(name, k + 1);
        settle();
      }
    } catch (error) {
      failed = true;
      throw error;
    } finally {
      applied.delete(name);
      settle();
    }
  };
  const settled = await Promise.allSettled([...checkpoints.keys()].map(run));
  const failure = settled.find((r) => r.status === 'rejected');
  if (failure) throw failure.reason;
  return read;
};
