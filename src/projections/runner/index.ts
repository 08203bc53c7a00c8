/**
 * The projection runner (docs/architecture.md "Projections"): keeps every read model in step with
 * the log and reports on each. This class holds what its modes share (the projections, the
 * `projection_state` table, the background loops) and delegates to one file per mode, each given
 * a {@link RunnerContext} (./shared.ts): inline, in every append (./inline.ts); catch-up of a
 * `building` projection, turned live under the append lock (./catch-up.ts); following a KurrentDB
 * log (./follow.ts); rebuild (./rebuild.ts); the deferred follower (./deferred.ts). All but
 * inline apply the log in pages through ./apply-page.ts.
 *
 * Each projection has a row in `projection_state`: `live`, `building` (catching up from its
 * checkpoint) or `stopped` (it failed on an event, named in `detail`). A projection that throws
 * on an event stops only itself: it is marked `stopped` with the event's position, stream and
 * error, logged, and reported on /readyz and /metrics. Appends that a stopped projection would
 * have to apply are refused ({@link ReadModelUnavailable}), so a write never answers 2xx and then
 * stays invisible. `casebook replay` rebuilds it.
 */

import type { Logger } from 'pino';
import { Subject } from 'rxjs';
import type { Sql } from '../../db/sql.js';
import type { EventStore, Position } from '../../eventstore/port.js';
import {
  type AppendHook,
  type TransactionalAppends,
  transactionalOf,
} from '../../eventstore/sql-capability.js';
import type { Projection } from '../projection.js';
import type { RebuildResult } from '../rebuild-beside.js';
import { buildInline, catchUp, type InlineBuild, startBuild } from './catch-up.js';
import { DeferredFollower } from './deferred.js';
import { LogFollower } from './follow.js';
import { InlineProjections } from './inline.js';
import { buildUntil, rebuild } from './rebuild.js';
import {
  IDLE_POLL_MS,
  leastPosition,
  migrateState,
  type ProjectionState,
  type RunnerContext,
  readStates,
  sleep,
  withRunnerLock,
} from './shared.js';

export type { InlineBuild } from './catch-up.js';
export {
  batches,
  isPoison,
  type ProjectionFailure,
  type ProjectionState,
  type ProjectionStatus,
  ReadModelUnavailable,
} from './shared.js';

/** Events per catch-up transaction (a few pages are in memory at once: see ./catch-up.ts). */
const CATCH_UP_PAGE = 2500;

export interface ProjectionRunnerOptions {
  /** `inline` on the SQL stores, `async` on KurrentDB (default: from the store's kind). */
  readonly mode?: 'inline' | 'async';
  readonly clock?: () => Date;
  /** Events per catch-up transaction (default {@link CATCH_UP_PAGE}). */
  readonly pageSize?: number;
  /**
   * Inline mode: whether this runner applies its projections in every append (default true).
   * False for a runner that builds read models elsewhere than the live ones (a rebuild's schema):
   * it must not take the store's append hook from the live runner.
   */
  readonly appendHook?: boolean;
}

export class ProjectionRunner {
  readonly mode: 'inline' | 'async';
  /**
   * Emits after projections applied events: the names of those that applied some (an inline
   * append), or undefined when any may have (catch-up and follow batches).
   */
  readonly applied$ = new Subject<ReadonlySet<string> | undefined>();
  /** What a deferred projection reached, once committed (told to another thread's runner). */
  readonly deferredReached$: Subject<{ name: string; position: Position }>;
  private readonly ctx: RunnerContext;
  private readonly inline: InlineProjections;
  private readonly follower: LogFollower;
  private readonly deferredFollower: DeferredFollower;
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;

  constructor(
    private readonly store: EventStore,
    private readonly sql: Sql,
    readonly projections: readonly Projection[],
    private readonly logger: Logger,
    options: ProjectionRunnerOptions = {},
  ) {
    this.mode = options.mode ?? (transactionalOf(store) ? 'inline' : 'async');
    const appends = (): TransactionalAppends => {
      const transactional = transactionalOf(store);
      if (!transactional) throw new TypeError('inline projections need a store with SQL transactions');
      return transactional;
    };
    this.ctx = {
      store,
      sql,
      mode: this.mode,
      projections,
      byName: new Map(projections.map((p) => [p.name, p])),
      // Inline mode: the projections applied after the append by the deferred follower.
      deferred: new Set(
        this.mode === 'inline' ? projections.filter((p) => p.deferred === true).map((p) => p.name) : [],
      ),
      logger,
      clock: options.clock ?? (() => new Date()),
      pageSize: options.pageSize ?? CATCH_UP_PAGE,
      applied$: this.applied$,
      states: (on = sql) => readStates(on, projections),
      appends,
    };
    this.inline = new InlineProjections(this.ctx);
    this.follower = new LogFollower(this.ctx);
    this.deferredFollower = new DeferredFollower(this.ctx);
    this.deferredReached$ = this.deferredFollower.reached$;
    if (this.mode === 'inline') {
      const transactional = appends();
      if (options.appendHook !== false) transactional.setAppendHook(this.appendHook());
    }
  }

