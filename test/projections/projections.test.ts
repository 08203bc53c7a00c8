/**
 * The read models and their runner (DESIGN.md §1–2, CONVENTIONS.md "Projections"), on PGlite and on
 * a real Postgres server. Every test builds a realistic log through the deciders and the event
 * store (a tenant, an API client, practitioner/patient/encounter with identifier reservations,
 * sessions created → handed over → ended) and asserts the rows the projections make of it.
 */
import { expect } from 'chai';
import { pino } from 'pino';
import { v4 as uuid } from 'uuid';
import {
  allocateId,
  type CommandContext,
  ID_SEQUENCES,
  migrateSequences,
  sequenceName,
  toNewEvents,
} from '../../src/commands/context.js';
import { appendAtomically, handle } from '../../src/commands/handle.js';
import type { Sql } from '../../src/db/sql.js';
import { clientDecider, clientStream } from '../../src/domain/client/client.js';
import { encounterDecider, encounterStream } from '../../src/domain/clinical/encounter.js';
import type { Identifier } from '../../src/domain/clinical/identifier.js';
import { patientDecider, patientStream } from '../../src/domain/clinical/patient.js';
import { practitionerDecider, practitionerStream } from '../../src/domain/clinical/practitioner.js';
import type { Event } from '../../src/domain/decider.js';
import {
  identifierKey,
  reservationDecider,
  reservationStream,
  tenantNameKey,
} from '../../src/domain/reservation/reservation.js';
import { type SessionCommand, sessionDecider, sessionStream } from '../../src/domain/session/session.js';
import { tenantDecider, tenantStream } from '../../src/domain/tenant/tenant.js';
import { type Position, positionToString, type RecordedEvent } from '../../src/eventstore/port.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { allProjections } from '../../src/projections/index.js';
import type { Projection } from '../../src/projections/projection.js';
import { ProjectionRunner } from '../../src/projections/runner.js';
import { type OpenedDatabase, testDatabases } from '../support/databases.js';

const logger = pino({ level: 'silent' });

// ---------------------------------------------------------------------------------------------
// The log
// ---------------------------------------------------------------------------------------------

const TENANT_NAME = 'Klinikum Nord';
const SCOPES_AT_CREATION = ['launch', 'patient/*.rs'];
const SCOPES_CONFIGURED = ['launch', 'patient/*.rs', 'user/Questionnaire.rs'];
const REDIRECT_ORIGINS = ['https://ehr.example.org'];
const CLIENT_ID = 'ehr-backend';
const SECRET_HASH = 'scrypt$16384$8$1$c2FsdA==$Zmlyc3Q=';
const ROTATED_HASH = 'scrypt$16384$8$1$cGVwcGVy$c2Vjb25k';
const CLIENT_SCOPES = ['system/Patient.cruds', 'system/Encounter.cruds', 'system/Practitioner.cruds'];
const LANR: Identifier = { system: 'https://fhir.kbv.de/NamingSystem/KBV_NS_Base_ANR', value: '123456601' };
const MRN: Identifier = { system: 'urn:oid:1.2.276.0.76.4.8', value: 'P-000123' };
const KVID: Identifier = { system: 'http://fhir.de/sid/gkv/kvid-10', value: 'A123456780' };
const CASE: Identifier = { system: 'https://ehr.example.org/fall', value: 'F-2025-0042' };
const SESSION_SCOPES = ['launch', 'patient/Patient.rs', 'patient/QuestionnaireResponse.cru'];

/** Number of events {@link buildLog} appends (resource events and identifier reservations). */
const LOG_LENGTH = 19;

interface Harness {
  readonly opened: OpenedDatabase;
  readonly sql: Sql;
  readonly store: SqlEventStore;
}

interface Log {
  readonly tenantId: number;
  readonly practitionerId: number;
  readonly patientId: number;
  readonly encounterId: number;
  /** Session 1 ended, 2 active, 3 inactive (never handed over). */
  readonly sessionIds: readonly [number, number, number];
  readonly head: Position;
}

const contextAt = (
  h: { store: SqlEventStore; sql: Sql },
  now: string,
  tenantId: number | null,
): CommandContext => ({
  store: h.store,
  sql: h.sql,
  tenantId,
  actor: { type: 'system', id: 'projections-test' },
  correlationId: uuid(),
  causationId: null,
  requestId: null,
  now: new Date(now),
  waitForProjections: async () => true,
});

