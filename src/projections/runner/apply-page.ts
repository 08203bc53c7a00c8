/**
 * The step every mode of the runner but the inline one is made of (docs/architecture.md
 * "Projections"): one page of the log applied to several projections from their checkpoints, each
 * checkpoint moved with the rows it covers, and a projection that fails on an event stopped there
 * alone. Catch-up, follow, rebuild to a point in time and the deferred follower all apply pages so.
 */

import type { Sql } from '../../db/sql.js';
import {
  comparePositions,
  type Position,
  positionToString,
  type RecordedEvent,
} from '../../eventstore/port.js';
import { AppendHookFailure } from '../../eventstore/sql-capability.js';
import { failureOf, isPoison, markStopped, type RunnerContext } from './shared.js';

/**
 * Applies one page to every projection in `checkpoints` (those after its checkpoint, of types it
 * handles) in one transaction of `sql`, moving each checkpoint to the page's end. A projection
 * that fails is found event by event, stopped there and removed from `checkpoints`; the page is
 * then applied again to the others.
 *
 * `sql` is the runner's database (`ctx.sql`: transactions of its own; on PostgreSQL one per
 * projection, all at once on the pool) or a caller's transaction (applied inside a savepoint).
 * @throws what is not a projection's own failure (a lost connection): nothing of the page is kept.
 */
export const applyPage = async (
  ctx: RunnerContext,
  page: readonly RecordedEvent[],
  checkpoints: Map<string, Position | undefined>,
  sql: Sql,
): Promise<void> => {
  const last = page.at(-1)!.position;
  if (sql === ctx.sql && sql.kind === 'postgres' && checkpoints.size > 1) {
    // Outside a caller's transaction on PostgreSQL, each projection gets its own transaction
    // (with its checkpoint), all at once on the pool: one projection's statements run in the
    // server while the next one's rows are folded here (a rebuild of 200,000 events on 2 cores: 9.2 s
    // in one transaction per page, 6.4 s so; docs/performance.md "Rebuild and replay").
    const names = [...checkpoints];
    const alone = names.map(([name, checkpoint]) => new Map([[name, checkpoint]]));
    const settled = await Promise.allSettled(alone.map((one) => applyPage(ctx, page, one, sql)));
    const failed = settled.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    names.forEach(([name], i) => {
      if (alone[i]!.has(name)) checkpoints.set(name, last);
      else checkpoints.delete(name);
    });
    return;
  }
  const run = async (tx: Sql) => {
    for (const [name, checkpoint] of checkpoints) {
      const projection = ctx.byName.get(name)!;
      const relevant = page.filter(
        (e) => projection.handles(e.type) && (!checkpoint || comparePositions(e.position, checkpoint) > 0),
      );
      if (relevant.length > 0) {
        try {
          await projection.apply(relevant, tx, 'catch-up');
        } catch (error) {
          throw new AppendHookFailure(name, undefined, error);
        }
      }
      await tx.query(`UPDATE projection_state SET checkpoint = $2, updated_at = now() WHERE name = $1`, [
        name,
        positionToString(last),
      ]);
    }
  };
  for (;;) {
    const savepoint = sql !== ctx.sql;
    try {
      if (savepoint) {
        await sql.exec('SAVEPOINT casebook_catch_up');
        await run(sql);
        await sql.exec('RELEASE SAVEPOINT casebook_catch_up');
      } else
        await sql.transaction(async (tx) => {
          // Without waiting for the WAL flush: the transaction holds the checkpoint with the
          // rows, so a crash that loses it loses both, and the events are applied again from
          // the log (a replay of 200,000 events commits ~400 such transactions).
          if (tx.kind === 'postgres') await tx.exec('SET LOCAL synchronous_commit = off');
          await run(tx);
        });
      for (const name of checkpoints.keys()) checkpoints.set(name, last);
      return;
    } catch (error) {
      if (savepoint) await sql.exec('ROLLBACK TO SAVEPOINT casebook_catch_up');
      if (!(error instanceof AppendHookFailure) || !isPoison(error.cause))
        throw error instanceof AppendHookFailure ? error.cause : error;
      await stopAtFailingEvent(ctx, error.key, page, checkpoints.get(error.key), sql);
      checkpoints.delete(error.key);
      if (checkpoints.size === 0) return;
    }
  }
};

/**
 * Finds the event of `page` that `name` fails on (each inside a savepoint of one transaction of
 * `sql`) and stops the projection there; the events before it stay applied.
 */
const stopAtFailingEvent = async (
  ctx: RunnerContext,
  name: string,
  page: readonly RecordedEvent[],
  checkpoint: Position | undefined,
  sql: Sql,
): Promise<void> => {
  const projection = ctx.byName.get(name)!;
  await sql.transaction(async (tx) => {
    let applied = checkpoint;
    for (const event of page) {
      if (
        !projection.handles(event.type) ||
        (checkpoint && comparePositions(event.position, checkpoint) <= 0)
      )
        continue;
      await tx.exec('SAVEPOINT casebook_isolate');
      try {
        await projection.apply([event], tx, 'catch-up');
        await tx.exec('RELEASE SAVEPOINT casebook_isolate');
        applied = event.position;
      } catch (error) {
        await tx.exec('ROLLBACK TO SAVEPOINT casebook_isolate');
        const failure = failureOf(event, error, ctx.clock());
        await markStopped(tx, name, failure, applied);
        ctx.logger.error({ projection: name, ...failure }, 'projection stopped on an event');
        return;
      }
    }
  });
};
