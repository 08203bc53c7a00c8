/**
 * The tamper-evident log (issue 14; docs/architecture.md "Tamper-evident log") on both SQL stores:
 * the sealer seals every event once, in order; `verifyLog` names the first event altered, removed
 * or inserted behind casebook's back; `verifyAgainst` catches a rewrite whose leaves and seals
 * were recomputed; heads are signed with Ed25519.
 */
import { generateKeyPairSync } from 'node:crypto';
import { expect } from 'chai';
import pino from 'pino';
import { v4 as uuid } from 'uuid';
import { BackgroundThread } from '../../src/background/thread.js';
import { openCasebook } from '../../src/casebook.js';
import { loadConfig } from '../../src/config.js';
import type { Sql } from '../../src/db/sql.js';
import { type NewEvent, positionToString, type RecordedEvent } from '../../src/eventstore/port.js';
import { GENESIS_HASH } from '../../src/eventstore/seal.js';
import { Sealer } from '../../src/eventstore/sealer.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { logHead, parseHead, verifyAgainst, verifyLog } from '../../src/eventstore/verify.js';
import { type OpenedDatabase, testDatabases } from '../support/databases.js';

const event = (n: number): NewEvent => ({
  id: uuid(),
  type: 'NoteRecorded',
  data: { n, text: `note ${n}`, nested: { b: 1, a: [1, 2] } },
  metadata: {
    tenantId: 1,
    actor: { type: 'client', id: 'ehr-backend' },
    correlationId: uuid(),
    causationId: null,
    requestId: null,
    recordedAt: new Date(Date.UTC(2026, 2, 1, 10, 0, n)).toISOString(),
  },
});

/** Every committed event, past the xmin horizon another test run's transaction may hold back. */
const everyEvent = (sql: Sql) => SqlEventStore.readAllOn(sql, { maxCount: 10_000 }, false);

