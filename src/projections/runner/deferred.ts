/**
 * Deferred mode of the projection runner (docs/architecture.md "Projections", "Deferred"; SQL
 * stores, the AuditEvent search view): a deferred projection is applied after the append, not in
 * it. A follower reads `$all` from the projection's checkpoint and applies each batch in one
 * transaction that locks its state row (two processes never apply a batch twice), then pauses
 * unless a reader waits. Its readers get read-your-writes by waiting until it has applied the head
 * of the log as it was when they asked. On PostgreSQL the follower runs in the background thread
 * ("Background thread"), which tells the serving thread's runner what it committed.
 */

import { Subject } from 'rxjs';
import { comparePositions, type Position, parsePosition, type RecordedEvent } from '../../eventstore/port.js';
import { applyPage } from './apply-page.js';
import {
  batches,
  FOLLOW_BATCH_WAIT_MS,
  IDLE_POLL_MS,
  leastPosition,
  type RunnerContext,
  sleep,
} from './shared.js';

/**
 * Pause of the deferred follower between batches while nobody waits for it, milliseconds: larger
 * batches of the AuditEvent view, fewer transactions and reads of the log (a reader who waits
 * cuts it short).
 */
const DEFERRED_BATCH_INTERVAL_MS = 200;

/** The follower of a runner's deferred projections (`RunnerContext.deferred`), and their readers' waits. */
export class DeferredFollower {
  /** What a deferred projection reached, once committed (told to another thread's runner). */
  readonly reached$ = new Subject<{ name: string; position: Position }>();
  /** Deferred projections: the position each has applied (in this process's view). */
  private readonly at = new Map<string, Position>();
  private readonly wake$ = new Subject<void>();
  /**
   * A reader waits for the deferred follower: its next pause is skipped (and one under way cut
   * short). Readers say so on every poll, so the follower never pauses while one waits.
   */
  private hurried = false;
  private readonly hurry$ = new Subject<void>();
  /** Set when another thread follows the log for the deferred projections: asks it to hurry. */
  private hurryElsewhere: (() => void) | undefined;
  private loop: Promise<void> | undefined;

  constructor(private readonly ctx: RunnerContext) {}

  /**
   * The events whose data the deferred projections read (the port's `DecodeTypes`): the others —
   * a patient's resource versions among them — are not decrypted for a view that skips them.
   */
  private readonly decodeTypes = (type: string): boolean =>
    this.ctx.projections.some((p) => this.ctx.deferred.has(p.name) && p.handles(type));

  /** Whether this runner follows the log for its deferred projections (it has some; no other thread does). */
  get followsHere(): boolean {
    return this.ctx.deferred.size > 0 && !this.hurryElsewhere;
  }

  /** Whether the follower runs in this runner. */
  get running(): boolean {
    return this.loop !== undefined;
  }

  /** Starts following the log until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.loop = this.follow(signal);
  }

  /** Waits for the follower to end (after its signal aborted). */
  async stopped(): Promise<void> {
    await this.loop;
    this.loop = undefined;
  }

  /** See `ProjectionRunner.followDeferredElsewhere`. */
  followElsewhere(hurry: () => void): void {
    this.hurryElsewhere = hurry;
  }

  /** See `ProjectionRunner.noteDeferredApplied`. */
  noteApplied(name: string, position: Position): void {
    if (!this.ctx.deferred.has(name)) return;
    this.advance(name, position);
    this.wake$.next();
  }

  /** A reader waits for this thread's follower: it skips its next pause. */
  hurry(): void {
    this.hurried = true;
    this.hurry$.next();
  }

  /** The deferred read models changed under their readers (a rebuild swapped them in): they look again. */
  wake(): void {
    this.wake$.next();
  }

