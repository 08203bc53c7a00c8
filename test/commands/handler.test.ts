/**
 * The one command handler (docs/architecture.md "The write pipeline"): load → decide → one atomic
 * append, retried on a concurrent append; several streams in one append; idempotent commands.
 * On PGlite and on a real Postgres server, with the SQL event store (no projections).
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import { execute } from '../../src/commands/handler.js';
import { type Decider, DomainError, type Event } from '../../src/domain/decider.js';
import { WrongExpectedVersion } from '../../src/eventstore/port.js';
import { testCommandContext } from '../support/commands.js';
import { closeAfterEach, openStore, testDatabases } from '../support/databases.js';

/** A counter aggregate: `Increment` by n; refuses to pass `limit`. */
type CounterEvent = Event<'Incremented', { by: number }>;
const counter = (limit = Number.POSITIVE_INFINITY): Decider<{ by: number }, number, CounterEvent> => ({
  initialState: 0,
  evolve: (state, event) => state + event.data.by,
  decide: (command, state) => {
    if (state + command.by > limit)
      throw new DomainError('conflict', 'LimitReached', `counter would pass ${limit}`);
    return command.by === 0 ? [] : [{ type: 'Incremented', data: { by: command.by } }];
  },
});

for (const db of testDatabases) {
  describe(`command handler on ${db.name}`, () => {
    const cleanups = closeAfterEach();

    const open = async () => {
      const { opened, store } = await openStore(db, cleanups);
      const appends: number[] = [];
      const ctx = testCommandContext(store, opened.sql, appends);
      return { store, ctx, appends };
    };

    it('decides on the state it read and appends with that revision as the expected state', async () => {
      const { store, ctx, appends } = await open();
      const decider = counter();
      await execute(ctx, (uow) => uow.decide('counter-1', decider, { by: 2 }));
      const { result, events } = await execute(ctx, async (uow) => {
        const before = await uow.load('counter-1', decider);
        await uow.decide('counter-1', decider, { by: 3 });
        return before;
      });
      expect(result).to.equal(2);
      expect(events.map((e) => e.metadata)).to.deep.equal([
        {
          tenantId: 7,
          actor: { type: 'system', id: 'handler-test' },
          correlationId: ctx.correlationId,
          causationId: null,
          requestId: 'req-1',
          recordedAt: '2026-03-01T10:00:00.000Z',
        },
      ]);
      expect((await store.readStream('counter-1')).map((e) => [e.revision, e.data])).to.deep.equal([
        [0n, { by: 2 }],
        [1n, { by: 3 }],
      ]);
      expect(appends).to.deep.equal([1, 1]);
    });

    it('runs the command again on fresh state when another writer appended first', async () => {
      const { store, ctx } = await open();
      const decider = counter(10);
      let attempts = 0;
      const { result } = await execute(ctx, async (uow) => {
        attempts++;
        const seen = await uow.load('counter-2', decider);
        // Another writer gets in between this attempt's read and its append, once.
        if (attempts === 1) await execute(ctx, (other) => other.decide('counter-2', decider, { by: 4 }));
        await uow.decide('counter-2', decider, { by: 5 });
        return seen;
      });
      expect(attempts).to.equal(2);
      expect(result).to.equal(4);
      expect((await store.readStream('counter-2')).map((e) => e.data)).to.deep.equal([{ by: 4 }, { by: 5 }]);
    });

    it('refuses on the retry when the fresh state no longer allows the command, and writes nothing of it', async () => {
      const { store, ctx } = await open();
      const decider = counter(10);
      let attempts = 0;
      let error: unknown;
      await execute(ctx, async (uow) => {
        attempts++;
        await uow.load('counter-3', decider);
        if (attempts === 1) await execute(ctx, (other) => other.decide('counter-3', decider, { by: 8 }));
        await uow.decide('counter-3', decider, { by: 5 });
      }).catch((e: unknown) => {
        error = e;
      });
      expect(attempts).to.equal(2);
      expect(error).to.be.instanceOf(DomainError);
      expect((error as DomainError).code).to.equal('LimitReached');
      expect((await store.readStream('counter-3')).map((e) => e.data)).to.deep.equal([{ by: 8 }]);
    });

    it('decides a refusal again when a stream it read has moved since (a torn view), and refuses only on current reads', async () => {
      const { store, ctx } = await open();
      const decider = counter();
      let attempts = 0;
      // The command reads `a`, then `b`; another writer appends to both in one append between the
      // two reads, once. The first attempt sees `b` written but not `a`: an inconsistent view.
      const { result } = await execute(ctx, async (uow) => {
        attempts++;
        const a = await uow.load('torn-a', decider);
        if (attempts === 1)
          await execute(ctx, async (other) => {
            await other.decide('torn-a', decider, { by: 1 });
            await other.decide('torn-b', decider, { by: 1 });
          });
        const b = await uow.load('torn-b', decider);
        if (b > 0 && a === 0) throw new DomainError('conflict', 'Torn', 'b was written without a');
        return [a, b];
      });
      expect(attempts).to.equal(2);
      expect(result).to.deep.equal([1, 1]);

      // A refusal whose reads are still current is final at once.
      let refusals = 0;
      const error = await execute(ctx, async (uow) => {
        refusals++;
        await uow.load('torn-a', decider);
        throw new DomainError('conflict', 'Refused', 'no');
      }).catch((e: unknown) => e);
      expect(error).to.be.instanceOf(DomainError);
      expect(refusals).to.equal(1);
      expect((await store.readStream('torn-a')).map((e) => e.data)).to.deep.equal([{ by: 1 }]);
    });

    it('gives up with WrongExpectedVersion after the last attempt', async () => {
      const { ctx } = await open();
      const decider = counter();
      let error: unknown;
      await execute(
        ctx,
        async (uow) => {
          await uow.load('counter-4', decider);
          await execute(ctx, (other) => other.decide('counter-4', decider, { by: 1 }));
          await uow.decide('counter-4', decider, { by: 1 });
        },
        { maxAttempts: 3 },
      ).catch((e: unknown) => {
        error = e;
      });
      expect(error).to.be.instanceOf(WrongExpectedVersion);
    });

    it('appends the decisions on several streams atomically, in the order they were decided', async () => {
      const { store, ctx } = await open();
      const decider = counter(5);
      await execute(ctx, async (uow) => {
        await uow.load('counter-b', decider);
        await uow.decide('counter-a', decider, { by: 1 });
        await uow.decide('counter-b', decider, { by: 2 });
        await uow.decide('counter-a', decider, { by: 3 });
      });
      const all = await store.readAll();
      expect(all.map((e) => [e.streamName, e.data])).to.deep.equal([
        ['counter-a', { by: 1 }],
        ['counter-a', { by: 3 }],
        ['counter-b', { by: 2 }],
      ]);
      expect(new Set(all.map((e) => e.position.commit)).size, 'one transaction').to.equal(1);

      // A refusal on the second stream writes nothing on the first.
      let error: unknown;
      await execute(ctx, async (uow) => {
        await uow.decide('counter-c', decider, { by: 1 });
        await uow.decide('counter-a', decider, { by: 5 });
      }).catch((e: unknown) => {
        error = e;
      });
      expect(error).to.be.instanceOf(DomainError);
      expect(await store.readStream('counter-c')).to.deep.equal([]);
    });

    it('checks a stream it only required: a concurrent change to it makes the command run again', async () => {
      const { store, ctx } = await open();
      const decider = counter();
      await execute(ctx, (uow) => uow.decide('parent', decider, { by: 1 }));
      let attempts = 0;
      await execute(ctx, async (uow) => {
        attempts++;
        await uow.load('parent', decider);
        uow.require('parent');
        if (attempts === 1) await execute(ctx, (other) => other.decide('parent', decider, { by: 1 }));
        await uow.decide('child', decider, { by: 1 });
      });
      expect(attempts).to.equal(2);
      expect((await store.readStream('parent')).length).to.equal(2);
      expect((await store.readStream('child')).length).to.equal(1);
    });

    it('writes a command with a command id once, however often it is executed', async () => {
      const { store, ctx } = await open();
      const decider: Decider<{ by: number }, number, CounterEvent> = {
        ...counter(),
        // Unconditional: every execution decides the same event again.
        decide: (command) => [{ type: 'Incremented', data: { by: command.by } }],
      };
      const commandId = uuid();
      const first = await execute(
        ctx,
        (uow) => uow.decide('counter-5', decider, { by: 1 }, { fresh: true }),
        {
          commandId,
        },
      );
      const again = await execute(
        ctx,
        (uow) => uow.decide('counter-5', decider, { by: 1 }, { fresh: true }),
        {
          commandId,
        },
      );
      expect(again.events.map((e) => e.id)).to.deep.equal(first.events.map((e) => e.id));
      expect((await store.readStream('counter-5')).length).to.equal(1);
    });

    it('decides nothing and appends nothing when the command changes nothing', async () => {
      const { store, ctx, appends } = await open();
      const { position, events } = await execute(ctx, (uow) => uow.decide('counter-6', counter(), { by: 0 }));
      expect(position).to.equal(undefined);
      expect(events).to.deep.equal([]);
      expect(appends).to.deep.equal([]);
      expect(await store.readStream('counter-6')).to.deep.equal([]);
    });
  });
}