for (const database of testDatabases) {
  describe(`tamper-evident log on ${database.name}`, function () {
    this.timeout(60_000);
    let opened: OpenedDatabase;
    let store: SqlEventStore;
    let sealer: Sealer;
    let sealed: RecordedEvent[];

    /** 30 events on 10 streams (3 appends each, one of them 2 events), all sealed. */
    beforeEach(async () => {
      opened = await database.open();
      store = await SqlEventStore.open(opened.sql);
      sealer = new Sealer(store, opened.sql, pino({ level: 'silent' }), { batch: 7 });
      await sealer.migrate();
      let n = 0;
      for (let s = 0; s < 10; s++) {
        const stream = `note-${s}`;
        await store.append(stream, [event(n++)], 'no_stream');
        await store.append(stream, [event(n++), event(n++)], 0n);
      }
      const all = await everyEvent(opened.sql);
      expect(all).to.have.length(30);
      // Seal until every event is in (the $all reader waits for earlier transactions to end).
      for (let i = 0; i < 100; i++) {
        await sealer.sealAll();
        const result = await verifyLog(store, opened.sql);
        if (result.sealed === 30) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      sealed = all;
    });
    afterEach(() => opened.dispose());

    it('seals every event once, in batches, and an untouched log verifies', async () => {
      const result = await verifyLog(store, opened.sql);
      expect(result).to.deep.include({ ok: true, events: 30, sealed: 30, unsealed: 0 });
      expect(result.headPosition).to.equal(positionToString(sealed.at(-1)!.position));
      expect(result.headHash)
        .to.match(/^[0-9a-f]{64}$/)
        .and.not.equal(GENESIS_HASH);
      const seals = await opened.sql.query<{ event_count: number }>(
        `SELECT event_count FROM es_seals ORDER BY seq`,
      );
      expect(seals.map((s) => Number(s.event_count)).reduce((a, b) => a + b, 0)).to.equal(30);
      expect(seals.length).to.be.greaterThanOrEqual(5); // batches of at most 7
      // The head computed from the events alone is the sealed head.
      const head = await logHead(store, new Date());
      expect(head).to.deep.include({ hash: result.headHash, position: result.headPosition, events: 30 });
      expect(await sealer.sealAll()).to.equal(0);
      // Events after the last seal are reported, not an error, while they are recent.
      await store.append('note-late', [event(99)], 'no_stream');
      const soon = new Date(Date.parse(event(99).metadata.recordedAt) + 60_000);
      const later = await verifyLog(store, opened.sql, { now: soon });
      expect(later.ok).to.equal(true);
      expect(later).to.deep.include({ sealed: 30, unsealed: 1 });
      // Left unsealed past the grace period (10 minutes by default), it is a problem.
      const late = new Date(Date.parse(event(99).metadata.recordedAt) + 11 * 60_000);
      const stale = await verifyLog(store, opened.sql, { now: late });
      expect(stale.ok).to.equal(false);
      expect(stale.problem?.kind).to.equal('unsealed');
      expect((await verifyLog(store, opened.sql, { now: late, maxUnsealedAgeMs: Infinity })).ok).to.equal(
        true,
      );
    });

    it('names the first event when every seal and leaf was deleted (not taken for "not sealed yet")', async () => {
      await opened.sql.exec('DELETE FROM es_seal_leaves; DELETE FROM es_seals');
      const result = await verifyLog(store, opened.sql);
      expect(result.ok).to.equal(false);
      expect(result.problem).to.deep.include({
        kind: 'unsealed',
        position: positionToString(sealed[0]!.position),
      });
    });

    it('names the position of an event whose data was changed in the database', async () => {
      const target = sealed[12]!;
      await opened.sql.query(
        `UPDATE es_events SET data = '{"n":12,"text":"rewritten","nested":{"b":1,"a":[1,2]}}'::json WHERE event_id = $1`,
        [target.id],
      );
      const result = await verifyLog(store, opened.sql);
      expect(result.ok).to.equal(false);
      expect(result.problem).to.deep.include({
        kind: 'altered',
        position: positionToString(target.position),
      });
    });

    it('names the position of an event deleted from the database', async () => {
      const target = sealed[20]!;
      await opened.sql.query(`DELETE FROM es_events WHERE event_id = $1`, [target.id]);
      const result = await verifyLog(store, opened.sql);
      expect(result.ok).to.equal(false);
      expect(result.problem).to.deep.include({
        kind: 'removed',
        position: positionToString(target.position),
      });
    });

    it('names the position of an event inserted into a sealed range', async () => {
      const before = sealed[5]!;
      const forged = uuid();
      // Same transaction id as a sealed event, a position after it: it sorts inside the sealed range.
      await opened.sql.query(
        `INSERT INTO es_events (transaction_id, position, event_id, stream_name, revision, type, data, metadata)
         VALUES ($1::xid8, 900000000000, $2::uuid, 'note-forged', 0, 'NoteRecorded', '{"n":-1}'::json, $3::jsonb)`,
        [String(before.position.commit), forged, JSON.stringify(before.metadata)],
      );
      const result = await verifyLog(store, opened.sql);
      expect(result.ok).to.equal(false);
      expect(result.problem).to.deep.include({
        kind: 'inserted',
        position: `${before.position.commit}/900000000000`,
      });
    });

    it('catches, against an earlier head, a change whose leaves and seals were recomputed', async () => {
      const head = await logHead(store, new Date());
      expect((await verifyAgainst(store, head)).ok).to.equal(true);
      const target = sealed[3]!;
      await opened.sql.query(
        `UPDATE es_events SET metadata = jsonb_set(metadata, '{actor,id}', '"mallory"') WHERE event_id = $1`,
        [target.id],
      );
      // The intruder recomputes every leaf and seal: the walk against the seals passes…
      await opened.sql.exec(`DELETE FROM es_seal_leaves; DELETE FROM es_seals;`);
      expect(await sealer.sealAll()).to.equal(30);
      expect((await verifyLog(store, opened.sql)).ok).to.equal(true);
      // …but the log no longer extends the head kept outside casebook.
      const result = await verifyAgainst(store, head);
      expect(result.ok).to.equal(false);
      expect(result.problem).to.deep.include({ kind: 'head', position: head.position });
    });

    it('signs a head with Ed25519 and refuses one that was altered', async () => {
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
      const pub = publicKey.export({ type: 'spki', format: 'pem' }).toString();
      const head = await logHead(store, new Date('2026-03-02T00:00:00Z'), pem);
      expect(head.signature).to.be.a('string');
      expect(parseHead(JSON.stringify(head), pub)).to.deep.equal(head);
      const forged = { ...head, hash: head.hash.replace(/^./, (c) => (c === '0' ? '1' : '0')) };
      expect(() => parseHead(JSON.stringify(forged), pub)).to.throw(/does not verify/);
      const { signature: _unsigned, ...plain } = head;
      expect(() => parseHead(JSON.stringify(plain), pub)).to.throw(/not signed/);
      expect(() => parseHead('{"position":"x"}')).to.throw(/must be/);
    });

    it('runs one active sealer at a time: a standby takes over when the active one stops', async () => {
      const others: Sealer[] = [];
      const make = () => {
        const s = new Sealer(store, opened.sql, pino({ level: 'silent' }), { batch: 7, intervalMs: 50 });
        others.push(s);
        return s;
      };
      const [a, b] = [make(), make()];
      const until = async (check: () => Promise<boolean> | boolean) => {
        for (let i = 0; i < 200 && !(await check()); i++) await new Promise((r) => setTimeout(r, 25));
        expect(await check()).to.equal(true);
      };
      try {
        a.start();
        await until(() => a.active);
        b.start();
        await until(async () => (await verifyLog(store, opened.sql)).sealed === 30);
        if (database.name === 'postgres') {
          // Elected on PostgreSQL: the second process waits as a standby.
          expect([a.active, b.active]).to.deep.equal([true, false]);
          await a.stop();
          await until(() => b.active);
        } else await a.stop();
        for (let s = 0; s < 5; s++) await store.append(`late-${s}`, [event(200 + s)], 'no_stream');
        await until(async () => (await verifyLog(store, opened.sql)).sealed === 35);
        expect(await verifyLog(store, opened.sql)).to.deep.include({ ok: true, sealed: 35 });
      } finally {
        for (const s of others) await s.stop();
      }
    });

    it('seals full batches in one background pass and leaves what arrives meanwhile to the next', async () => {
      for (let s = 0; s < 10; s++) await store.append(`pass-${s}`, [event(300 + s)], 'no_stream');
      // A steady load: every read of the log is followed by another append.
      let appended = 0;
      const busy = new Proxy(store, {
        get(target, name, receiver) {
          if (name !== 'readAll') return Reflect.get(target, name, receiver);
          return async (...args: Parameters<SqlEventStore['readAll']>) => {
            const events = await target.readAll(...args);
            await target.append(`busy-${appended}`, [event(400 + appended++)], 'no_stream');
            return events;
          };
        },
      });
      const passing = new Sealer(busy, opened.sql, pino({ level: 'silent' }), { batch: 7 });
      // 10 new events: a full batch of 7, then the 3 left and the appends made meanwhile (4 by then).
      const first = await passing.sealPass();
      expect(first).to.be.within(10, 12);
      expect(appended).to.equal(2);
      expect((await verifyLog(store, opened.sql)).sealed).to.equal(30 + first);
      // The next pass seals what arrived after; the log verifies throughout.
      const second = await passing.sealPass();
      expect(second).to.be.within(1, 2);
      // (The append after the pass's last read is left unsealed; its test timestamp is months old.)
      expect(await verifyLog(store, opened.sql, { maxUnsealedAgeMs: Infinity })).to.deep.include({
        ok: true,
        sealed: 30 + first + second,
        unsealed: 1,
      });
    });

    it('two sealers at once seal every event exactly once', async () => {
      for (let s = 0; s < 20; s++) await store.append(`more-${s}`, [event(100 + s)], 'no_stream');
      const other = new Sealer(await SqlEventStore.open(opened.sql), opened.sql, pino({ level: 'silent' }), {
        batch: 3,
      });
      for (let i = 0; i < 50; i++) {
        await Promise.all([sealer.sealAll(), other.sealAll()]);
        if ((await verifyLog(store, opened.sql)).sealed === 50) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const result = await verifyLog(store, opened.sql);
      expect(result).to.deep.include({ ok: true, sealed: 50 });
      const [leaves] = await opened.sql.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM es_seal_leaves`,
      );
      expect(Number(leaves!.n)).to.equal(50);
    });
  });
}

describe('the background work of a casebook process (sealer, AuditEvent view)', function () {
  this.timeout(60_000);
  for (const database of testDatabases)
    it(`seals what is appended and indexes AuditEvents, ${database.name === 'postgres' ? 'in its own thread' : 'in this thread'} on ${database.name}, and stops with the process`, async () => {
      const opened = await database.open();
      const config = loadConfig({ DATA_DIR: 'memory://', LOG_LEVEL: 'silent' });
      const casebook = await openCasebook(config, {
        sql: opened.sql,
        seal: true,
        background: true,
        export: false,
        logger: pino({ level: 'silent' }),
      });
      let closed = false;
      try {
        expect(casebook.sealer).to.be.instanceOf(database.name === 'postgres' ? BackgroundThread : Sealer);
        for (let s = 0; s < 12; s++) await casebook.store.append(`bg-${s}`, [event(500 + s)], 'no_stream');
        const total = (await everyEvent(opened.sql)).length;
        let result = await verifyLog(casebook.store, opened.sql, { maxUnsealedAgeMs: Infinity });
        // The thread reports its election every 100 ms: it may seal before it says so.
        for (let i = 0; i < 100 && (result.sealed < total || !casebook.sealer?.active); i++) {
          await new Promise((r) => setTimeout(r, 100));
          result = await verifyLog(casebook.store, opened.sql, { maxUnsealedAgeMs: Infinity });
        }
        expect(result).to.deep.include({ ok: true, sealed: total });
        expect(casebook.sealer?.active).to.equal(true);
        // The AuditEvent view: followed by the same thread on PostgreSQL (the serving thread's
        // runner does not), and read-your-writes still holds for a search.
        const ids = [uuid(), uuid(), uuid()];
        await Promise.all(
          ids.map((id, i) =>
            casebook.audit.record({
              id,
              tenantId: 1,
              interaction: 'read',
              action: 'R',
              recorded: new Date().toISOString(),
              status: 200,
              agent: { kind: 'client', clientId: 'ehr-backend' },
              entities: [{ reference: `Patient/${i + 1}`, patientId: i + 1 }],
            }),
          ),
        );
        await casebook.audit.drain();
        expect(await casebook.runner.waitForDeferred('audit-events')).to.equal('current');
        const indexed = await opened.sql.query<{ id: string; patients: number[] }>(
          `SELECT id::text, patients FROM rm_audit_events WHERE id = ANY($1::uuid[]) ORDER BY patients[1]`,
          [ids],
        );
        expect(indexed.map((r) => [r.id, r.patients])).to.deep.equal(ids.map((id, i) => [id, [i + 1]]));
        const stopping = Date.now();
        await casebook.close();
        closed = true;
        expect(Date.now() - stopping, 'close waits for the sealer, not its timeout').to.be.below(5000);
        expect(casebook.sealer?.active).to.equal(false);
      } finally {
        if (!closed) await casebook.close();
        await opened.dispose();
      }
    });
});