/** Appends a resource's registration together with a reservation of each of its identifiers. */
const registerWithIdentifiers = async (
  ctx: CommandContext,
  resourceType: 'Patient' | 'Encounter' | 'Practitioner',
  id: number,
  streamName: string,
  identifiers: readonly Identifier[],
  events: readonly Event[],
): Promise<Position> =>
  appendAtomically(ctx, [
    { streamName, expectedState: 'no_stream', events },
    ...identifiers.map((i) => {
      const key = identifierKey(resourceType, ctx.tenantId!, i.system, i.value);
      return {
        streamName: reservationStream(key),
        expectedState: 'no_stream' as const,
        events: reservationDecider.decide(
          {
            type: 'ClaimReservation',
            key,
            ownerType: resourceType,
            ownerId: String(id),
            now: ctx.now.toISOString(),
          },
          reservationDecider.initialState,
        ),
      };
    }),
  ]);

const createSession = (
  sessionId: number,
  log: { tenantId: number; practitionerId: number; patientId: number; encounterId: number },
  createdAt: string,
  standalone = false,
): SessionCommand => ({
  type: 'CreateSession',
  sessionId,
  tenantId: log.tenantId,
  clientId: CLIENT_ID,
  userId: log.practitionerId,
  patientId: standalone ? null : log.patientId,
  encounterId: standalone ? null : log.encounterId,
  scopes: SESSION_SCOPES,
  deploymentMode: standalone ? 'standalone' : 'embedded',
  postSubmitRedirect: standalone ? null : 'https://ehr.example.org/done',
  postCancelRedirect: standalone ? null : 'https://ehr.example.org/cancel',
  handoverTokenHash: `token-hash-${sessionId}`,
  createdAt,
});

const handOver = (sessionId: number, now: string): SessionCommand => ({
  type: 'HandOverSession',
  tokenHash: `token-hash-${sessionId}`,
  cookieHash: `cookie-hash-${sessionId}`,
  now,
});

