/**
 * Inline projections on the SQL stores (docs/architecture.md "Projections"): read models are
 * applied in each append's own transaction; a projection that is building catches up and turns
 * live without losing an append; a projection that fails on an event stops alone and refuses the
 * writes it would have to apply. On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { pino } from 'pino';
import { v4 as uuid } from 'uuid';
import type { CommandContext } from '../../src/commands/context.js';
import { execute } from '../../src/commands/handler.js';
import { allocateId, migrateSequences } from '../../src/db/sequences.js';
import type { Sql } from '../../src/db/sql.js';
import { resourceDecider, resourceStream } from '../../src/domain/fhir/resource.js';
import { type SessionCommand, sessionDecider, sessionStream } from '../../src/domain/session/session.js';
import { EventIdConflict, type NewEvent, WrongExpectedVersion } from '../../src/eventstore/port.js';
import { allProjections } from '../../src/projections/index.js';
import type { Projection } from '../../src/projections/projection.js';
import { rebuildSchemaOf } from '../../src/projections/rebuild-beside.js';
import { resourcesProjection } from '../../src/projections/resources.js';
import { ProjectionRunner, ReadModelUnavailable } from '../../src/projections/runner/index.js';
import { sessionsProjection } from '../../src/projections/sessions.js';
import { createResourcePastApi } from '../support/commands.js';
import { closeAfterEach, openStore, testDatabases } from '../support/databases.js';
import { testEvent } from '../support/events.js';
import { oidOf } from '../support/read-models.js';
import { recordingSql } from '../support/sql.js';

const logger = pino({ level: 'silent' });
const NOW = '2026-03-01T10:00:00.000Z';

for (const db of testDatabases) {
  describe(`inline projections on ${db.name}`, function () {
    this.timeout(60_000);
    const cleanups = closeAfterEach();

    /** A store with a runner in inline mode over `projections`, every projection live. */
    const open = async (
      projections: readonly Projection[] = allProjections,
      pageSize?: number,
      storeSql: (sql: Sql) => Sql = (sql) => sql,
    ) => {
      const { opened, store } = await openStore(db, cleanups, storeSql);
      await migrateSequences(opened.sql);
      const runner = new ProjectionRunner(
        store,
        opened.sql,
        projections,
        logger,
        pageSize ? { pageSize } : {},
      );
      await runner.migrate();
      await runner.catchUp();
      cleanups.push(() => runner.stop());
      const ctx: CommandContext = {
        store,
        sql: opened.sql,
        tenantId: 1,
        actor: { type: 'system', id: 'inline-test' },
        correlationId: uuid(),
        causationId: null,
        requestId: null,
        now: new Date(NOW),
        afterAppend: async (_position, events) => {
          const stopped = runner.stoppedByEvents(events.map((e) => e.id));
          if (stopped) throw new ReadModelUnavailable(stopped, true, `stopped ${stopped}`);
        },
      };
      return { opened, sql: opened.sql, store, runner, ctx };
    };

    /** A Patient's registration as a command would record it, appended straight to the store by tests. */
    const registered = (id: number, value = `p${id}`): NewEvent =>
      testEvent('PatientRegistered', {
        id,
        tenantId: 1,
        resource: { identifier: [{ system: 'urn:x', value }] },
        at: NOW,
      });

    const createPatient = async (
      ctx: CommandContext,
      identifier = { system: 'urn:mrn', value: uuid() },
      allocated?: number,
    ) => {
      const id = allocated ?? (await allocateId(ctx.sql, 'Patient'));
      const decider = resourceDecider('Patient');
      await execute(ctx, (uow) =>
        uow.decide(resourceStream('Patient', id), decider, {
          type: 'CreateResource',
          id,
          tenantId: 1,
          resource: { identifier: [identifier] },
          now: NOW,
        }),
      );
      return id;
    };

    const createSession = async (ctx: CommandContext) => {
      const sessionId = await allocateId(ctx.sql, 'session');
      const command: SessionCommand = {
        type: 'CreateSession',
        sessionId,
        tenantId: 1,
        clientId: 'c',
        userId: 1,
        patientId: null,
        encounterId: null,
        scopes: [],
        deploymentMode: 'embedded',
        postSubmitRedirect: null,
        postCancelRedirect: null,
        handoverTokenHash: 'h',
        createdAt: NOW,
      };
      await execute(ctx, (uow) => uow.decide(sessionStream(sessionId), sessionDecider, command));
      return sessionId;
    };

    const patientIds = async (sql: Sql) =>
      (
        await sql.query<{ id: number }>(
          `SELECT id FROM rm_resources WHERE resource_type = 'Patient' ORDER BY id`,
        )
      ).map((r) => Number(r.id));
    const state = async (sql: Sql, name: string) =>
      (
        await sql.query<{ status: string; detail: Record<string, unknown> | null }>(
          `SELECT status, detail FROM projection_state WHERE name = $1`,
          [name],
        )
      )[0]!;

    it('makes a write readable as soon as the append returns, with no runner started', async () => {
      const { ctx, sql } = await open();
      const id = await createPatient(ctx);
      expect(await patientIds(sql)).to.deep.equal([id]);
      expect((await state(sql, 'resources')).status).to.equal('live');
    });

    it('applies a live projection in the append statement itself: no BEGIN, no COMMIT, one round trip', async () => {
      const statements: string[] = [];
      const { ctx, sql } = await open(allProjections, undefined, recordingSql(statements));
      const id = await allocateId(sql, 'Patient');
      statements.length = 0;
      await createResourcePastApi(
        ctx,
        'Patient',
        id,
        { identifier: [{ system: 'urn:mrn', value: 'one-statement' }] },
        { tenantId: 1, now: NOW },
      );
      const appends = statements.filter((text) => !text.includes('pg_notify'));
      expect(appends).to.have.length(1);
      expect(appends[0]).to.include('es_append(');
      expect(await patientIds(sql)).to.deep.equal([id]);
      const [identifier] = await sql.query<{ id: number }>(
        `SELECT id FROM rm_resource_identifiers WHERE system = 'urn:mrn' AND value = 'one-statement'`,
      );
      expect(Number(identifier?.id)).to.equal(id);
    });

    it('group-commits concurrent creates: fewer statements than appends, each append its own answer', async () => {
      const statements: string[] = [];
      const { sql, store } = await open(allProjections, undefined, recordingSql(statements));
      const create = (id: number) =>
        store.append(resourceStream('Patient', id), [registered(id)], 'no_stream').then(
          () => 'created',
          (error: unknown) => error,
        );
      const count = () => statements.filter((text) => text.includes('es_append(')).length;

      // Sent in one tick: the first goes alone, the other 29 wait for it and go as one batch.
      statements.length = 0;
      const first = await Promise.all(Array.from({ length: 30 }, (_, i) => create(i + 1)));
      expect(first).to.deep.equal(Array(30).fill('created'));
      expect(count()).to.equal(2);

      // The same again, with an append in the middle of the batch that expects Patient 5 to be new:
      // the batch is still one statement, and each append gets its own answer from it.
      statements.length = 0;
      const second = await Promise.all([31, 32, 33, 5, 34, 35].map(create));
      expect(second[3]).to.be.instanceOf(WrongExpectedVersion);
      expect(second.filter((answer) => answer === 'created')).to.have.length(5);
      expect(count()).to.equal(2);
      expect(statements).to.not.include('BEGIN');

      // Updates (streams at a known revision) go set-based too, alone and together.
      statements.length = 0;
      const updated = (id: number, value: string) =>
        testEvent('PatientUpdated', {
          id,
          resource: { identifier: [{ system: 'urn:x', value }] },
          at: NOW,
        });
      const third = await Promise.all(
        [1, 2, 3, 4].map((id) =>
          store
            .append(resourceStream('Patient', id), [updated(id, `u${id}`)], 0n)
            .then((r) => r.nextRevision),
        ),
      );
      expect(third).to.deep.equal([1n, 1n, 1n, 1n]);
      expect(count()).to.equal(2);
      // One of them at a revision its stream has left: answered so, the others written, in two
      // statements again.
      statements.length = 0;
      const fourth = await Promise.all(
        [6, 7, 1, 8].map((id) =>
          store.append(resourceStream('Patient', id), [updated(id, `v${id}`)], 0n).then(
            (r) => r.nextRevision,
            (error: unknown) => error,
          ),
        ),
      );
      expect(fourth[2]).to.be.instanceOf(WrongExpectedVersion);
      expect([fourth[0], fourth[1], fourth[3]]).to.deep.equal([1n, 1n, 1n]);
      expect(count()).to.equal(2);
      // Appends that check one stream's revision (no events) never travel together: one statement
      // each.
      statements.length = 0;
      const fifth = await Promise.all(
        [9, 10, 11].map((id) =>
          store
            .appendMany([
              { streamName: resourceStream('Patient', 12), events: [], expectedState: 0n },
              {
                streamName: resourceStream('Patient', id),
                events: [updated(id, `w${id}`)],
                expectedState: 0n,
              },
            ])
            .then((r) => r.streams.map((x) => x.nextRevision)),
        ),
      );
      expect(fifth).to.deep.equal([
        [0n, 1n],
        [0n, 1n],
        [0n, 1n],
      ]);
      expect(count()).to.equal(3);
      const values = await sql.query<{ id: number; value: string }>(
        `SELECT id, value FROM rm_resource_identifiers WHERE system = 'urn:x' AND id <= 11 ORDER BY id`,
      );
      expect(values.map((r) => [Number(r.id), r.value])).to.deep.equal([
        [1, 'u1'],
        [2, 'u2'],
        [3, 'u3'],
        [4, 'u4'],
        [5, 'p5'],
        [6, 'v6'],
        [7, 'v7'],
        [8, 'v8'],
        [9, 'w9'],
        [10, 'w10'],
        [11, 'w11'],
      ]);
      expect(
        (await store.readStream(resourceStream('Patient', 1))).map(
          (e) => (e.data as { resource: unknown }).resource,
        ),
      ).to.deep.equal([
        { identifier: [{ system: 'urn:x', value: 'p1' }] },
        { identifier: [{ system: 'urn:x', value: 'u1' }] },
      ]);

      const expected = [...Array.from({ length: 35 }, (_, i) => i + 1)];
      expect(await patientIds(sql)).to.deep.equal(expected);
      expect((await store.readStream(resourceStream('Patient', 5))).length).to.equal(1);
    });

    it('writes a batch of creates set-based: answers, log order and read model as if sent one by one', async () => {
      const statements: string[] = [];
      const { sql, store } = await open(allProjections, undefined, recordingSql(statements));
      // Each append: a new Patient and a second new stream of two events (several requests, several
      // events a request, data in the order written).
      const create = (id: number) =>
        store.appendMany([
          { streamName: resourceStream('Patient', id), events: [registered(id)], expectedState: 'no_stream' },
          {
            streamName: `note-${id}`,
            events: [
              testEvent('Noted', { id, n: 1, z: 'last', a: 'first' }),
              testEvent('Noted', { id, n: 2 }),
            ],
            expectedState: 'no_stream',
          },
        ]);
      statements.length = 0;
      const ids = Array.from({ length: 12 }, (_, i) => 100 + i);
      const answers = await Promise.all(ids.map(create));
      // The first alone, the other 11 in one statement.
      expect(statements.filter((text) => text.includes('es_append(')).length).to.equal(2);

      const written = (await store.readAll({ maxCount: 10_000 })).filter(
        (e) => e.streamName.startsWith('note-') || /^Patient-1\d\d$/.test(e.streamName),
      );
      // Appends in the order sent, each append's events together in request order.
      expect(written.map((e) => `${e.streamName}@${e.revision}`)).to.deep.equal(
        ids.flatMap((id) => [`Patient-${id}@0`, `note-${id}@0`, `note-${id}@1`]),
      );
      // Each answer is its own: the position of its last event, and each stream's last revision.
      for (const [i, id] of ids.entries()) {
        const last = written.filter((e) => (e.data as { id: number }).id === id).at(-1)!;
        expect(answers[i]!.position).to.deep.equal(last.position);
        expect(answers[i]!.streams).to.deep.equal([
          { streamName: `Patient-${id}`, nextRevision: 0n },
          { streamName: `note-${id}`, nextRevision: 1n },
        ]);
      }
      // Data kept as written (element order), every row and identifier in the read model.
      expect(JSON.stringify((await store.readStream(`note-${ids[3]}`))[0]!.data)).to.equal(
        JSON.stringify({ id: ids[3], n: 1, z: 'last', a: 'first' }),
      );
      expect((await patientIds(sql)).filter((id) => id >= 100)).to.deep.equal(ids);
      const identifiers = await sql.query<{ id: number; value: string }>(
        `SELECT id, value FROM rm_resource_identifiers WHERE system = 'urn:x' ORDER BY id`,
      );
      expect(identifiers.map((r) => [Number(r.id), r.value])).to.deep.equal(ids.map((id) => [id, `p${id}`]));
    });

    it('answers a create sent again (same event ids) with the stored result, writing nothing', async () => {
      const statements: string[] = [];
      const { sql, store } = await open(allProjections, undefined, recordingSql(statements));
      const event = registered(200);
      const first = await store.append(resourceStream('Patient', 200), [event], 'no_stream');
      statements.length = 0;
      const again = await store.append(resourceStream('Patient', 200), [event], 'no_stream');
      expect(again).to.deep.equal(first);
      // One statement: es_append recognised the replay.
      expect(statements.filter((text) => text.includes('es_append(')).length).to.equal(1);
      expect((await store.readStream(resourceStream('Patient', 200))).length).to.equal(1);
      // The same id on another new stream is a conflict, and writes nothing either.
      const conflict = await store
        .append(resourceStream('Patient', 201), [event], 'no_stream')
        .catch((e: unknown) => e);
      expect(conflict).to.be.instanceOf(EventIdConflict);
      expect(await store.readStream(resourceStream('Patient', 201))).to.deep.equal([]);
      expect(await patientIds(sql)).to.deep.equal([200]);
    });

    it('writes nothing when an append holds fewer data than events', async () => {
      const { sql, store } = await open();
      const error = await sql
        .query(
          `SELECT es_append('{1}', '{short-1}', '{-1}', '{2}', $1::uuid[], '{Noted,Noted}', '[{},{}]', '[{"n":1}]',
             NULL, NULL, NULL, NULL, NULL)`,
          [[uuid(), uuid()]],
        )
        .catch((e: unknown) => e);
      expect(error).to.have.property('code', '22023');
      expect(await store.readStream('short-1')).to.deep.equal([]);
      const [streams] = await sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM es_streams WHERE stream_name = 'short-1'`,
      );
      expect(streams?.n).to.equal(0);
    });

    it('builds a projection added later from the log while appends go on, then applies it inline', async () => {
      // Pages of 10: most of the catch-up runs beside the appends, the rest under the append lock.
      const { ctx, sql, runner } = await open(allProjections, 10);
      const before: number[] = [];
      for (let i = 0; i < 30; i++) before.push(await createPatient(ctx));
      // The resources read model is rebuilt while 30 more patients are written concurrently.
      const writes = Promise.all(Array.from({ length: 30 }, () => createPatient(ctx)));
      const rebuilt = runner.rebuild(undefined, ['resources']);
      const during = await writes;
      await rebuilt;
      const after = await createPatient(ctx);
      expect((await state(sql, 'resources')).status).to.equal('live');
      expect(await patientIds(sql)).to.deep.equal([...before, ...during, after].sort((a, b) => a - b));
    });

    /**
     * The resources projection, failing on events that hold "poison" until `fix` is called: in its
     * fold (JavaScript, before the append statement and in `apply`) or in its SQL function (inside
     * the append's own statement, and in `apply`).
     */
    const fragileResources = (where: 'fold' | 'function') => {
      const inline = resourcesProjection.inline!;
      if (where === 'fold') {
        let broken = true;
        const check = (events: readonly { data: unknown }[]) => {
          if (broken && events.some((e) => JSON.stringify(e.data).includes('poison')))
            throw new TypeError('cannot apply this event');
        };
        const projection: Projection = {
          ...resourcesProjection,
          inline: {
            function: inline.function,
            argument: (events) => {
              check(events);
              return inline.argument(events);
            },
          },
          apply: async (events, tx, mode) => {
            check(events);
            await resourcesProjection.apply(events, tx, mode);
          },
        };
        const fix = async (_sql: Sql) => {
          broken = false;
        };
        return { projection, fix };
      }
      // The fix is a new version of the function, as a release with the bug fixed would bring: a
      // rebuild's schema gets the version of the code that runs it.
      let broken = true;
      const definition = () =>
        `CREATE OR REPLACE FUNCTION test_fragile_apply(batch json) RETURNS integer LANGUAGE plpgsql AS $fn$
         BEGIN
           ${broken ? `IF strpos(batch::text, 'poison') > 0 THEN RAISE EXCEPTION 'cannot apply this event' USING ERRCODE = '22023'; END IF;` : ''}
           RETURN ${inline.function}(batch);
         END $fn$`;
      const projection: Projection = {
        ...resourcesProjection,
        migrate: async (sql) => {
          await resourcesProjection.migrate(sql);
          await sql.exec(definition());
        },
        inline: { function: 'test_fragile_apply', argument: inline.argument },
        apply: async (events, tx) => {
          const argument = inline.argument(events);
          if (argument !== undefined) await tx.query(`SELECT test_fragile_apply($1::json)`, [argument]);
        },
      };
      return {
        projection,
        fix: async (sql: Sql) => {
          broken = false;
          await sql.exec(definition());
        },
      };
    };

    for (const where of ['fold', 'function'] as const)
      it(`stops only the projection that fails on an event (in its ${where}), names the event, and refuses the writes it needs`, async () => {
        const fragile = fragileResources(where);
        const projections = allProjections.map((p) => (p.name === 'resources' ? fragile.projection : p));
        const { ctx, sql, store, runner } = await open(projections);
        const readable = await createPatient(ctx);

        // The poison event, written straight to the store: it is stored, the projection stops.
        const poison = registered(999_999, 'poison');
        const appended = await store.append('Patient-999999', [poison], 'no_stream');
        expect((await store.readStream('Patient-999999')).map((e) => e.id)).to.deep.equal([poison.id]);
        const stopped = await state(sql, 'resources');
        expect(stopped.status).to.equal('stopped');
        expect(stopped.detail).to.deep.include({
          stream: 'Patient-999999',
          eventId: poison.id,
          eventType: 'PatientRegistered',
          error: 'cannot apply this event',
          position: `${appended.position.commit}/${appended.position.prepare}`,
        });
        expect(runner.stoppedByEvents([poison.id])).to.equal('resources');

        // The writes before it stay readable; the other read models keep going.
        expect(await patientIds(sql)).to.deep.equal([readable]);
        const sessionId = await createSession(ctx);
        expect((await sql.query(`SELECT id FROM rm_sessions WHERE id = $1`, [sessionId])).length).to.equal(1);
        for (const name of ['tenants', 'api_clients', 'sessions', 'export-outbox'])
          expect((await state(sql, name)).status, name).to.equal('live');

        // A write the stopped read model would have to apply is refused, and nothing is written.
        const count = async () =>
          Number((await sql.query<{ n: string }>(`SELECT count(*)::text AS n FROM es_events`))[0]!.n);
        const events = await count();
        let refused: unknown;
        await createPatient(ctx).catch((e: unknown) => {
          refused = e;
        });
        expect(refused).to.be.instanceOf(ReadModelUnavailable);
        expect((refused as ReadModelUnavailable).stored).to.equal(false);
        expect(await count()).to.equal(events);

        // Once the cause is fixed, a rebuild brings it back with every event, the poison one included.
        await fragile.fix(sql);
        await runner.rebuild(undefined, ['resources']);
        expect((await state(sql, 'resources')).status).to.equal('live');
        expect(await patientIds(sql)).to.deep.equal([readable, 999_999]);
        expect(await createPatient(ctx)).to.be.a('number');
      });

    it('rebuilds in pages: a projection whose build stops on an event keeps its live read model, the others are swapped in', async () => {
      // Pages of 5: most pages are applied outside the append lock (the next one read meanwhile on
      // Postgres), the last ones under it.
      let broken = false;
      const fragile: Projection = {
        ...resourcesProjection,
        apply: async (events, tx, mode) => {
          if (broken && events.some((e) => JSON.stringify(e.data).includes('poison')))
            throw new TypeError('cannot apply this event');
          await resourcesProjection.apply(events, tx, mode);
        },
      };
      const projections = allProjections.map((p) => (p.name === 'resources' ? fragile : p));
      const { ctx, sql, store, runner } = await open(projections, 5);
      const before: number[] = [];
      for (let i = 0; i < 12; i++) before.push(await createPatient(ctx));
      const poison = registered(999_999, 'poison');
      const poisonId = poison.id;
      await store.append('Patient-999999', [poison], 'no_stream');
      const sessions: number[] = [];
      for (let i = 0; i < 12; i++) sessions.push(await createSession(ctx));
      const tables = {
        resources: await oidOf(sql, 'rm_resources'),
        sessions: await oidOf(sql, 'rm_sessions'),
      };

      broken = true;
      const { stopped } = await runner.rebuild();
      expect([...stopped.keys()]).to.deep.equal(['resources']);
      expect(stopped.get('resources')).to.deep.include({ stream: 'Patient-999999', eventId: poisonId });
      // The live resources read model was kept (the poison event applied before the code broke).
      expect(await oidOf(sql, 'rm_resources')).to.equal(tables.resources);
      expect(await patientIds(sql)).to.deep.equal([...before, 999_999]);
      for (const name of ['tenants', 'api_clients', 'sessions', 'resources', 'export-outbox', 'audit-events'])
        expect((await state(sql, name)).status, name).to.equal('live');
      expect(await oidOf(sql, 'rm_sessions')).to.not.equal(tables.sessions);
      const rows = await sql.query<{ id: number }>(`SELECT id FROM rm_sessions ORDER BY id`);
      expect(rows.map((r) => Number(r.id))).to.deep.equal(sessions);
    });

    it('rebuilds every projection in pages, each at its own pace, while appends go on: every event applied once, in log order', async () => {
      // Pages of 4. On Postgres each projection applies the pages in its own transactions, up to
      // two pages ahead of the slowest (here the sessions, held 30 ms a page); on PGlite one
      // transaction per page applies them all.
      // The positions of the events each projection is given. The sessions are given every page
      // (they take every type, and pass on their own) and held 30 ms on each; the resources count
      // the pages they begin ahead of the pages the sessions finished.
      const seen = new Map<string, string[]>(allProjections.map((p) => [p.name, []]));
      const at = (e: { position: { commit: bigint; prepare: bigint } }) =>
        `${e.position.commit}/${e.position.prepare}`;
      let sessionPages = 0;
      let resourcePages = 0;
      let lead = 0;
      const projections = allProjections.map(
        (p): Projection => ({
          ...p,
          handles: p.name === 'sessions' ? () => true : p.handles,
          apply: async (events, tx, mode) => {
            const own = events.filter((e) => p.handles(e.type));
            seen.get(p.name)!.push(...own.map(at));
            if (p.name === 'resources') lead = Math.max(lead, ++resourcePages - sessionPages);
            if (p.name === 'sessions') await new Promise((resolve) => setTimeout(resolve, 30));
            if (own.length > 0) await p.apply(own, tx, mode);
            if (p.name === 'sessions') sessionPages++;
          },
        }),
      );
      const { ctx, sql, runner } = await open(projections, 4);
      const patients: number[] = [];
      const sessions: number[] = [];
      for (let i = 0; i < 10; i++) {
        patients.push(await createPatient(ctx));
        sessions.push(await createSession(ctx));
      }
      for (const given of seen.values()) given.length = 0;
      [sessionPages, resourcePages, lead] = [0, 0, 0];
      const progress: number[] = [];
      const writes = Promise.all(Array.from({ length: 10 }, () => createPatient(ctx)));
      const rebuilt = runner.rebuild((read) => progress.push(read));
      const during = await writes;
      const { read } = await rebuilt;

      for (const name of ['tenants', 'api_clients', 'sessions', 'resources', 'export-outbox', 'audit-events'])
        expect((await state(sql, name)).status, name).to.equal('live');
      expect(await patientIds(sql)).to.deep.equal([...patients, ...during].sort((a, b) => a - b));
      const rows = await sql.query<{ id: number }>(`SELECT id FROM rm_sessions ORDER BY id`);
      expect(rows.map((r) => Number(r.id))).to.deep.equal(sessions);
      // What each projection was given: the events of its types, each once, in log order.
      const log = await sql.query<{ at: string; type: string }>(
        `SELECT transaction_id::text || '/' || position::text AS at, type FROM es_events ORDER BY transaction_id, position`,
      );
      for (const projection of allProjections) {
        const given = seen.get(projection.name)!;
        const expected = log.filter((e) => projection.handles(e.type)).map((e) => e.at);
        // Appends that went inline after the projection turned live are not in a catch-up page.
        expect(given, projection.name).to.deep.equal(expected.slice(0, given.length));
        expect(new Set(given).size, projection.name).to.equal(given.length);
      }
      expect(seen.get('resources')!.length).to.be.at.least(patients.length);
      // On Postgres the resources began a page while the sessions were still on the third before
      // it, never further (two pages ahead of the slowest); on PGlite each page is applied to all.
      expect(lead).to.equal(db.name === 'postgres' ? 3 : 0);
      expect(progress.length).to.be.greaterThan(2);
      expect(progress).to.deep.equal([...progress].sort((a, b) => a - b));
      expect(progress.at(-1)).to.equal(read);
    });

    it('rebuilds without reading again the event types no read model handles, once it has seen them', async () => {
      const { ctx, sql, store, runner } = await open(allProjections, 4);
      const patients: number[] = [];
      for (let i = 0; i < 8; i++) {
        patients.push(await createPatient(ctx));
        await store.append(`Note-${uuid()}`, [testEvent('TestNoted', { n: i })], 'no_stream');
      }
      const count = async () =>
        Number((await sql.query<{ n: string }>(`SELECT count(*)::text AS n FROM es_events`))[0]!.n);
      const logSize = await count();
      const asked: (readonly string[] | undefined)[] = [];
      const readAll = store.readAll.bind(store);
      store.readAll = (options = {}) => {
        asked.push(options.excludeTypes);
        return readAll(options);
      };

      const { read } = await runner.rebuild();

      expect(await patientIds(sql)).to.deep.equal(patients);
      for (const name of ['tenants', 'api_clients', 'sessions', 'resources', 'export-outbox', 'audit-events'])
        expect((await state(sql, name)).status, name).to.equal('live');
      // The first page is read whole, the next ones leave the notes out (the AuditEvent view's
      // own catch-up, after the rebuild, reads the log's last pages whole).
      expect(asked[0]).to.equal(undefined);
      expect(asked.slice(1, 3)).to.deep.equal([['TestNoted'], ['TestNoted']]);
      for (const excluded of asked) expect([undefined, 'TestNoted']).to.include(excluded?.join());
      expect(read).to.be.below(logSize);
      expect(read).to.be.at.least(logSize - 8);
      expect(await count()).to.equal(logSize);
    });

    it('fails a rebuild on an error that is not about an event, with no projection still applying a page', async () => {
      // A failure of the database (not the event's data): the projection is not stopped, the
      // rebuild fails, and the others stop at their current page before it does.
      let failing = true;
      const calls: string[] = [];
      const projections = allProjections.map(
        (p): Projection => ({
          ...p,
          apply: async (events, tx, mode) => {
            calls.push(p.name);
            if (failing && p.name === 'resources' && calls.filter((n) => n === p.name).length === 3)
              throw Object.assign(new Error('connection lost'), { code: '08006' });
            await new Promise((resolve) => setTimeout(resolve, 5));
            await p.apply(events, tx, mode);
          },
        }),
      );
      const { ctx, sql, runner } = await open(projections, 4);
      for (let i = 0; i < 12; i++) {
        await createPatient(ctx);
        await createSession(ctx);
      }
      let error: unknown;
      await runner.rebuild().catch((e: unknown) => {
        error = e;
      });
      expect((error as { code?: string } | undefined)?.code).to.equal('08006');
      const settled = calls.length;
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(calls.length, 'applies after the rebuild failed').to.equal(settled);
      // The live read models were never touched, and the rebuild's schema is gone.
      expect((await state(sql, 'resources')).status).to.equal('live');
      expect((await patientIds(sql)).length).to.equal(12);
      // This store's rebuild schema only: the server's database is shared with other tests' schemas.
      const [{ live }] = (await sql.query('SELECT current_schema() AS live')) as [{ live: string }];
      const leftovers = await sql.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [
        rebuildSchemaOf(live),
      ]);
      expect(leftovers).to.deep.equal([]);

      // The next run builds it (the cause gone).
      failing = false;
      await runner.rebuild();
      for (const name of ['tenants', 'api_clients', 'sessions', 'resources', 'export-outbox', 'audit-events'])
        expect((await state(sql, name)).status, name).to.equal('live');
      expect((await patientIds(sql)).length).to.equal(12);
    });

    it('reports a write that stopped a projection as stored but unavailable', async () => {
      const fragile: Projection = {
        ...sessionsProjection,
        inline: {
          function: sessionsProjection.inline!.function,
          argument: () => {
            throw new RangeError('bad session');
          },
        },
        apply: async () => {
          throw new RangeError('bad session');
        },
      };
      const projections = allProjections.map((p) => (p.name === 'sessions' ? fragile : p));
      const { ctx, sql } = await open(projections);
      let error: unknown;
      await createSession(ctx).catch((e: unknown) => {
        error = e;
      });
      expect(error).to.be.instanceOf(ReadModelUnavailable);
      expect((error as ReadModelUnavailable).stored).to.equal(true);
      expect((await state(sql, 'sessions')).status).to.equal('stopped');
      expect((await sql.query(`SELECT 1 FROM es_events WHERE type = 'SessionCreated'`)).length).to.equal(1);
    });

    it('refuses appends while a newer version runs a read model this process does not know', async () => {
      const { ctx, sql } = await open();
      await sql.query(`INSERT INTO projection_state (name, status) VALUES ('audit-v9', 'live')`);
      let error: unknown;
      await createPatient(ctx).catch((e: unknown) => {
        error = e;
      });
      expect(error).to.be.instanceOf(ReadModelUnavailable);
      expect((error as Error).message).to.match(/newer casebook version/);
    });

    it('refuses too an append to a new stream that no inline projection needs (the plain statement)', async () => {
      const { store, sql } = await open();
      const event = (): NewEvent =>
        testEvent('UnprojectedNoteRecorded', { note: 1 }, { actorId: 'inline-test' });
      // Accepted while every live projection is known…
      const first = `note-${uuid()}`;
      expect((await store.append(first, [event()], 'no_stream')).nextRevision).to.equal(0n);
      await sql.query(`INSERT INTO projection_state (name, status) VALUES ('audit-v9', 'live')`);
      // …refused, writing nothing, once a newer version's read model is live.
      const second = `note-${uuid()}`;
      const error = await store.append(second, [event(), event()], 'no_stream').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).to.be.instanceOf(ReadModelUnavailable);
      expect((error as Error).message).to.match(/newer casebook version/);
      expect(await store.readStream(second)).to.deep.equal([]);
      expect(await sql.query(`SELECT 1 FROM es_streams WHERE stream_name = $1`, [second])).to.deep.equal([]);
    });
  });
}
