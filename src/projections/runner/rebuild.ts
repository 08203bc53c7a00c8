/**
 * Rebuild mode of the projection runner (docs/architecture.md "Projections", Rebuild; "Audit
 * trail" for `--until`): `casebook replay` builds read models again from the log. On the SQL stores
 * they are built beside the live ones and swapped in (the schema work is
 * src/projections/rebuild-beside.ts, `rebuildBeside`; the build is the catch-up mode's); on KurrentDB
 * they are dropped and built in place. `casebook replay --until` builds every read model into an
 * investigation schema as it stood at a point of the log ({@link buildUntil}).
 */

import { forgetMigrations } from '../../db/migrations.js';
import type { Sql } from '../../db/sql.js';
import { comparePositions, type Position, type RecordedEvent } from '../../eventstore/port.js';
import { type Projection, readModelComponent } from '../projection.js';
import {
  createIndexesAndAnalyze,
  dropSecondaryIndexes,
  type RebuildResult,
  rebuildBeside,
} from '../rebuild-beside.js';
import { applyPage } from './apply-page.js';
import type { ProjectionRunner } from './index.js';
import { migrateState, type RunnerContext, withRunnerLock } from './shared.js';

type OnProgress = ((read: number, position: Position) => void) | undefined;

/** What a rebuild asks of the runner beyond its context: its other modes. */
export interface RebuildHooks {
  /** A runner of `projections` on `sql` (a rebuild's schema first) that leaves the store's append hook alone. */
  runnerOn(sql: Sql, projections: readonly Projection[]): ProjectionRunner;
  /** The runner's catch-up (KurrentDB: its follow up to the head of the log). */
  catchUp(onProgress: OnProgress): Promise<number>;
  /** The read models were dropped: what the runner knew it had applied is forgotten. */
  forgetProgress(): void;
  /** The read models were swapped: readers waiting for the deferred ones look again. */
  wakeDeferred(): void;
}

/**
 * Rebuilds the read models of `names` from the log (see `ProjectionRunner.rebuild`).
 * @returns the events read, and the projections whose rebuild stopped on an event.
 * @throws {Error} for an unknown name; what the database throws.
 */
export const rebuild = async (
  ctx: RunnerContext,
  hooks: RebuildHooks,
  onProgress: OnProgress,
  names: readonly string[],
): Promise<RebuildResult> => {
  for (const name of names) if (!ctx.byName.has(name)) throw new Error(`no projection named ${name}`);
  await migrateState(ctx.sql);
  if (ctx.mode === 'async') return rebuildInPlace(ctx, hooks, onProgress, names);
  const projections = names.map((name) => ctx.byName.get(name)!);
  const result = await rebuildBeside({
    sql: ctx.sql,
    appends: ctx.appends(),
    projections,
    runnerOn: (sql) => hooks.runnerOn(sql, projections),
    ...(onProgress ? { onProgress } : {}),
  });
  for (const [name, failure] of result.stopped)
    ctx.logger.error(
      { projection: name, ...failure },
      'the rebuild of a read model stopped on an event; the live one was kept',
    );
  ctx.applied$.next(undefined);
  hooks.wakeDeferred();
  return result;
};

/** Async mode's rebuild: drops and recreates the read models, then follows the log from its start. */
const rebuildInPlace = async (
  ctx: RunnerContext,
  hooks: RebuildHooks,
  onProgress: OnProgress,
  names: readonly string[],
): Promise<RebuildResult> => {
  // A follower keeps its checkpoints in memory: it must not run while the read models reset.
  const free = await withRunnerLock(
    ctx.sql,
    async () => true,
    async () => false,
  );
  if (!free) throw new Error('a projection runner is active on this database: stop it before replaying');
  const tables = names.flatMap((name) => ctx.byName.get(name)!.tables);
  const indexes = await ctx.sql.transaction(async (tx) => {
    for (const name of names) {
      const projection = ctx.byName.get(name)!;
      for (const table of projection.tables) await tx.exec(`DROP TABLE IF EXISTS ${table} CASCADE`);
      // Made again from version 1 of its migrations (their functions are replaced alike).
      await forgetMigrations(tx, readModelComponent(name));
      await projection.migrate(tx);
      await tx.query(
        `INSERT INTO projection_state (name, status, checkpoint, detail) VALUES ($1, 'live', NULL, NULL)
         ON CONFLICT (name) DO UPDATE SET status = 'live', checkpoint = NULL, detail = NULL, updated_at = now()`,
        [name],
      );
    }
    return dropSecondaryIndexes(tx, tables);
  });
  hooks.forgetProgress();
  const read = await hooks.catchUp(onProgress);
  await createIndexesAndAnalyze(ctx.sql, indexes, tables);
  const stopped = new Map(
    (await ctx.states())
      .filter((s) => names.includes(s.name) && s.status === 'stopped' && s.failure !== undefined)
      .map((s) => [s.name, s.failure!] as const),
  );
  return { read, stopped };
};

/**
 * Builds every projection from the log up to `until` into the runner's database, whose tables the
 * caller has migrated (see `ProjectionRunner.buildUntil`): events recorded after `until` (an
 * instant), or after it in `$all` (a position), are left out.
 * @returns the number of events applied.
 */
export const buildUntil = async (
  ctx: RunnerContext,
  until: Date | Position,
  onProgress: OnProgress,
): Promise<number> => {
  const instant = until instanceof Date ? until.getTime() : undefined;
  const keep = (event: RecordedEvent): 'apply' | 'skip' | 'stop' => {
    if (instant !== undefined) return Date.parse(event.metadata.recordedAt) <= instant ? 'apply' : 'skip';
    return comparePositions(event.position, until as Position) <= 0 ? 'apply' : 'stop';
  };
  const checkpoints = new Map(ctx.projections.map((p) => [p.name, undefined as Position | undefined]));
  let from: Position | undefined;
  let read = 0;
  let applied = 0;
  for (;;) {
    const page = await ctx.store.readAll({ ...(from ? { from } : {}), maxCount: ctx.pageSize });
    if (page.length === 0) break;
    const stop = page.findIndex((e) => keep(e) === 'stop');
    const kept = (stop < 0 ? page : page.slice(0, stop)).filter((e) => keep(e) === 'apply');
    if (kept.length > 0) await applyPage(ctx, kept, checkpoints, ctx.sql);
    applied += kept.length;
    read += stop < 0 ? page.length : stop;
    from = page.at(-1)!.position;
    onProgress?.(read, from);
    if (stop >= 0) break;
  }
  return applied;
};