/** Builds the log through the deciders, the generic handler and the store; ids come from the sequences. */
const buildLog = async (h: Harness): Promise<Log> => {
  const tenantId = await allocateId(h.sql, 'tenant');
  const at = (now: string) => contextAt(h, now, tenantId);

  const nameKey = tenantNameKey(TENANT_NAME);
  await appendAtomically(at('2025-03-04T09:00:00.000Z'), [
    {
      streamName: reservationStream(nameKey),
      expectedState: 'no_stream',
      events: reservationDecider.decide(
        {
          type: 'ClaimReservation',
          key: nameKey,
          ownerType: 'tenant',
          ownerId: String(tenantId),
          now: '2025-03-04T09:00:00.000Z',
        },
        reservationDecider.initialState,
      ),
    },
    {
      streamName: tenantStream(tenantId),
      expectedState: 'no_stream',
      events: tenantDecider.decide(
        {
          type: 'CreateTenant',
          tenantId,
          name: TENANT_NAME,
          now: '2025-03-04T09:00:00.000Z',
          ehrManaged: true,
          allowedScopes: SCOPES_AT_CREATION,
          redirectOrigins: REDIRECT_ORIGINS,
        },
        tenantDecider.initialState,
      ),
    },
  ]);
  await handle(at('2025-03-04T09:01:00.000Z'), tenantStream(tenantId), tenantDecider, {
    type: 'ConfigureTenant',
    now: '2025-03-04T09:01:00.000Z',
    ehrManaged: true,
    allowedScopes: SCOPES_CONFIGURED,
    redirectOrigins: REDIRECT_ORIGINS,
  });

  await handle(at('2025-03-04T09:02:00.000Z'), clientStream(CLIENT_ID), clientDecider, {
    type: 'RegisterApiClient',
    clientId: CLIENT_ID,
    tenantId,
    secretHash: SECRET_HASH,
    now: '2025-03-04T09:02:00.000Z',
    scopes: CLIENT_SCOPES,
    projects: [],
  });
  await handle(at('2025-03-04T09:03:00.000Z'), clientStream(CLIENT_ID), clientDecider, {
    type: 'RotateApiClientSecret',
    secretHash: ROTATED_HASH,
    now: '2025-03-04T09:03:00.000Z',
  });
  await handle(at('2025-03-04T09:04:00.000Z'), clientStream(CLIENT_ID), clientDecider, {
    type: 'ConfigureApiClient',
    now: '2025-03-04T09:04:00.000Z',
    scopes: CLIENT_SCOPES,
    projects: ['tumorboard'],
  });

  const practitionerId = await allocateId(h.sql, 'Practitioner');
  await registerWithIdentifiers(
    at('2025-03-04T09:05:00.000Z'),
    'Practitioner',
    practitionerId,
    practitionerStream(practitionerId),
    [LANR],
    practitionerDecider.decide(
      {
        type: 'RegisterPractitioner',
        practitionerId,
        tenantId,
        identifier: [LANR],
        at: '2025-03-04T09:05:00.000Z',
      },
      practitionerDecider.initialState,
    ),
  );
  const patientId = await allocateId(h.sql, 'Patient');
  await registerWithIdentifiers(
    at('2025-03-04T09:06:00.000Z'),
    'Patient',
    patientId,
    patientStream(patientId),
    [MRN, KVID],
    patientDecider.decide(
      {
        type: 'RegisterPatient',
        patientId,
        tenantId,
        identifier: [MRN, KVID],
        at: '2025-03-04T09:06:00.000Z',
      },
      patientDecider.initialState,
    ),
  );
  const encounterId = await allocateId(h.sql, 'Encounter');
  await registerWithIdentifiers(
    at('2025-03-04T09:07:00.000Z'),
    'Encounter',
    encounterId,
    encounterStream(encounterId),
    [CASE],
    encounterDecider.decide(
      {
        type: 'RegisterEncounter',
        encounterId,
        tenantId,
        identifier: [CASE],
        subjectPatientId: patientId,
        at: '2025-03-04T09:07:00.000Z',
      },
      encounterDecider.initialState,
    ),
  );

  const ids = { tenantId, practitionerId, patientId, encounterId };
  const s1 = await allocateId(h.sql, 'session');
  await handle(
    at('2025-03-04T10:00:00.000Z'),
    sessionStream(s1),
    sessionDecider,
    createSession(s1, ids, '2025-03-04T10:00:00.000Z'),
  );
  await handle(
    at('2025-03-04T10:01:00.000Z'),
    sessionStream(s1),
    sessionDecider,
    handOver(s1, '2025-03-04T10:01:00.000Z'),
  );
  await handle(at('2025-03-04T10:30:00.000Z'), sessionStream(s1), sessionDecider, {
    type: 'EndSession',
    tenantId,
    now: '2025-03-04T10:30:00.000Z',
  });
  const s2 = await allocateId(h.sql, 'session');
  await handle(
    at('2025-03-04T10:40:00.000Z'),
    sessionStream(s2),
    sessionDecider,
    createSession(s2, ids, '2025-03-04T10:40:00.000Z'),
  );
  await handle(
    at('2025-03-04T10:41:00.000Z'),
    sessionStream(s2),
    sessionDecider,
    handOver(s2, '2025-03-04T10:41:00.000Z'),
  );
  const s3 = await allocateId(h.sql, 'session');
  const last = await handle(
    at('2025-03-04T10:50:00.000Z'),
    sessionStream(s3),
    sessionDecider,
    createSession(s3, ids, '2025-03-04T10:50:00.000Z', true),
  );
  return { ...ids, sessionIds: [s1, s2, s3], head: last.position! };
};

// ---------------------------------------------------------------------------------------------
// Table dumps
// ---------------------------------------------------------------------------------------------

/** Key columns of every read-model table; a table missing here fails the dumps on purpose. */
const TABLE_KEYS: Readonly<Record<string, readonly string[]>> = {
  rm_tenants: ['id'],
  rm_api_clients: ['client_id'],
  rm_sessions: ['id'],
  rm_resources: ['resource_type', 'id'],
  rm_resource_identifiers: ['resource_type', 'tenant_id', 'system', 'value', 'id'],
};

type Row = Record<string, unknown>;

const normalise = (row: Row): Row =>
  Object.fromEntries(Object.entries(row).map(([k, v]) => [k, v instanceof Date ? v.toISOString() : v]));