  /**
   * Brings the state table and every projection's tables and functions to their last version (the
   * `.sql` files of src/projections/sql/, src/db/migrations.ts); a projection without a state row
   * starts `building` (from the start of the log).
   */
  async migrate(): Promise<void> {
    await migrateState(this.sql);
    for (const projection of this.projections) await projection.migrate(this.sql);
    // Inline: a new projection is built from the log before it goes live. Async: it is followed.
    const initial = this.mode === 'inline' ? 'building' : 'live';
    for (const projection of this.projections)
      await this.sql.query(
        `INSERT INTO projection_state (name, status) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
        [projection.name, initial],
      );
  }

  /** Every projection's state, in the runner's order (one without a row: `building`). */
  states(sql: Sql = this.sql): Promise<ProjectionState[]> {
    return readStates(sql, this.projections);
  }

  /**
   * Events of the log each projection has not applied: 0 for a live inline projection, the events
   * after its checkpoint otherwise (counted on the SQL stores; undefined on KurrentDB).
   */
  async lag(states?: readonly ProjectionState[]): Promise<Map<string, number | undefined>> {
    const result = new Map<string, number | undefined>();
    for (const state of states ?? (await this.states())) {
      if (this.mode === 'inline' && state.status === 'live' && !this.ctx.deferred.has(state.name)) {
        result.set(state.name, 0);
        continue;
      }
      if (!transactionalOf(this.store)) {
        result.set(state.name, undefined);
        continue;
      }
      const from = state.checkpoint;
      const [row] = from
        ? await this.sql.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM es_events WHERE (transaction_id, position) > ($1::xid8, $2::bigint)`,
            [String(from.commit), String(from.prepare)],
          )
        : await this.sql.query<{ n: string }>(`SELECT count(*)::text AS n FROM es_events`);
      result.set(state.name, Number(row?.n ?? 0));
    }
    return result;
  }

  /**
   * The position every projection has caught up to: the least checkpoint (undefined when one has
   * none). Meaningful in async mode and while building; live inline projections keep no checkpoint.
   */
  async position(sql: Sql = this.sql): Promise<Position | undefined> {
    return leastPosition((await this.states(sql)).map((s) => s.checkpoint));
  }

  /**
   * The hook the SQL store runs in every append transaction (./inline.ts): applies the live
   * projections to the events they handle; skips building ones (their catch-up will); refuses the
   * append when a stopped projection (or one this process does not know, run live by a newer
   * version) handles one of its events; turns a poison failure into a stop of that projection only.
   */
  appendHook(): AppendHook {
    return this.inline.hook();
  }

  /**
   * The projection whose stop one of these (just appended) events caused, if any: the write was
   * stored but is not readable through it.
   */
  stoppedByEvents(eventIds: readonly string[]): string | undefined {
    return this.inline.stoppedByEvents(eventIds);
  }

  /**
   * Brings every `building` projection up to the head of the log and turns it live (inline mode,
   * ./catch-up.ts), or catches every projection up to the head (async mode, ./follow.ts). Waits
   * while another process builds.
   * @param onProgress after each batch: events read so far and the position reached.
   * @returns the number of events read.
   */
  catchUp(onProgress?: (read: number, position: Position) => void, signal?: AbortSignal): Promise<number> {
    return catchUp(
      this.ctx,
      () =>
        this.mode === 'inline'
          ? buildInline(this.ctx, onProgress, signal)
          : this.follower.follow(onProgress, signal, false),
      signal,
    );
  }

  /**
   * Starts a build of the projections that are `building` in this runner's `projection_state`
   * (inline mode, ./catch-up.ts): the caller reads pages with `pages` beside the appends, then,
   * holding the append lock in a transaction, applies the rest with `finish`, which turns them live
   * in that transaction. A rebuild beside the live read models (see {@link rebuild}) runs it on a
   * runner whose handle sees its own schema first.
   * @returns undefined when no projection is building.
   */
  startBuild(): Promise<InlineBuild | undefined> {
    return startBuild(this.ctx);
  }

  /**
   * Rebuilds the read models of `names` (default: all) from the log (`casebook replay`,
   * ./rebuild.ts).
   *
   * On the SQL stores they are built beside the live ones, in a schema of their own, and swapped in
   * once complete (`rebuildBeside`, src/projections/rebuild-beside.ts; docs/architecture.md "Projections"):
   * the live read models keep answering, and being written by the appends, until the swap. A
   * projection whose build stops on an event is not swapped in.
   *
   * On KurrentDB (async mode) the read models are dropped and recreated, then caught up; no runner
   * may follow the log meanwhile.
   * @returns the events read, and the projections whose rebuild stopped on an event.
   * @throws {Error} for an unknown name; what the database throws.
   */
  rebuild(
    onProgress?: (read: number, position: Position) => void,
    names: readonly string[] = this.projections.map((p) => p.name),
  ): Promise<RebuildResult> {
    return rebuild(
      this.ctx,
      {
        runnerOn: (sql, projections) =>
          new ProjectionRunner(this.store, sql, projections, this.logger, {
            mode: 'inline',
            appendHook: false,
            clock: this.ctx.clock,
            pageSize: this.ctx.pageSize,
          }),
        catchUp: (progress) => this.catchUp(progress),
        forgetProgress: () => this.follower.forget(),
        wakeDeferred: () => this.deferredFollower.wake(),
      },
      onProgress,
      names,
    );
  }

  /**
   * Builds every projection from the log up to a point in time, into this runner's database (an
   * investigation schema; `casebook replay --until`; ./rebuild.ts): events recorded after `until`
   * (an instant), or after it in `$all` (a position), are left out. Runs in this process, once; the
   * read models are then as they stood at that point.
   * @returns the number of events applied.
   */
  async buildUntil(
    until: Date | Position,
    onProgress?: (read: number, position: Position) => void,
  ): Promise<number> {
    await this.migrate();
    return buildUntil(this.ctx, until, onProgress);
  }

  /**
   * Hands the following of the deferred projections to another thread (docs/architecture.md
   * "Audit trail"): {@link start} no longer follows them here. That thread's runner reports what
   * it reached through {@link noteDeferredApplied}; `hurry` asks it to skip its next pause, called
   * on every poll of a reader waiting here. Call before {@link start}.
   */
  followDeferredElsewhere(hurry: () => void): void {
    this.deferredFollower.followElsewhere(hurry);
  }

  /**
   * What another thread's runner reports through its {@link deferredReached$}: deferred projection
   * `name` has applied (and committed) the log up to `position`. Wakes the readers waiting for it.
   */
  noteDeferredApplied(name: string, position: Position): void {
    this.deferredFollower.noteApplied(name, position);
  }

  /** A reader waits for this thread's deferred follower: it skips its next pause. */
  hurryDeferred(): void {
    this.deferredFollower.hurry();
  }

  /**
   * Read-your-writes for a deferred projection (the AuditEvent search, ./deferred.ts): waits until
   * it has applied the head of the log as it is when called.
   * @param timeoutMs bound of the wait, milliseconds.
   * @returns `current` (read away), `stopped` (the projection is stopped or building: its view is
   *   not complete) or `behind` (the bound passed first).
   */
  waitForDeferred(name: string, timeoutMs = 5000): Promise<'current' | 'stopped' | 'behind'> {
    return this.deferredFollower.waitFor(name, timeoutMs);
  }

  /**
   * Applies every event of the log to the deferred projections now (tests, `casebook replay`):
   * one pass from their checkpoints to the head.
   */
  catchUpDeferred(): Promise<void> {
    return this.deferredFollower.catchUp();
  }

  /**
   * Starts the background work: building projections (inline) or following the log (async), and
   * following it for the deferred projections unless another thread does
   * ({@link followDeferredElsewhere}).
   */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    if (this.deferredFollower.followsHere) this.deferredFollower.start(abort.signal);
    this.loop = (async () => {
      while (!abort.signal.aborted) {
        try {
          if (this.mode === 'inline') {
            await this.catchUp(undefined, abort.signal);
            await sleep(IDLE_POLL_MS, abort.signal);
          } else
            await withRunnerLock(
              this.sql,
              async () => {
                await this.follower.follow(undefined, abort.signal, true);
              },
              () => sleep(IDLE_POLL_MS, abort.signal),
            );
        } catch (error) {
          if (abort.signal.aborted) return;
          this.logger.error({ err: error }, 'projection runner failed; retrying');
          await sleep(1000, abort.signal);
        }
      }
    })();
  }

  /**
   * Starts only the following of the log for the deferred projections (inline mode): the work of
   * the background thread (`src/background/worker.ts`), while the serving thread's runner builds.
   */
  startDeferred(): void {
    if (this.loop || this.deferredFollower.running || this.ctx.deferred.size === 0) return;
    const abort = new AbortController();
    this.abort = abort;
    this.deferredFollower.start(abort.signal);
  }

  /** Stops the background work and waits for it. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    await this.deferredFollower.stopped();
    this.loop = undefined;
  }

  /**
   * Read-your-writes: resolves true once every live projection has applied `position`. Inline
   * mode is always true (the append applied them). Async mode follows this process's runner, or
   * the checkpoints another process writes (./follow.ts).
   * @param timeoutMs bound of the wait, milliseconds.
   * @returns false when the bound passed first.
   */
  async waitFor(position: Position, timeoutMs = 5000): Promise<boolean> {
    if (this.mode === 'inline') return true;
    return this.follower.waitFor(position, timeoutMs);
  }
}