  /**
   * Read-your-writes for deferred projection `name`: waits until it has applied the head of the log
   * as it is when called (see `ProjectionRunner.waitForDeferred`).
   * @param timeoutMs bound of the wait, milliseconds.
   */
  async waitFor(name: string, timeoutMs: number): Promise<'current' | 'stopped' | 'behind'> {
    if (!this.ctx.deferred.has(name)) return 'current';
    const head = await this.ctx.store.headPosition();
    const deadline = Date.now() + timeoutMs;
    const reached = (p: Position | undefined) =>
      head === undefined || (p !== undefined && comparePositions(p, head) >= 0);
    for (;;) {
      if (reached(this.at.get(name))) return 'current';
      // The follower, here or in the background thread, skips its pause while someone waits.
      if (this.hurryElsewhere) this.hurryElsewhere();
      else this.hurry();
      const [row] = await this.ctx.sql.query<{ status: string; checkpoint: string | null }>(
        `SELECT status, checkpoint FROM projection_state WHERE name = $1`,
        [name],
      );
      if (!row || row.status !== 'live') return 'stopped';
      if (row.checkpoint && reached(parsePosition(row.checkpoint))) return 'current';
      const left = deadline - Date.now();
      if (left <= 0) return 'behind';
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.min(25, left));
        const subscription = this.wake$.subscribe(done);
        function done() {
          clearTimeout(timer);
          subscription.unsubscribe();
          resolve();
        }
      });
    }
  }

  /** One pass of the log from the deferred projections' checkpoints to its head (`ProjectionRunner.catchUpDeferred`). */
  async catchUp(): Promise<void> {
    if (this.ctx.deferred.size === 0) return;
    for (;;) {
      const from = await this.liveFrom();
      if (from === false) return;
      const page = await this.ctx.store.readAll({
        ...(from ? { from } : {}),
        maxCount: this.ctx.pageSize,
        decodeTypes: this.decodeTypes,
      });
      if (page.length === 0) return;
      if (!(await this.apply(page))) return;
      this.wake$.next();
    }
  }

  /**
   * Where the live deferred projections have applied the log to (undefined: its start), or false
   * when none is live.
   */
  private async liveFrom(): Promise<Position | undefined | false> {
    const states = (await this.ctx.states()).filter(
      (s) => this.ctx.deferred.has(s.name) && s.status === 'live',
    );
    if (states.length === 0) return false;
    return leastPosition(states.map((s) => s.checkpoint));
  }

  /**
   * Follows the log for the deferred projections, applying each batch in one transaction from
   * their checkpoints (locked, so several processes never apply a batch twice), until `signal`
   * aborts. A deferred projection that is not live (building, stopped) is left to the build loop
   * or to a replay.
   */
  private async follow(signal: AbortSignal): Promise<void> {
    const { ctx } = this;
    while (!signal.aborted) {
      try {
        const from = await this.liveFrom();
        if (from === false) {
          await sleep(IDLE_POLL_MS, signal);
          continue;
        }
        const inner = new AbortController();
        const stop = () => inner.abort();
        signal.addEventListener('abort', stop, { once: true });
        if (signal.aborted) inner.abort();
        try {
          const events = ctx.store.subscribeToAll({
            ...(from ? { from } : {}),
            signal: inner.signal,
            decodeTypes: this.decodeTypes,
          });
          for await (const batch of batches(events, ctx.pageSize, FOLLOW_BATCH_WAIT_MS)) {
            if (!(await this.apply(batch))) {
              this.at.clear();
              break;
            }
            this.wake$.next();
            await this.pause(signal);
          }
        } finally {
          signal.removeEventListener('abort', stop);
          inner.abort();
        }
      } catch (error) {
        if (signal.aborted) return;
        ctx.logger.error({ err: error }, 'deferred projections failed; retrying');
        await sleep(1000, signal);
      }
    }
  }

  /**
   * Applies one batch of the log to the live deferred projections, in one transaction that locks
   * their state rows: events at or before a checkpoint are skipped (another process applied them).
   * @returns false when a deferred projection is no longer live (the follower starts over).
   */
  private async apply(batch: readonly RecordedEvent[]): Promise<boolean> {
    const { ctx } = this;
    if (batch.length === 0) return true;
    const last = batch.at(-1)!.position;
    // What each projection reached, told to read-your-writes waiters only once it is committed:
    // noted inside the transaction, a search could read the view before the rows are visible.
    const reached: [string, Position][] = [];
    const live = await ctx.sql.transaction(async (tx) => {
      const rows = await tx.query<{ name: string; status: string; checkpoint: string | null }>(
        `SELECT name, status, checkpoint FROM projection_state WHERE name = ANY ($1::text[]) ORDER BY name FOR UPDATE`,
        [[...ctx.deferred]],
      );
      if (rows.some((r) => r.status !== 'live') || rows.length === 0) return false;
      const checkpoints = new Map<string, Position | undefined>();
      for (const row of rows) {
        const checkpoint = row.checkpoint ? parsePosition(row.checkpoint) : undefined;
        if (checkpoint && comparePositions(checkpoint, last) >= 0) {
          reached.push([row.name, checkpoint]);
          continue;
        }
        checkpoints.set(row.name, checkpoint);
      }
      const names = [...checkpoints.keys()];
      if (names.length > 0) await applyPage(ctx, batch, checkpoints, tx);
      for (const name of checkpoints.keys()) reached.push([name, last]);
      // A projection that failed on the batch was stopped (and left `checkpoints`).
      return names.every((name) => checkpoints.has(name));
    });
    for (const [name, position] of reached) {
      this.advance(name, position);
      this.reached$.next({ name, position });
    }
    return live;
  }

  /** Moves what this process knows deferred projection `name` has applied forward (never back). */
  private advance(name: string, position: Position): void {
    const known = this.at.get(name);
    if (!known || comparePositions(position, known) > 0) this.at.set(name, position);
  }

  /** The follower's pause between batches: {@link DEFERRED_BATCH_INTERVAL_MS}, none while a reader waits. */
  private async pause(signal: AbortSignal): Promise<void> {
    if (!this.hurried) {
      const cut = new AbortController();
      const subscription = this.hurry$.subscribe(() => cut.abort());
      const stop = () => cut.abort();
      signal.addEventListener('abort', stop, { once: true });
      try {
        await sleep(DEFERRED_BATCH_INTERVAL_MS, cut.signal);
      } finally {
        subscription.unsubscribe();
        signal.removeEventListener('abort', stop);
      }
    }
    this.hurried = false;
  }
}