const compareKeys = (keys: readonly string[]) => (a: Row, b: Row) => {
  for (const key of keys) {
    const x = a[key] as string | number;
    const y = b[key] as string | number;
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
};

/** Every row of `table`, timestamps as ISO strings, ordered by its key (code-point order, not collation). */
const dump = async (sql: Sql, table: string): Promise<Row[]> => {
  const keys = TABLE_KEYS[table];
  if (!keys) throw new Error(`no key known for read-model table ${table}: add it to TABLE_KEYS`);
  const rows = await sql.query(`SELECT * FROM ${table}`);
  return rows.map(normalise).sort(compareKeys(keys));
};

const tablesOf = (projections: readonly Projection[]) => projections.flatMap((p) => p.tables);

/** Every read-model table of `projections`, by name. */
const dumpAll = async (sql: Sql, projections: readonly Projection[] = allProjections) => {
  const result: Record<string, Row[]> = {};
  for (const table of tablesOf(projections)) result[table] = await dump(sql, table);
  return result;
};

const dumpCheckpoints = async (sql: Sql) =>
  (await sql.query(`SELECT name, position FROM projection_checkpoints`)).sort(compareKeys(['name']));

const dumpSequences = async (sql: Sql) => {
  const result: Record<string, { last_value: string; is_called: boolean }> = {};
  for (const kind of ID_SEQUENCES) {
    const [row] = await sql.query<{ last_value: string; is_called: boolean }>(
      `SELECT last_value::text AS last_value, is_called FROM ${sequenceName(kind)}`,
    );
    result[kind] = row!;
  }
  return result;
};

// ---------------------------------------------------------------------------------------------
// The expected read models of buildLog's log
// ---------------------------------------------------------------------------------------------

const expectedRows = (log: Log): Record<string, Row[]> => {
  const [s1, s2, s3] = log.sessionIds;
  const session = (id: number, createdAt: string, expiresAt: string) => ({
    id,
    tenant_id: log.tenantId,
    client_id: CLIENT_ID,
    user_id: log.practitionerId,
    patient_id: log.patientId,
    encounter_id: log.encounterId,
    scopes: SESSION_SCOPES,
    deployment_mode: 'embedded',
    post_submit_redirect: 'https://ehr.example.org/done',
    post_cancel_redirect: 'https://ehr.example.org/cancel',
    created_at: createdAt,
    expires_at: expiresAt,
  });
  return {
    rm_tenants: [
      {
        id: log.tenantId,
        name: TENANT_NAME,
        ehr_managed: true,
        allowed_scopes: SCOPES_CONFIGURED,
        redirect_origins: REDIRECT_ORIGINS,
        created_at: '2025-03-04T09:00:00.000Z',
        updated_at: '2025-03-04T09:01:00.000Z',
      },
    ],
    rm_api_clients: [
      {
        client_id: CLIENT_ID,
        tenant_id: log.tenantId,
        secret_hash: ROTATED_HASH,
        scopes: CLIENT_SCOPES,
        projects: ['tumorboard'],
        created_at: '2025-03-04T09:02:00.000Z',
        updated_at: '2025-03-04T09:04:00.000Z',
      },
    ],
    rm_sessions: [
      {
        ...session(s1, '2025-03-04T10:00:00.000Z', '2025-03-11T22:00:00.000Z'),
        status: 'ended',
        cookie_hash: null,
        last_modified_at: '2025-03-04T10:30:00.000Z',
      },
      {
        ...session(s2, '2025-03-04T10:40:00.000Z', '2025-03-11T22:40:00.000Z'),
        status: 'active',
        cookie_hash: `cookie-hash-${s2}`,
        last_modified_at: '2025-03-04T10:41:00.000Z',
      },
      {
        ...session(s3, '2025-03-04T10:50:00.000Z', '2025-03-11T22:50:00.000Z'),
        patient_id: null,
        encounter_id: null,
        deployment_mode: 'standalone',
        post_submit_redirect: null,
        post_cancel_redirect: null,
        status: 'inactive',
        cookie_hash: null,
        last_modified_at: '2025-03-04T10:50:00.000Z',
      },
    ],
    rm_resources: [
      {
        resource_type: 'Encounter',
        id: log.encounterId,
        tenant_id: log.tenantId,
        version_id: 1,
        content: { identifier: [CASE], subject: { reference: `Patient/${log.patientId}` } },
        last_updated: '2025-03-04T09:07:00.000Z',
        deleted: false,
      },
      {
        resource_type: 'Patient',
        id: log.patientId,
        tenant_id: log.tenantId,
        version_id: 1,
        content: { identifier: [MRN, KVID] },
        last_updated: '2025-03-04T09:06:00.000Z',
        deleted: false,
      },
      {
        resource_type: 'Practitioner',
        id: log.practitionerId,
        tenant_id: log.tenantId,
        version_id: 1,
        content: { identifier: [LANR] },
        last_updated: '2025-03-04T09:05:00.000Z',
        deleted: false,
      },
    ],
    rm_resource_identifiers: [
      {
        resource_type: 'Encounter',
        tenant_id: log.tenantId,
        system: CASE.system,
        value: CASE.value,
        id: log.encounterId,
      },
      {
        resource_type: 'Patient',
        tenant_id: log.tenantId,
        system: KVID.system,
        value: KVID.value,
        id: log.patientId,
      },
      {
        resource_type: 'Patient',
        tenant_id: log.tenantId,
        system: MRN.system,
        value: MRN.value,
        id: log.patientId,
      },
      {
        resource_type: 'Practitioner',
        tenant_id: log.tenantId,
        system: LANR.system,
        value: LANR.value,
        id: log.practitionerId,
      },
    ],
  };
};

/** Wraps a projection (same name, tables, checkpoint) to record the ids of the events it applies. */
const counting = (projection: Projection, applied: Map<string, string[]>): Projection => ({
  ...projection,
  apply: async (event, tx) => {
    applied.set(projection.name, [...(applied.get(projection.name) ?? []), event.id]);
    await projection.apply(event, tx);
  },
});

const readWholeLog = async (store: SqlEventStore): Promise<RecordedEvent[]> =>
  store.readAll({ maxCount: 10_000 });

for (const db of testDatabases) {
  describe(`projections on ${db.name}`, function () {
    this.timeout(30_000);

    const cleanups: (() => Promise<void>)[] = [];

    /** Opens an isolated database with the event store, the sequences and the read-model tables. */
    const openHarness = async (): Promise<Harness> => {
      const opened = await db.open();
      cleanups.push(() => opened.dispose());
      const store = await SqlEventStore.open(opened.sql);
      cleanups.push(() => store.close());
      await migrateSequences(opened.sql);
      return { opened, sql: opened.sql, store };
    };

    /** A runner over `store` writing its read models to `sql`, tables created; stopped after the test. */
    const newRunner = async (
      store: SqlEventStore,
      sql: Sql,
      projections: readonly Projection[] = allProjections,
    ) => {
      const runner = new ProjectionRunner(store, sql, projections, logger);
      await runner.migrate();
      cleanups.push(() => runner.stop());
      return runner;
    };

    /** "Another process": a second connection (pool) to the same database with its own store. */
    const otherProcess = async (h: Harness): Promise<{ sql: Sql; store: SqlEventStore }> => {
      const sql = await h.opened.reopen();
      const store = await SqlEventStore.open(sql);
      cleanups.push(() => store.close());
      return { sql, store };
    };

    afterEach(async () => {
      // Runners first, then stores, then databases: the reverse of their creation.
      while (cleanups.length > 0) await cleanups.pop()!();
    });

    // The tests below only read this database: one log, caught up once by one runner. (Every
    // PGlite instance costs seconds to start; the tests that change a database open their own.)
    const sharedCleanups: (() => Promise<void>)[] = [];
    let shared: {
      h: Harness;
      log: Log;
      runner: ProjectionRunner;
      events: RecordedEvent[];
      positionBeforeCatchUp: Position | undefined;
      appliedByCatchUp: number;
    };

    before(async () => {
      const h = await openHarness();
      const log = await buildLog(h);
      const runner = await newRunner(h.store, h.sql);
      const positionBeforeCatchUp = await runner.position();
      const appliedByCatchUp = await runner.catchUp();
      const events = await readWholeLog(h.store);
      sharedCleanups.push(...cleanups.splice(0));
      shared = { h, log, runner, events, positionBeforeCatchUp, appliedByCatchUp };
    });

    after(async () => {
      while (sharedCleanups.length > 0) await sharedCleanups.pop()!();
    });

    describe('catching up', () => {
      it('builds exactly the rows of tenants, api clients, sessions and resources from the log', async () => {
        const { h, log, appliedByCatchUp } = shared;
        expect(appliedByCatchUp).to.equal(LOG_LENGTH);
        expect(log.tenantId).to.equal(1);
        expect(log.sessionIds).to.deep.equal([1, 2, 3]);
        expect(await dumpAll(h.sql)).to.deep.equal(expectedRows(log));
      });

      it('moves every checkpoint to the head of the log, and reports it as its position', async () => {
        const { h, log, runner, positionBeforeCatchUp } = shared;
        expect(positionBeforeCatchUp).to.equal(undefined);
        expect(await h.store.headPosition()).to.deep.equal(log.head);
        expect(await dumpCheckpoints(h.sql)).to.deep.equal(
          allProjections
            .map((p) => ({ name: p.name, position: positionToString(log.head) }))
            .sort(compareKeys(['name'])),
        );
        expect(await runner.position()).to.deep.equal(log.head);
        expect(runner.progress.value).to.deep.equal(log.head);
      });

      it('reads nothing more when caught up', async () => {
        const { h, runner } = shared;
        const before = await dumpAll(h.sql);

        expect(await runner.catchUp()).to.equal(0);
        expect(await dumpAll(h.sql)).to.deep.equal(before);
      });
    });

    describe('idempotence', () => {
      let target: Harness;
      before(async () => {
        target = await openHarness();
        for (const projection of allProjections) await projection.migrate(target.sql);
        sharedCleanups.push(...cleanups.splice(0));
      });

      for (const projection of allProjections) {
        const expectedOf = (log: Log) => {
          const expected = expectedRows(log);
          return Object.fromEntries(projection.tables.map((t) => [t, expected[t]]));
        };

        it(`leaves the same ${projection.name} rows when the whole log is applied again`, async () => {
          const { h, log, events } = shared;
          expect(events).to.have.length(LOG_LENGTH);
          const rows = await dumpAll(h.sql, [projection]);
          expect(rows).to.deep.equal(expectedOf(log));
          const sequences = await dumpSequences(h.sql);

          await h.sql.transaction(async (tx) => {
            for (const event of events) await projection.apply(event, tx);
          });

          expect(await dumpAll(h.sql, [projection])).to.deep.equal(rows);
          expect(await dumpSequences(h.sql)).to.deep.equal(sequences);
        });

        it(`leaves the same ${projection.name} rows when every event is delivered twice in a row`, async () => {
          const { log, events } = shared;
          // Projections own disjoint tables, so they share one target database.
          await target.sql.transaction(async (tx) => {
            for (const event of events) {
              await projection.apply(event, tx);
              await projection.apply(event, tx);
            }
          });

          expect(await dumpAll(target.sql, [projection])).to.deep.equal(expectedOf(log));
        });
      }
    });

    describe('rebuild (casebook replay)', () => {
      it('drops the read models and rebuilds identical tables from the log', async () => {
        const h = await openHarness();
        const log = await buildLog(h);
        const runner = await newRunner(h.store, h.sql);
        await runner.catchUp();
        const before = await dumpAll(h.sql);
        const checkpointsBefore = await dumpCheckpoints(h.sql);
        expect(before).to.deep.equal(expectedRows(log));

        // Damage every kind of table, so only a real drop-and-rebuild restores them.
        await h.sql.query(
          `INSERT INTO rm_tenants (id, name, ehr_managed, allowed_scopes, redirect_origins, created_at, updated_at)
           VALUES (99, 'stray', false, '[]', '[]', now(), now())`,
        );
        await h.sql.query(`UPDATE rm_api_clients SET secret_hash = 'tampered'`);
        await h.sql.query(`DELETE FROM rm_sessions WHERE id = $1`, [log.sessionIds[1]]);
        await h.sql.query(`DELETE FROM rm_resources WHERE resource_type = 'Patient'`);
        await h.sql.query(`DELETE FROM rm_resource_identifiers`);
        await h.sql.query(`DELETE FROM projection_checkpoints WHERE name = 'sessions'`);
        expect(await dumpAll(h.sql)).to.not.deep.equal(before);

        const progress: number[] = [];
        expect(await runner.rebuild((applied) => progress.push(applied))).to.equal(LOG_LENGTH);

        expect(progress).to.deep.equal([LOG_LENGTH]);
        expect(await dumpAll(h.sql)).to.deep.equal(before);
        expect(await dumpCheckpoints(h.sql)).to.deep.equal(checkpointsBefore);
      });

      it('keeps the id sequences, so ids allocated after a replay stay new', async () => {
        const h = await openHarness();
        await buildLog(h);
        const runner = await newRunner(h.store, h.sql);
        await runner.catchUp();

        await runner.rebuild();

        expect(await allocateId(h.sql, 'session')).to.equal(4);
        expect(await allocateId(h.sql, 'tenant')).to.equal(2);
      });

      if (db.name === 'postgres')
        it('refuses to rebuild while another process runs the projections', async () => {
          const h = await openHarness();
          const log = await buildLog(h);
          const other = await otherProcess(h);
          const active = await newRunner(other.store, other.sql);
          active.start();
          expect(await active.waitFor(log.head, 10_000)).to.equal(true);
          const before = await dumpAll(h.sql);
          const replay = await newRunner(h.store, h.sql);

          let error: unknown;
          await replay.rebuild().catch((e: unknown) => {
            error = e;
          });

          expect(error).to.be.instanceOf(Error);
          expect((error as Error).message).to.equal(
            'a projection runner is active on this database: stop it before replaying',
          );
          expect(await dumpAll(h.sql)).to.deep.equal(before);
        });
    });

    describe('resuming from the checkpoint', () => {
      it('applies only the events after the checkpoint when a new runner starts', async () => {
        const h = await openHarness();
        const log = await buildLog(h);
        const first = await newRunner(h.store, h.sql);
        first.start();
        expect(await first.waitFor(log.head, 10_000)).to.equal(true);
        await first.stop();
        expect(await first.position()).to.deep.equal(log.head);

        // Rows whose events lie before the checkpoint: a runner that replayed them would recreate them.
        const [s1, s2, s3] = log.sessionIds;
        await h.sql.query(`DELETE FROM rm_sessions WHERE id = $1`, [s3]);
        await h.sql.query(`DELETE FROM rm_resources WHERE resource_type = 'Practitioner'`);

        // Later events: session 4 created and handed over, session 2 ended.
        const ctx = contextAt(h, '2025-03-04T11:00:00.000Z', log.tenantId);
        const s4 = await allocateId(h.sql, 'session');
        await handle(
          ctx,
          sessionStream(s4),
          sessionDecider,
          createSession(s4, log, '2025-03-04T11:00:00.000Z'),
        );
        await handle(ctx, sessionStream(s4), sessionDecider, handOver(s4, '2025-03-04T11:01:00.000Z'));
        const ended = await handle(ctx, sessionStream(s2), sessionDecider, {
          type: 'EndSession',
          tenantId: log.tenantId,
          now: '2025-03-04T11:02:00.000Z',
        });
        const later = await h.store.readAll({ from: log.head });
        expect(later.map((e) => e.type)).to.deep.equal([
          'SessionCreated',
          'SessionHandedOver',
          'SessionEnded',
        ]);

        const other = await otherProcess(h);
        const applied = new Map<string, string[]>();
        const second = await newRunner(
          other.store,
          other.sql,
          allProjections.map((p) => counting(p, applied)),
        );
        second.start();
        expect(await second.waitFor(ended.position!, 10_000)).to.equal(true);
        await second.stop();

        expect(Object.fromEntries(applied)).to.deep.equal(
          Object.fromEntries(allProjections.map((p) => [p.name, later.map((e) => e.id)])),
        );
        const sessions = await dump(h.sql, 'rm_sessions');
        expect(sessions.map((r) => [r.id, r.status, r.cookie_hash])).to.deep.equal([
          [s1, 'ended', null],
          [s2, 'ended', null],
          [s4, 'active', `cookie-hash-${s4}`],
        ]);
        expect((await dump(h.sql, 'rm_resources')).map((r) => r.resource_type)).to.deep.equal([
          'Encounter',
          'Patient',
        ]);
        expect(await second.position()).to.deep.equal(ended.position);
      });

      it('applies the whole log to a projection added later, and nothing again to the others', async () => {
        const h = await openHarness();
        await buildLog(h);
        // More events than one catch-up page (500), none of them for a read model: a name claimed and
        // released over and over, decided one after the other.
        const key = tenantNameKey('Klinik Süd');
        let state = reservationDecider.initialState;
        const churn: Event[] = [];
        for (let i = 0; i < 600; i++) {
          const now = new Date(Date.parse('2025-03-05T00:00:00.000Z') + i * 1000).toISOString();
          const decided =
            state.status === 'free'
              ? reservationDecider.decide(
                  { type: 'ClaimReservation', key, ownerType: 'tenant', ownerId: String(100 + i), now },
                  state,
                )
              : reservationDecider.decide(
                  { type: 'ReleaseReservation', ownerType: state.ownerType, ownerId: state.ownerId, now },
                  state,
                );
          state = decided.reduce(reservationDecider.evolve, state);
          churn.push(...decided);
        }
        const ctx = contextAt(h, '2025-03-05T00:00:00.000Z', null);
        const { position: head } = await h.store.append(
          reservationStream(key),
          toNewEvents(ctx, churn),
          'no_stream',
        );
        const first = await newRunner(h.store, h.sql);
        expect(await first.catchUp()).to.equal(LOG_LENGTH + 600);
        const rows = await dumpAll(h.sql);

        const applied = new Map<string, string[]>();
        const audit: Projection = {
          name: 'audit',
          tables: [],
          migrate: async () => undefined,
          apply: async () => undefined,
        };
        const second = await newRunner(
          h.store,
          h.sql,
          [...allProjections, audit].map((p) => counting(p, applied)),
        );
        expect(await second.catchUp()).to.equal(LOG_LENGTH + 600);

        // The read models already at the head must skip every event, in every page of the catch-up.
        // (Fails while ProjectionRunner.applyBatch writes every projection's checkpoint as the batch's
        // last position even when the projection was further: after page 1 the others' checkpoints
        // fall back to event 500 and they re-apply events 501–619.)
        const counts = Object.fromEntries([...applied].map(([name, ids]) => [name, ids.length]));
        expect(counts).to.deep.equal({ audit: LOG_LENGTH + 600 });
        const log = await readWholeLog(h.store);
        expect(applied.get('audit')).to.deep.equal(log.map((e) => e.id));
        expect(await dumpAll(h.sql)).to.deep.equal(rows);
        expect(await second.position()).to.deep.equal(head);
      });
    });

    describe('waitFor (read-your-writes)', () => {
      it('resolves true once the started runner has applied an appended event', async () => {
        const h = await openHarness();
        const log = await buildLog(h);
        const runner = await newRunner(h.store, h.sql);
        runner.start();
        expect(await runner.waitFor(log.head, 10_000)).to.equal(true);

        const changed = await handle(
          contextAt(h, '2025-03-04T12:00:00.000Z', log.tenantId),
          clientStream(CLIENT_ID),
          clientDecider,
          { type: 'RotateApiClientSecret', secretHash: 'scrypt$third', now: '2025-03-04T12:00:00.000Z' },
        );

        expect(await runner.waitFor(changed.position!, 10_000)).to.equal(true);
        const [client] = await dump(h.sql, 'rm_api_clients');
        expect([client?.secret_hash, client?.updated_at]).to.deep.equal([
          'scrypt$third',
          '2025-03-04T12:00:00.000Z',
        ]);
      });

      it('resolves false after its timeout when the started runner never reaches the position', async () => {
        const h = await openHarness();
        const log = await buildLog(h);
        const runner = await newRunner(h.store, h.sql);
        runner.start();
        expect(await runner.waitFor(log.head, 10_000)).to.equal(true);
        const beyond: Position = {
          commit: log.head.commit + 1_000_000n,
          prepare: log.head.prepare + 1_000_000n,
        };

        const started = Date.now();
        expect(await runner.waitFor(beyond, 200)).to.equal(false);
        expect(Date.now() - started).to.be.within(190, 2_000);
      });

      it('resolves false after its timeout when no runner applies the event', async () => {
        const h = await openHarness();
        const log = await buildLog(h);
        const idle = await newRunner(h.store, h.sql);

        const started = Date.now();
        expect(await idle.waitFor(log.head, 200)).to.equal(false);
        expect(Date.now() - started).to.be.within(190, 2_000);
        expect(await dump(h.sql, 'rm_tenants')).to.deep.equal([]);
      });

      it('resolves true from the checkpoints when another runner applies the event', async () => {
        const h = await openHarness();
        const log = await buildLog(h);
        const follower = await newRunner(h.store, h.sql);
        const waiting = follower.waitFor(log.head, 10_000);

        const other = await otherProcess(h);
        const active = await newRunner(other.store, other.sql);
        active.start();

        expect(await waiting).to.equal(true);
        expect(await dumpAll(h.sql)).to.deep.equal(expectedRows(log));
      });
    });

    describe('id sequences', () => {
      it('moves the sequences of a fresh database past every id found in the log', async () => {
        const { h, log } = shared;
        const fresh = await openHarness();
        const runner = await newRunner(h.store, fresh.sql);

        expect(await runner.catchUp()).to.equal(LOG_LENGTH);

        expect(await dumpAll(fresh.sql)).to.deep.equal(expectedRows(log));
        const next: Record<string, number> = {};
        for (const kind of ID_SEQUENCES) next[kind] = await allocateId(fresh.sql, kind);
        expect(next).to.deep.equal({ tenant: 2, session: 4, Patient: 2, Encounter: 2, Practitioner: 2 });
      });

      it('never moves a sequence backwards', async () => {
        const { h } = shared;
        const fresh = await openHarness();
        for (let i = 0; i < 9; i++) await allocateId(fresh.sql, 'session');
        const runner = await newRunner(h.store, fresh.sql);

        await runner.catchUp();

        expect(await allocateId(fresh.sql, 'session')).to.equal(10);
        expect(await allocateId(fresh.sql, 'tenant')).to.equal(2);
      });
    });
  });
}
