/**
 * docs/architecture.md "Event store": a `$all` subscriber on postgres never skips an event that commits out of order.
 * Twelve appenders on their own small pools append concurrently, some holding their transaction open
 * (pg_sleep) after it took its xid, so transactions commit out of xid and position order, while
 * one subscriber from the start collects everything.
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import type { Sql } from '../../src/db/sql.js';
import {
  comparePositions,
  EventIdConflict,
  type NewEvent,
  type RecordedEvent,
  WrongExpectedVersion,
} from '../../src/eventstore/port.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { type OpenedDatabase, testDatabases } from '../support/databases.js';

const APPENDERS = 12;
/** Connections per appender's pool: its transaction and the store's own query beside it. */
const APPENDER_POOL_MAX = 2;
const ITERATIONS = 40;
const EVENTS_PER_ITERATION = 2;
const STREAMS = Array.from({ length: 40 }, (_, i) => `concurrency-${i}-${uuid()}`);
const TOTAL = APPENDERS * ITERATIONS * EVENTS_PER_ITERATION;

const newEvent = (appender: number, iteration: number, n: number): NewEvent => ({
  id: uuid(),
  type: 'LoadTested',
  data: { appender, iteration, n },
  metadata: {
    tenantId: 1,
    actor: { type: 'system', id: `appender-${appender}` },
    correlationId: uuid(),
    causationId: null,
    requestId: null,
    recordedAt: new Date(0).toISOString(),
  },
});

const pick = <T>(list: readonly T[]): T => list[Math.floor(Math.random() * list.length)]!;
const sleepSeconds = () => (0.02 + Math.random() * 0.15).toFixed(3);

/**
 * One appender: its own pool and store; every 5th iteration holds its transaction open, either
 * before appending (its xid is old when its events land) or after (its events commit late);
 * every 4th iteration appends to two streams at once, in random order.
 */
const runAppender = async (sql: Sql, appender: number, appended: string[]): Promise<void> => {
  const store = await SqlEventStore.open(sql);
  try {
    for (let iteration = 0; iteration < ITERATIONS; iteration++) {
      const batch = Array.from({ length: EVENTS_PER_ITERATION }, (_, n) => newEvent(appender, iteration, n));
      if (iteration % 5 === appender % 5) {
        await sql.transaction(async (tx) => {
          const inTransaction = await SqlEventStore.open(tx);
          const sleepFirst = Math.random() < 0.5;
          await tx.query('SELECT pg_current_xact_id()');
          if (sleepFirst) await tx.query(`SELECT pg_sleep(${sleepSeconds()})`);
          await inTransaction.append(pick(STREAMS), batch, 'any');
          if (!sleepFirst) await tx.query(`SELECT pg_sleep(${sleepSeconds()})`);
          await inTransaction.close();
        });
      } else if (iteration % 4 === 3) {
        const first = pick(STREAMS);
        const second = pick(STREAMS.filter((s) => s !== first));
        await store.appendMany([
          { streamName: first, events: batch.slice(0, 1), expectedState: 'any' },
          { streamName: second, events: batch.slice(1), expectedState: 'any' },
        ]);
      } else {
        await store.append(pick(STREAMS), batch, 'any');
      }
      appended.push(...batch.map((e) => e.id));
    }
  } finally {
    await store.close();
  }
};

/** A fresh PostgreSQL schema for the enclosing suite, opened before its tests and dropped after. */
const onPostgres = (): { readonly db: OpenedDatabase } => {
  let opened: OpenedDatabase | undefined;
  before(async () => {
    opened = await testDatabases.find((d) => d.name === 'postgres')!.open();
  });
  after(async () => {
    await opened?.dispose();
  });
  return {
    get db() {
      if (!opened) throw new Error('the suite has not opened its database yet');
      return opened;
    },
  };
};

