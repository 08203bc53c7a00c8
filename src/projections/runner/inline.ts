/**
 * Inline mode of the projection runner (docs/architecture.md "Projections", "live"; SQL stores):
 * the live projections are applied inside every append's own transaction, or as calls of their
 * PL/pgSQL functions in the append's own statement (`Projection.inline`; "Event store", inline
 * read models in the same call). A write is readable as soon as it is acknowledged, from any
 * replica. A projection that fails on an event of an append stops alone, at that event.
 */

import type { Sql } from '../../db/sql.js';
import type { RecordedEvent } from '../../eventstore/port.js';
import { type AppendHook, AppendHookFailure, type InlineCall } from '../../eventstore/sql-capability.js';
import type { Projection } from '../projection.js';
import { failureOf, isPoison, markStopped, ReadModelUnavailable, type RunnerContext } from './shared.js';

/** Events remembered as having stopped a projection (the oldest are forgotten past this). */
const MAX_STOPPED_BY = 1000;

/** The append hook of a runner's inline projections, and what their stops are remembered for. */
export class InlineProjections {
  /** Events whose inline append stopped a projection (event id → projection), for the handler. */
  private readonly stoppedBy = new Map<string, string>();

  constructor(private readonly ctx: RunnerContext) {}

  /**
   * The hook the SQL store runs in every append transaction: applies the live projections to the
   * events they handle; skips building ones (their catch-up will); refuses the append when a
   * stopped projection (or one this process does not know, run live by a newer version) handles
   * one of its events; turns a poison failure into a stop of that projection only.
   */
  hook(): AppendHook {
    const { ctx } = this;
    const inline = ctx.projections.filter((p) => !ctx.deferred.has(p.name));
    const unknown = (name: string) =>
      new ReadModelUnavailable(
        name,
        false,
        `read model ${name} is maintained by a newer casebook version; upgrade this process`,
      );
    return {
      known: ctx.projections.map((p) => p.name),
      needed: (types) => inline.some((p) => [...types].some((type) => p.handles(type))),
      unknownProjection: unknown,
      apply: async (tx, events, statuses, failures) => {
        if (events.length === 0) return;
        const applied = new Set<string>();
        for (const [name, status] of statuses)
          if (status === 'live' && !ctx.byName.has(name)) throw unknown(name);
        for (const projection of inline) {
          const relevant = events.filter((e) => projection.handles(e.type));
          if (relevant.length === 0) continue;
          const status = statuses.get(projection.name) ?? 'live';
          if (status === 'building') continue;
          if (status === 'stopped' && projection.refuseWritesWhenStopped === false) continue;
          if (status === 'stopped')
            throw new ReadModelUnavailable(
              projection.name,
              false,
              `read model ${projection.name} is stopped (see /readyz); this write was refused until it is rebuilt`,
            );
          applied.add(projection.name);
          if (failures.has(projection.name)) {
            await this.applyIsolating(projection, relevant, tx);
            continue;
          }
          try {
            await projection.apply(relevant, tx, 'inline');
          } catch (error) {
            if (isPoison(error)) throw new AppendHookFailure(projection.name, undefined, error);
            throw error;
          }
        }
        queueMicrotask(() => ctx.applied$.next(applied));
      },
      calls: (events) => {
        const calls: InlineCall[] = [];
        for (const projection of inline) {
          const relevant = events.filter((e) => projection.handles(e.type));
          if (relevant.length === 0) continue;
          if (!projection.inline) return undefined;
          const argument = projection.inline.argument(relevant);
          if (argument !== undefined)
            calls.push({ projection: projection.name, function: projection.inline.function, argument });
        }
        return calls;
      },
      called: (calls) => queueMicrotask(() => ctx.applied$.next(new Set(calls.map((c) => c.projection)))),
    };
  }

  /**
   * The projection whose stop one of these (just appended) events caused, if any: the write was
   * stored but is not readable through it.
   */
  stoppedByEvents(eventIds: readonly string[]): string | undefined {
    for (const id of eventIds) {
      const name = this.stoppedBy.get(id);
      if (name !== undefined) return name;
    }
    return undefined;
  }

  /**
   * The retry of an append on which `projection` failed: applies its events one by one inside
   * savepoints, stops the projection at the first that fails (the ones before stay applied).
   */
  private async applyIsolating(
    projection: Projection,
    events: readonly RecordedEvent[],
    tx: Sql,
  ): Promise<void> {
    for (const event of events) {
      await tx.exec('SAVEPOINT casebook_projection');
      try {
        await projection.apply([event], tx, 'inline');
        await tx.exec('RELEASE SAVEPOINT casebook_projection');
      } catch (error) {
        await tx.exec('ROLLBACK TO SAVEPOINT casebook_projection');
        const failure = failureOf(event, error, this.ctx.clock());
        await markStopped(tx, projection.name, failure, undefined);
        if (projection.refuseWritesWhenStopped !== false) this.stoppedBy.set(event.id, projection.name);
        if (this.stoppedBy.size > MAX_STOPPED_BY) this.stoppedBy.delete(this.stoppedBy.keys().next().value!);
        this.ctx.logger.error({ projection: projection.name, ...failure }, 'projection stopped on an event');
        return;
      }
    }
  }
}