describe('SqlEventStore on postgres under concurrent appends', function () {
  this.timeout(30_000);
  const postgres = onPostgres();

  it('delivers every event exactly once, in position order, equal to readAll from the start', async () => {
    const store = await SqlEventStore.open(postgres.db.sql);
    const controller = new AbortController();
    const received: RecordedEvent[] = [];
    const subscribing = (async () => {
      for await (const event of store.subscribeToAll({ signal: controller.signal })) received.push(event);
    })();

    try {
      const appended: string[] = [];
      const pools = await Promise.all(
        Array.from({ length: APPENDERS }, () => postgres.db.reopen(APPENDER_POOL_MAX)),
      );
      await Promise.all(pools.map((sql, appender) => runAppender(sql, appender, appended)));
      // Their connections are not needed any more: give them back before the next tests open theirs
      // (PostgreSQL allows 100 clients; idle pools keep theirs for ten seconds).
      await Promise.all(pools.map((sql) => sql.close()));
      expect(appended.length).to.equal(TOTAL);

      const deadline = Date.now() + 10_000;
      while (received.length < TOTAL && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      // Anything delivered twice would arrive within a few polls.
      await new Promise((resolve) => setTimeout(resolve, 400));
      controller.abort();
      await subscribing;

      const receivedIds = received.map((e) => e.id);
      expect(new Set(receivedIds).size, 'distinct events received').to.equal(receivedIds.length);
      expect(receivedIds.length, 'events received').to.equal(TOTAL);
      expect([...receivedIds].sort()).to.deep.equal([...appended].sort());
      for (let i = 1; i < received.length; i++) {
        expect(comparePositions(received[i - 1]!.position, received[i]!.position), `position ${i}`).to.equal(
          -1,
        );
      }

      const all: RecordedEvent[] = [];
      for (;;) {
        const last = all[all.length - 1];
        const page = await store.readAll({ ...(last ? { from: last.position } : {}), maxCount: 300 });
        all.push(...page);
        if (page.length < 300) break;
      }
      expect(all.map((e) => [e.id, e.position])).to.deep.equal(received.map((e) => [e.id, e.position]));

      // Every stream's revisions are gapless: the row locks serialised the appenders.
      let total = 0;
      for (const stream of STREAMS) {
        const events = await store.readStream(stream);
        expect(events.map((e) => e.revision)).to.deep.equal(events.map((_, i) => BigInt(i)));
        total += events.length;
      }
      expect(total).to.equal(TOTAL);
    } finally {
      controller.abort();
      await subscribing.catch(() => undefined);
      await store.close();
    }
  });
  describe('the same event id appended by two transactions at once', () => {
    /** Appends `event` in a transaction held open for `holdMs` after the append; resolves on commit. */
    const appendHeldOpen = async (sql: Sql, stream: string, event: NewEvent, appended: () => void) =>
      sql.transaction(async (tx) => {
        const inTransaction = await SqlEventStore.open(tx);
        const result = await inTransaction.append(stream, [event], 'any');
        appended();
        await tx.query('SELECT pg_sleep(0.3)');
        return result;
      });

    it('refuses it on another stream with EventIdConflict once the first commits', async () => {
      const [first, second] = [await postgres.db.reopen(2), await postgres.db.reopen(2)];
      const store = await SqlEventStore.open(second);
      const event = newEvent(0, 0, 0);
      const one = `race-${uuid()}`;
      const other = `race-${uuid()}`;
      let appended!: () => void;
      const inserted = new Promise<void>((resolve) => {
        appended = resolve;
      });
      const holding = appendHeldOpen(first, one, event, appended);
      await inserted;
      // Blocks on the unique index until the first transaction commits, then must not write.
      const error = await store.append(other, [event], 'any').then(
        () => undefined,
        (e: unknown) => e,
      );
      const held = await holding;
      expect(error).to.be.instanceOf(EventIdConflict);
      expect((error as EventIdConflict).eventId).to.equal(event.id);
      expect(held.nextRevision).to.equal(0n);
      expect((await store.readStream(one)).map((e) => e.id)).to.deep.equal([event.id]);
      expect(await store.readStream(other)).to.deep.equal([]);
      await store.close();
    });

    it('answers the second append on the same stream as a replay of the first', async () => {
      const [first, second] = [await postgres.db.reopen(2), await postgres.db.reopen(2)];
      const store = await SqlEventStore.open(second);
      const event = newEvent(0, 0, 1);
      const stream = `race-${uuid()}`;
      let appended!: () => void;
      const inserted = new Promise<void>((resolve) => {
        appended = resolve;
      });
      const holding = appendHeldOpen(first, stream, event, appended);
      await inserted;
      // Waits for the stream lock, then finds the committed event: a no-op with the same result.
      const replay = await store.append(stream, [event], 'no_stream');
      const held = await holding;
      expect(replay.nextRevision).to.equal(0n);
      expect(replay.position).to.deep.equal(held.position);
      expect((await store.readStream(stream)).map((e) => e.id)).to.deep.equal([event.id]);
      await store.close();
    });
  });
});

describe('SqlEventStore on postgres: the one append path under concurrent appends of one stream', () => {
  const postgres = onPostgres();

  it('lets exactly one of N concurrent appends at one expected revision win, across processes and batches', async () => {
    const pools = await Promise.all([1, 2, 3].map(() => postgres.db.reopen(3)));
    const stores = await Promise.all(pools.map((sql) => SqlEventStore.open(sql)));
    const stream = `attack-${uuid()}`;
    try {
      await stores[0]!.append(stream, [newEvent(0, 0, 0)], 'no_stream');
      for (const expected of [0n, 1n]) {
        // Eight appends from each of three stores (pools), all sent at once.
        const answers = await Promise.all(
          stores.flatMap((store, s) =>
            Array.from({ length: 8 }, (_, i) =>
              store.append(stream, [newEvent(s, i, Number(expected))], expected).then(
                (r) => r.nextRevision,
                (e: unknown) => e,
              ),
            ),
          ),
        );
        const won = answers.filter((a) => a === expected + 1n);
        expect(won, String(expected)).to.have.length(1);
        for (const lost of answers.filter((a) => a !== expected + 1n)) {
          expect(lost).to.be.instanceOf(WrongExpectedVersion);
          expect((lost as WrongExpectedVersion).actual).to.equal(expected + 1n);
        }
      }
      const events = await stores[0]!.readStream(stream);
      expect(events.map((e) => e.revision)).to.deep.equal([0n, 1n, 2n]);
    } finally {
      await Promise.all(stores.map((store) => store.close()));
      await Promise.all(pools.map((sql) => sql.close()));
    }
  });

  it('answers a request sent again during a concurrent append of the same stream with the stored result', async () => {
    const [first, second, third] = [
      await postgres.db.reopen(2),
      await postgres.db.reopen(2),
      await postgres.db.reopen(2),
    ];
    const [replaying, other] = [await SqlEventStore.open(second), await SqlEventStore.open(third)];
    const stream = `attack-${uuid()}`;
    const events = [newEvent(1, 0, 0), newEvent(1, 0, 1)];
    try {
      let appended!: () => void;
      const inserted = new Promise<void>((resolve) => {
        appended = resolve;
      });
      // The original request, committed 0.3 s after it wrote.
      const original = first.transaction(async (tx) => {
        const result = await (await SqlEventStore.open(tx)).append(stream, events, 'no_stream');
        appended();
        await tx.query('SELECT pg_sleep(0.3)');
        return result;
      });
      await inserted;
      // While it is open: the same request again, and another writer of the stream.
      const another = newEvent(2, 0, 0);
      const [replay, concurrent] = await Promise.all([
        replaying.append(stream, events, 'no_stream'),
        other.append(stream, [another], 'any'),
      ]);
      const stored = await original;
      expect(replay).to.deep.equal(stored);
      expect(concurrent.nextRevision).to.equal(2n);
      // Whichever of the two came first: nothing written twice.
      expect((await other.readStream(stream)).map((e) => e.id)).to.deep.equal([
        ...events.map((e) => e.id),
        another.id,
      ]);
    } finally {
      await Promise.all([replaying.close(), other.close()]);
      await Promise.all([first.close(), second.close(), third.close()]);
    }
  });
});

describe('SqlEventStore on postgres: the head of the log', () => {
  const postgres = onPostgres();

  it('gives as head the last committed event even while an older transaction holds readers back', async () => {
    const store = await SqlEventStore.open(postgres.db.sql);
    const blocker = await postgres.db.reopen();
    try {
      await blocker.withConnection(async (conn) => {
        // An open transaction with an xid: $all readers stop below it until it ends.
        await conn.query('BEGIN');
        await conn.query('SELECT pg_current_xact_id()');
        try {
          const { position } = await store.append(`head-${uuid()}`, [newEvent(0, 0, 0)], 'no_stream');
          expect(comparePositions((await store.headPosition())!, position)).to.equal(0);
          const seen = await store.readAll({ maxCount: 100_000 });
          expect(seen.some((e) => comparePositions(e.position, position) === 0)).to.equal(false);
        } finally {
          await conn.query('ROLLBACK');
        }
      });
    } finally {
      await blocker.close();
      await store.close();
    }
  });
});
