/**
 * The read models and their runner (docs/architecture.md "Projections", CONVENTIONS.md "Projections"), on PGlite and on
 * a real Postgres server. Every test builds a realistic log through the deciders and the event
 * store (a tenant, an API client, practitioner/patient/encounter with identifier reservations, a
 * Task created and moved on, a Questionnaire created and deleted, sessions created → handed over →
 * ended) and asserts the rows the projections make of it.
 */
import { expect } from 'chai';
import { pino } from 'pino';
import { v4 as uuid } from 'uuid';
import { type ContextResourceType, register } from '../../src/commands/clinical.js';
import {
  allocateId,
  type CommandContext,
  ID_SEQUENCES,
  migrateSequences,
  sequenceName,
  toNewEvents,
} from '../../src/commands/context.js';
import { execute } from '../../src/commands/handler.js';
import type { Sql } from '../../src/db/sql.js';
import { clientDecider, clientStream } from '../../src/domain/client/client.js';
import type { Identifier } from '../../src/domain/clinical/identifier.js';
import type { Decider, Event } from '../../src/domain/decider.js';
import {
  type Content,
  type ResourceCommand,
  type ResourceType,
  resourceDecider,
  resourceStream,
} from '../../src/domain/fhir/resource.js';
import {
  identifierKey,
  reservationDecider,
  reservationStream,
  tenantNameKey,
} from '../../src/domain/reservation/reservation.js';
import { type SessionCommand, sessionDecider, sessionStream } from '../../src/domain/session/session.js';
import { tenantDecider, tenantStream } from '../../src/domain/tenant/tenant.js';
import {
  type ExpectedState,
  type Position,
  positionToString,
  type RecordedEvent,
} from '../../src/eventstore/port.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { allProjections } from '../../src/projections/index.js';
import type { Projection } from '../../src/projections/projection.js';
import { resourcesProjection } from '../../src/projections/resources.js';
import { ProjectionRunner } from '../../src/projections/runner/index.js';
import { sessionsProjection } from '../../src/projections/sessions.js';
import { type OpenedDatabase, testDatabases } from '../support/databases.js';
import { testRecordedEvent } from '../support/events.js';

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
const TASK_ID: Identifier = { system: 'https://ehr.example.org/auftrag', value: 'T-7' };
const QUESTIONNAIRE_ID: Identifier = { system: 'https://tumorboard.example.org/fragebogen', value: 'Q-1' };
const QUESTIONNAIRE_URL = 'https://tumorboard.example.org/Questionnaire/phq-9';
const SESSION_SCOPES = ['launch', 'patient/Patient.rs', 'patient/QuestionnaireResponse.cru'];

/** Number of events {@link buildLog} appends (resource events and identifier reservations). */
const LOG_LENGTH = 23;

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
  /** Created, then its status changed. */
  readonly taskId: number;
  /** Created, then deleted. */
  readonly questionnaireId: number;
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
  afterAppend: async () => undefined,
});

/** One command on one stream through the command handler; its append's position. */
const handle = async <C, S, E extends Event>(
  ctx: CommandContext,
  stream: string,
  decider: Decider<C, S, E>,
  command: C,
): Promise<{ position: Position | undefined }> => {
  const { position } = await execute(ctx, (uow) => uow.decide(stream, decider, command));
  return { position };
};

/** Already-decided events of several streams in one atomic append. */
const appendAtomically = async (
  ctx: CommandContext,
  parts: readonly { streamName: string; expectedState: ExpectedState; events: readonly Event[] }[],
): Promise<Position> =>
  (
    await ctx.store.appendMany(
      parts.map((p) => ({
        streamName: p.streamName,
        expectedState: p.expectedState,
        events: toNewEvents(ctx, p.events),
      })),
    )
  ).position;

/** A context resource as a session registers it (role new): its reservation and its creation. */
const registerContextResource = async (
  ctx: CommandContext,
  type: ContextResourceType,
  tenantId: number,
  identifier: Identifier,
  subjectPatientId?: number,
) => (await execute(ctx, (uow) => register(uow, type, tenantId, identifier, subjectPatientId))).result;

/** Appends a resource's creation together with a reservation of each of its identifiers. */
const registerWithIdentifiers = async (
  ctx: CommandContext,
  resourceType: 'Patient' | 'Encounter' | 'Practitioner',
  id: number,
  identifiers: readonly Identifier[],
): Promise<Position> =>
  appendAtomically(ctx, [
    {
      streamName: resourceStream(resourceType, id),
      expectedState: 'no_stream',
      events: resourceDecider(resourceType).decide(
        {
          type: 'CreateResource',
          id,
          tenantId: ctx.tenantId!,
          resource: { identifier: identifiers },
          now: ctx.now.toISOString(),
        },
        resourceDecider(resourceType).initialState,
      ),
    },
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

const taskContent = (patientId: number, encounterId: number, status: string): Content => ({
  identifier: [TASK_ID],
  status,
  intent: 'order',
  for: { reference: `Patient/${patientId}` },
  encounter: { reference: `Encounter/${encounterId}` },
});

const QUESTIONNAIRE_CONTENT: Content = {
  identifier: [QUESTIONNAIRE_ID],
  url: QUESTIONNAIRE_URL,
  status: 'active',
};

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

  // Practitioner and Encounter as a session registers them (one identifier each), the Patient with two.
  const practitioner = await registerContextResource(
    at('2025-03-04T09:05:00.000Z'),
    'Practitioner',
    tenantId,
    LANR,
  );
  const practitionerId = practitioner.id;
  const patientId = await allocateId(h.sql, 'Patient');
  await registerWithIdentifiers(at('2025-03-04T09:06:00.000Z'), 'Patient', patientId, [MRN, KVID]);
  const encounter = await registerContextResource(
    at('2025-03-04T09:07:00.000Z'),
    'Encounter',
    tenantId,
    CASE,
    patientId,
  );
  const encounterId = encounter.id;

  const task = resourceDecider('Task');
  const taskId = await allocateId(h.sql, 'Task');
  await handle(at('2025-03-04T09:08:00.000Z'), resourceStream('Task', taskId), task, {
    type: 'CreateResource',
    id: taskId,
    tenantId,
    resource: taskContent(patientId, encounterId, 'requested'),
    now: '2025-03-04T09:08:00.000Z',
    author: `Practitioner/${practitionerId}`,
  });
  await handle(at('2025-03-04T09:09:00.000Z'), resourceStream('Task', taskId), task, {
    type: 'UpdateResource',
    resource: taskContent(patientId, encounterId, 'in-progress'),
    now: '2025-03-04T09:09:00.000Z',
  });
  const questionnaire = resourceDecider('Questionnaire');
  const questionnaireId = await allocateId(h.sql, 'Questionnaire');
  await handle(
    at('2025-03-04T09:10:00.000Z'),
    resourceStream('Questionnaire', questionnaireId),
    questionnaire,
    {
      type: 'CreateResource',
      id: questionnaireId,
      tenantId,
      resource: QUESTIONNAIRE_CONTENT,
      now: '2025-03-04T09:10:00.000Z',
      project: 'tumorboard',
    },
  );
  await handle(
    at('2025-03-04T09:11:00.000Z'),
    resourceStream('Questionnaire', questionnaireId),
    questionnaire,
    { type: 'DeleteResource', now: '2025-03-04T09:11:00.000Z' },
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
  return { ...ids, taskId, questionnaireId, sessionIds: [s1, s2, s3], head: last.position! };
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
  rm_export_outbox: ['response_id', 'version_id'],
  rm_audit_events: ['id'],
  rm_subscriptions: ['id'],
  rm_subscription_notifications: ['subscription_id', 'event_number'],
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
  (await sql.query(`SELECT name, checkpoint AS position FROM projection_state`)).sort(compareKeys(['name']));

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

/**
 * An rm_resources row of tenant 1 whose content is version `versionId` (full FHIR JSON), with no
 * compartment, project, author or $everything links: spread it and override what a resource has.
 */
const resourceRow = (
  resourceType: ResourceType,
  id: number,
  versionId: number,
  lastUpdated: string,
  content: Content,
): Row => ({
  resource_type: resourceType,
  id,
  tenant_id: 1,
  version_id: versionId,
  content: {
    resourceType,
    id: String(id),
    meta: { versionId: String(versionId), lastUpdated },
    ...content,
  },
  last_updated: lastUpdated,
  deleted: false,
  patient_id: null,
  encounter_id: null,
  project: null,
  author: null,
  practitioner_ids: [],
  questionnaire: null,
  // Patient, Encounter and Task are searched by written parameters: no R5-definition index (issue 35).
  search_tokens: [],
  search_dates: [],
});

const identifierRow = (resourceType: ResourceType, tenantId: number, identifier: Identifier, id: number) => ({
  resource_type: resourceType,
  tenant_id: tenantId,
  system: identifier.system,
  value: identifier.value,
  id,
});

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
        revision: 1,
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
        revision: 2,
      },
    ],
    rm_sessions: [
      {
        ...session(s1, '2025-03-04T10:00:00.000Z', '2025-03-11T22:00:00.000Z'),
        status: 'ended',
        cookie_hash: null,
        last_modified_at: '2025-03-04T10:30:00.000Z',
        revision: 2,
      },
      {
        ...session(s2, '2025-03-04T10:40:00.000Z', '2025-03-11T22:40:00.000Z'),
        status: 'active',
        cookie_hash: `cookie-hash-${s2}`,
        last_modified_at: '2025-03-04T10:41:00.000Z',
        revision: 1,
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
        revision: 0,
      },
    ],
    rm_resources: [
      {
        ...resourceRow('Encounter', log.encounterId, 1, '2025-03-04T09:07:00.000Z', {
          identifier: [CASE],
          status: 'unknown',
          subject: { reference: `Patient/${log.patientId}` },
        }),
        patient_id: log.patientId,
        encounter_id: log.encounterId,
      },
      {
        ...resourceRow('Patient', log.patientId, 1, '2025-03-04T09:06:00.000Z', { identifier: [MRN, KVID] }),
        patient_id: log.patientId,
      },
      resourceRow('Practitioner', log.practitionerId, 1, '2025-03-04T09:05:00.000Z', { identifier: [LANR] }),
      {
        // Deleted: version 2 is the deletion, the content stays that of version 1.
        ...resourceRow(
          'Questionnaire',
          log.questionnaireId,
          1,
          '2025-03-04T09:10:00.000Z',
          QUESTIONNAIRE_CONTENT,
        ),
        version_id: 2,
        last_updated: '2025-03-04T09:11:00.000Z',
        deleted: true,
        project: 'tumorboard',
      },
      {
        ...resourceRow(
          'Task',
          log.taskId,
          2,
          '2025-03-04T09:09:00.000Z',
          taskContent(log.patientId, log.encounterId, 'in-progress'),
        ),
        patient_id: log.patientId,
        encounter_id: log.encounterId,
        author: `Practitioner/${log.practitionerId}`,
      },
    ],
    rm_resource_identifiers: [
      identifierRow('Encounter', log.tenantId, CASE, log.encounterId),
      identifierRow('Patient', log.tenantId, KVID, log.patientId),
      identifierRow('Patient', log.tenantId, MRN, log.patientId),
      identifierRow('Practitioner', log.tenantId, LANR, log.practitionerId),
      identifierRow('Task', log.tenantId, TASK_ID, log.taskId),
    ],
    // The log holds no completed QuestionnaireResponse: nothing to export.
    rm_export_outbox: [],
    // No request was made: nothing audited.
    rm_audit_events: [],
    // No Subscription in the log (issue 37): none, and no notification.
    rm_subscriptions: [],
    rm_subscription_notifications: [],
  };
};

/** Wraps a projection (same name, tables, checkpoint) to record the ids of the events it applies. */
const counting = (projection: Projection, applied: Map<string, string[]>): Projection => ({
  ...projection,
  apply: async (events, tx, mode) => {
    applied.set(projection.name, [...(applied.get(projection.name) ?? []), ...events.map((e) => e.id)]);
    await projection.apply(events, tx, mode);
  },
});

/** Applies `events` to `projection` one at a time, in order, as a catch-up would deliver them. */
const applyEach = async (projection: Projection, events: readonly RecordedEvent[], tx: Sql) => {
  for (const event of events)
    if (projection.handles(event.type)) await projection.apply([event], tx, 'catch-up');
};

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
      // The catch-up runner (as on KurrentDB): the log is written without inline projections.
      const runner = new ProjectionRunner(store, sql, projections, logger, { mode: 'async' });
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
            await applyEach(projection, events, tx);
            // …and as one set-based batch.
            await projection.apply(
              events.filter((e) => projection.handles(e.type)),
              tx,
              'catch-up',
            );
          });

          expect(await dumpAll(h.sql, [projection])).to.deep.equal(rows);
          expect(await dumpSequences(h.sql)).to.deep.equal(sequences);
        });

        it(`leaves the same ${projection.name} rows when every event is delivered twice in a row`, async () => {
          const { log, events } = shared;
          // Projections own disjoint tables, so they share one target database.
          await target.sql.transaction(async (tx) => {
            for (const event of events) {
              await applyEach(projection, [event], tx);
              await applyEach(projection, [event], tx);
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
        await h.sql.query(`UPDATE projection_state SET checkpoint = NULL WHERE name = 'sessions'`);
        expect(await dumpAll(h.sql)).to.not.deep.equal(before);

        const progress: number[] = [];
        expect((await runner.rebuild((applied) => progress.push(applied))).read).to.equal(LOG_LENGTH);

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

        // Only the projection that handles session events gets them.
        expect(Object.fromEntries(applied)).to.deep.equal({ sessions: later.map((e) => e.id) });
        const sessions = await dump(h.sql, 'rm_sessions');
        expect(sessions.map((r) => [r.id, r.status, r.cookie_hash])).to.deep.equal([
          [s1, 'ended', null],
          [s2, 'ended', null],
          [s4, 'active', `cookie-hash-${s4}`],
        ]);
        expect((await dump(h.sql, 'rm_resources')).map((r) => r.resource_type)).to.deep.equal([
          'Encounter',
          'Patient',
          'Questionnaire',
          'Task',
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
          handles: () => true,
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
        expect(next).to.deep.equal({
          tenant: 2,
          session: 4,
          Patient: 2,
          Encounter: 2,
          Practitioner: 2,
          Task: 2,
          Questionnaire: 2,
          QuestionnaireResponse: 1,
          ValueSet: 1,
          // The clinical types of issue 35: none in this log.
          Observation: 1,
          Condition: 1,
          MedicationStatement: 1,
          Medication: 1,
          AllergyIntolerance: 1,
          Immunization: 1,
          DocumentReference: 1,
        });
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

      it('gives concurrent allocations distinct ids in the order asked, and one at a time leaves no gap', async () => {
        const fresh = await openHarness();
        const concurrent = await Promise.all(
          Array.from({ length: 40 }, () => allocateId(fresh.sql, 'Patient')),
        );
        expect(concurrent).to.deep.equal(Array.from({ length: 40 }, (_, i) => i + 1));
        // Two kinds at once do not share a round trip's ids.
        const [patient, task] = await Promise.all([
          allocateId(fresh.sql, 'Patient'),
          allocateId(fresh.sql, 'Task'),
        ]);
        expect([patient, task]).to.deep.equal([41, 1]);
        for (let i = 0; i < 3; i++) expect(await allocateId(fresh.sql, 'Patient')).to.equal(42 + i);
      });
    });

    describe('resource versions (updates and deletes)', () => {
      const ownCleanups: (() => Promise<void>)[] = [];
      let h: Harness;
      before(async () => {
        h = await openHarness();
        await resourcesProjection.migrate(h.sql);
        ownCleanups.push(...cleanups.splice(0));
      });
      after(async () => {
        while (ownCleanups.length > 0) await ownCleanups.pop()!();
      });

      const created = (resource: Content, now: string): ResourceCommand => ({
        type: 'CreateResource',
        id: 0, // replaced by the allocated id
        tenantId: 1,
        resource,
        now,
      });
      const updated = (resource: Content, now: string): ResourceCommand => ({
        type: 'UpdateResource',
        resource,
        now,
      });

      /** Allocates an id, handles `commands` on its stream in turn and returns the recorded stream. */
      const writeHistory = async (resourceType: ResourceType, commands: readonly ResourceCommand[]) => {
        const id = await allocateId(h.sql, resourceType);
        const decider = resourceDecider(resourceType);
        for (const command of commands)
          await handle(
            contextAt(h, command.now, 1),
            resourceStream(resourceType, id),
            decider,
            command.type === 'CreateResource' ? { ...command, id } : command,
          );
        return { id, events: await h.store.readStream(resourceStream(resourceType, id)) };
      };

      const applyInOrder = (...events: RecordedEvent[]) =>
        h.sql.transaction((tx) => applyEach(resourcesProjection, events, tx));

      /** The rm_resources rows and identifiers of one resource. */
      const rowsOf = async (resourceType: ResourceType, id: number) => ({
        resources: (await dump(h.sql, 'rm_resources')).filter(
          (r) => r.resource_type === resourceType && r.id === id,
        ),
        identifiers: (await dump(h.sql, 'rm_resource_identifiers')).filter(
          (r) => r.resource_type === resourceType && r.id === id,
        ),
      });

      it('replaces the content, version and identifiers on an update', async () => {
        const { id, events } = await writeHistory('Patient', [
          created({ identifier: [MRN] }, '2025-03-04T09:00:00.000Z'),
          updated(
            { identifier: [KVID], name: [{ family: 'Muster' }], gender: 'female' },
            '2025-03-04T09:30:00.000Z',
          ),
        ]);
        expect(events.map((e) => [e.type, e.revision])).to.deep.equal([
          ['PatientRegistered', 0n],
          ['PatientUpdated', 1n],
        ]);

        await applyInOrder(events[0]!);
        expect(await rowsOf('Patient', id)).to.deep.equal({
          resources: [
            {
              ...resourceRow('Patient', id, 1, '2025-03-04T09:00:00.000Z', { identifier: [MRN] }),
              patient_id: id,
            },
          ],
          identifiers: [identifierRow('Patient', 1, MRN, id)],
        });

        await applyInOrder(events[1]!);
        expect(await rowsOf('Patient', id)).to.deep.equal({
          resources: [
            {
              ...resourceRow('Patient', id, 2, '2025-03-04T09:30:00.000Z', {
                identifier: [KVID],
                name: [{ family: 'Muster' }],
                gender: 'female',
              }),
              patient_id: id,
            },
          ],
          identifiers: [identifierRow('Patient', 1, KVID, id)],
        });
      });

      it('moves a resource to the compartment of its new references on a status change', async () => {
        const v1 = {
          identifier: [TASK_ID],
          status: 'requested',
          intent: 'order',
          for: { reference: 'Patient/41' },
        };
        const v2 = {
          identifier: [CASE],
          status: 'in-progress',
          intent: 'order',
          for: { reference: 'Patient/42' },
          encounter: { reference: 'Encounter/43' },
        };
        const { id, events } = await writeHistory('Task', [
          created(v1, '2025-03-04T09:00:00.000Z'),
          updated(v2, '2025-03-04T09:30:00.000Z'),
        ]);
        expect(events.map((e) => e.type)).to.deep.equal(['TaskCreated', 'TaskStatusChanged']);

        await applyInOrder(...events);

        expect(await rowsOf('Task', id)).to.deep.equal({
          resources: [
            {
              ...resourceRow('Task', id, 2, '2025-03-04T09:30:00.000Z', v2),
              patient_id: 42,
              encounter_id: 43,
            },
          ],
          identifiers: [identifierRow('Task', 1, CASE, id)],
        });
      });

      it('marks a deleted resource deleted at a new version and removes its identifiers', async () => {
        const v2 = { identifier: [MRN, KVID], active: true };
        const { id, events } = await writeHistory('Patient', [
          created({ identifier: [MRN] }, '2025-03-04T09:00:00.000Z'),
          updated(v2, '2025-03-04T09:30:00.000Z'),
          { type: 'DeleteResource', now: '2025-03-04T10:00:00.000Z' },
        ]);
        expect(events.map((e) => e.type)).to.deep.equal([
          'PatientRegistered',
          'PatientUpdated',
          'PatientDeleted',
        ]);

        await applyInOrder(...events);

        expect(await rowsOf('Patient', id)).to.deep.equal({
          resources: [
            {
              ...resourceRow('Patient', id, 2, '2025-03-04T09:30:00.000Z', v2),
              version_id: 3,
              last_updated: '2025-03-04T10:00:00.000Z',
              deleted: true,
              patient_id: id,
            },
          ],
          identifiers: [],
        });
      });

      it('never overwrites a newer version with an older update delivered after it', async () => {
        const v3 = { identifier: [CASE], active: false };
        const { id, events } = await writeHistory('Patient', [
          created({ identifier: [MRN] }, '2025-03-04T09:00:00.000Z'),
          updated({ identifier: [KVID] }, '2025-03-04T09:30:00.000Z'),
          updated(v3, '2025-03-04T09:45:00.000Z'),
        ]);
        await applyInOrder(...events);
        const newest = {
          resources: [{ ...resourceRow('Patient', id, 3, '2025-03-04T09:45:00.000Z', v3), patient_id: id }],
          identifiers: [identifierRow('Patient', 1, CASE, id)],
        };
        expect(await rowsOf('Patient', id)).to.deep.equal(newest);

        await applyInOrder(events[1]!);
        expect(await rowsOf('Patient', id)).to.deep.equal(newest);

        await applyInOrder(events[2]!);
        expect(await rowsOf('Patient', id)).to.deep.equal(newest);
      });

      it('never revives a deleted resource with an older update delivered after the deletion', async () => {
        const { id, events } = await writeHistory('Patient', [
          created({ identifier: [MRN] }, '2025-03-04T09:00:00.000Z'),
          updated({ identifier: [KVID] }, '2025-03-04T09:30:00.000Z'),
          { type: 'DeleteResource', now: '2025-03-04T10:00:00.000Z' },
        ]);
        await applyInOrder(...events);
        const gone = await rowsOf('Patient', id);
        expect(gone.resources.map((r) => [r.version_id, r.deleted])).to.deep.equal([[3, true]]);
        expect(gone.identifiers).to.deep.equal([]);

        await applyInOrder(events[1]!);

        expect(await rowsOf('Patient', id)).to.deep.equal(gone);
      });

      it('keeps the newest identifiers when the creation is delivered again after an update', async () => {
        const { id, events } = await writeHistory('Patient', [
          created({ identifier: [MRN] }, '2025-03-04T09:00:00.000Z'),
          updated({ identifier: [KVID] }, '2025-03-04T09:30:00.000Z'),
        ]);
        await applyInOrder(...events);
        const newest = await rowsOf('Patient', id);
        expect(newest.identifiers).to.deep.equal([identifierRow('Patient', 1, KVID, id)]);

        await applyInOrder(events[0]!);

        expect(await rowsOf('Patient', id)).to.deep.equal(newest);
      });

      it('reaches the rows a batch writes by their keys, not by scanning tables whose statistics lag behind', async () => {
        // Statistics taken while the tables were nearly empty, then thousands of rows: the state a
        // growing deployment is in between two ANALYZE runs.
        await h.sql.exec('ANALYZE rm_resources; ANALYZE rm_resource_identifiers');
        await h.sql.exec(`
          INSERT INTO rm_resources (resource_type, id, tenant_id, version_id, content, last_updated, deleted, patient_id)
          SELECT 'Patient', g, 1, 1, json_build_object('resourceType', 'Patient'), now(), false, g
            FROM generate_series(900001, 905000) g;
          INSERT INTO rm_resource_identifiers (resource_type, tenant_id, system, value, id)
          SELECT 'Patient', 1, 'urn:bulk', g::text, g FROM generate_series(900001, 905000) g`);
        const { id, events } = await writeHistory('Patient', [
          created({ identifier: [MRN] }, '2025-03-04T09:00:00.000Z'),
          updated({ identifier: [KVID] }, '2025-03-04T09:30:00.000Z'),
        ]);
        /**
         * Sequential scans of the two tables while `event` is applied: this backend's counts not
         * yet flushed to the statistics (pg_stat_xact_user_tables), before and after.
         */
        const scansApplying = (event: RecordedEvent) =>
          h.sql.transaction(async (tx) => {
            const counts = async () =>
              (
                await tx.query<{ relname: string; seq_scan: string }>(
                  `SELECT relname, seq_scan::text FROM pg_stat_xact_user_tables
                    WHERE schemaname = current_schema() AND relname IN ('rm_resources', 'rm_resource_identifiers')
                    ORDER BY relname`,
                )
              ).map((r) => [r.relname, Number(r.seq_scan)] as const);
            const before = new Map(await counts());
            await resourcesProjection.apply([event], tx, 'catch-up');
            return (await counts()).map(([relname, n]) => ({
              relname,
              seqScans: n - (before.get(relname) ?? 0),
            }));
          });
        for (const event of events)
          expect(await scansApplying(event), event.type).to.deep.equal([
            { relname: 'rm_resource_identifiers', seqScans: 0 },
            { relname: 'rm_resources', seqScans: 0 },
          ]);
        expect((await rowsOf('Patient', id)).identifiers).to.deep.equal([
          identifierRow('Patient', 1, KVID, id),
        ]);
      });

      it('applies a rebuild-sized batch (over 100 rows, the bulk function) as it applies a small one', async () => {
        const ids = Array.from({ length: 150 }, (_, i) => 800_001 + i);
        const recorded = (type: string, id: number, revision: bigint, data: unknown): RecordedEvent =>
          testRecordedEvent(type, resourceStream('Patient', id), revision, data);
        const identifier = (id: number, round: string) => ({
          system: 'urn:bulk-test',
          value: `${round}-${id}`,
        });
        const creations = ids.map((id) =>
          recorded('PatientRegistered', id, 0n, {
            id,
            tenantId: 1,
            resource: { identifier: [identifier(id, 'a')] },
            at: '2025-03-04T09:00:00.000Z',
          }),
        );
        const updates = ids.map((id) =>
          recorded('PatientUpdated', id, 1n, {
            id,
            resource: { identifier: [identifier(id, 'b')] },
            at: '2025-03-04T09:30:00.000Z',
          }),
        );
        for (const batch of [creations, updates])
          await h.sql.transaction((tx) => resourcesProjection.apply(batch, tx, 'catch-up'));

        const rows = (await dump(h.sql, 'rm_resources')).filter((r) => ids.includes(Number(r.id)));
        expect(rows.map((r) => [r.id, r.version_id])).to.deep.equal(ids.map((id) => [id, 2]));
        const identifiers = (await dump(h.sql, 'rm_resource_identifiers')).filter((r) =>
          ids.includes(Number(r.id)),
        );
        expect(identifiers.map((r) => r.value).sort()).to.deep.equal(ids.map((id) => `b-${id}`).sort());
      });

      it('writes with the bulk form (parallel arrays) every column the keyed form (one JSON document) writes', async () => {
        // 130 QuestionnaireResponses (over 100 rows: the bulk form) with every column filled in
        // somewhere — strings that need quoting in an array literal, a questionnaire, authors,
        // Practitioner links, a project — then a batch that deletes some (no content in the batch:
        // the stored one stays), updates others and creates one. Applied once as two bulk batches
        // and once in batches of 40 (the keyed form), the tables must match row for row.
        const ids = Array.from({ length: 130 }, (_, i) => 810_001 + i);
        const stream = (id: number) => resourceStream('QuestionnaireResponse', id);
        const content = (id: number, round: string) => ({
          resourceType: 'QuestionnaireResponse',
          status: round === 'a' ? 'in-progress' : 'completed',
          questionnaire: `https://forms.example.org/Questionnaire/q-${id % 3}|1.0`,
          subject: { reference: `Patient/${700_000 + (id % 7)}` },
          encounter: { reference: `Encounter/${710_000 + (id % 5)}` },
          author: { reference: `Practitioner/${720_000 + (id % 4)}` },
          identifier: { system: 'urn:bulk-columns', value: `${round}-${id} "quoted" \\ {braces},comma ü` },
          item: [
            {
              linkId: '1',
              text: `Befund "${id}" \\ ${round}`,
              answer: [{ valueString: 'x'.repeat(id % 50) }],
            },
          ],
        });
        const first = ids.map((id, i) =>
          testRecordedEvent('QuestionnaireResponseCreated', stream(id), 0n, {
            id,
            tenantId: 1 + (i % 2),
            resource: content(id, 'a'),
            at: '2025-03-04T09:00:00.000Z',
            ...(i % 3 === 0 ? { author: `Practitioner/${720_000 + i}` } : {}),
            ...(i % 10 === 0 ? { project: `project "${i}"` } : {}),
          }),
        );
        const second = [
          ...ids.slice(0, 60).map((id) =>
            testRecordedEvent('QuestionnaireResponseDeleted', stream(id), 1n, {
              id,
              at: '2025-03-04T10:00:00.000Z',
            }),
          ),
          ...ids.slice(60).map((id) =>
            testRecordedEvent('QuestionnaireResponseUpdated', stream(id), 1n, {
              id,
              resource: content(id, 'b'),
              at: '2025-03-04T10:00:00.000Z',
            }),
          ),
          ...ids.slice(0, 50).map((id) =>
            testRecordedEvent('QuestionnaireResponseCreated', stream(id + 1000), 0n, {
              id: id + 1000,
              tenantId: 1,
              resource: content(id + 1000, 'c'),
              at: '2025-03-04T10:00:00.000Z',
            }),
          ),
        ];
        const mine = (r: Row) => Number(r.id) > 810_000 && Number(r.id) < 812_000;
        const tables = async () => ({
          resources: (await dump(h.sql, 'rm_resources')).filter(mine),
          identifiers: (await dump(h.sql, 'rm_resource_identifiers')).filter(mine),
        });
        const clear = () =>
          h.sql.exec(`DELETE FROM rm_resources WHERE id > 810000 AND id < 812000;
                      DELETE FROM rm_resource_identifiers WHERE id > 810000 AND id < 812000`);
        const applyIn = async (size: number) => {
          for (const batch of [first, second])
            for (let at = 0; at < batch.length; at += size)
              await h.sql.transaction((tx) =>
                resourcesProjection.apply(batch.slice(at, at + size), tx, 'catch-up'),
              );
        };

        await applyIn(1000);
        const bulk = await tables();
        await clear();
        await applyIn(40);
        const keyed = await tables();
        await clear();

        expect(bulk.resources).to.have.length(180);
        expect(bulk.resources.filter((r) => r.deleted)).to.have.length(60);
        expect(bulk.resources.find((r) => r.id === 810_001)).to.include({ deleted: true, version_id: 2 });
        expect(bulk.resources.find((r) => r.id === 810_004)).to.include({ author: 'Practitioner/720003' });
        expect(bulk.resources.find((r) => r.id === 810_001)).to.include({ project: 'project "0"' });
        // The deleted ones keep their stored content and links; the identifiers of the live ones only.
        expect(bulk.resources.find((r) => r.id === 810_002)?.practitioner_ids).to.deep.equal([720_002]);
        expect(bulk.identifiers).to.have.length(70 + 50);
        expect(bulk.identifiers.find((r) => r.id === 810_070)?.value).to.equal(
          'b-810070 "quoted" \\ {braces},comma ü',
        );
        expect(bulk).to.deep.equal(keyed);
      });

      it('writes sessions with the bulk form (parallel arrays) as the keyed form (one JSON document) does', async () => {
        await sessionsProjection.migrate(h.sql);
        const ids = Array.from({ length: 120 }, (_, i) => 910_001 + i);
        const created = ids.map((sessionId, i) =>
          testRecordedEvent('SessionCreated', sessionStream(sessionId), 0n, {
            sessionId,
            tenantId: 1 + (i % 2),
            clientId: `client "${i % 3}"`,
            userId: 500 + i,
            patientId: i % 4 === 0 ? null : 600 + i,
            encounterId: i % 5 === 0 ? null : 700 + i,
            scopes: ['launch', `patient/Patient.r?_id=${i}`],
            deploymentMode: 'standalone',
            postSubmitRedirect: i % 2 ? `https://ehr.example.org/done?x="${i}"` : null,
            postCancelRedirect: null,
            handoverTokenHash: `h${i}`,
            handoverExpiresAt: '2025-03-04T09:05:00.000Z',
            createdAt: '2025-03-04T09:00:00.000Z',
            expiresAt: '2025-03-04T17:00:00.000Z',
          }),
        );
        const later = [
          ...ids.slice(0, 90).map((sessionId) =>
            testRecordedEvent('SessionHandedOver', sessionStream(sessionId), 1n, {
              sessionId,
              cookieHash: `c${sessionId}`,
              at: '2025-03-04T09:01:00.000Z',
            }),
          ),
          ...ids.slice(0, 30).map((sessionId) =>
            testRecordedEvent('SessionEnded', sessionStream(sessionId), 2n, {
              sessionId,
              reason: 'deleted',
              at: '2025-03-04T09:02:00.000Z',
            }),
          ),
        ];
        const mine = (r: Row) => Number(r.id) > 910_000 && Number(r.id) < 911_000;
        const applyIn = async (size: number) => {
          for (const batch of [created, later])
            for (let at = 0; at < batch.length; at += size)
              await h.sql.transaction((tx) =>
                sessionsProjection.apply(batch.slice(at, at + size), tx, 'catch-up'),
              );
          const rows = (await dump(h.sql, 'rm_sessions')).filter(mine);
          await h.sql.exec('DELETE FROM rm_sessions WHERE id > 910000 AND id < 911000');
          return rows;
        };

        const bulk = await applyIn(1000);
        const keyed = await applyIn(40);

        expect(bulk).to.have.length(120);
        expect(bulk.map((r) => r.status).filter((s) => s === 'ended')).to.have.length(30);
        expect(bulk.find((r) => r.id === 910_002)).to.include({
          client_id: 'client "1"',
          tenant_id: 2,
          post_submit_redirect: 'https://ehr.example.org/done?x="1"',
          cookie_hash: null,
        });
        expect(bulk).to.deep.equal(keyed);
      });

      it('drops the identifiers of the stored version when a batch folds the creation delivered again with an update', async () => {
        const { id, events } = await writeHistory('Patient', [
          created({ identifier: [MRN] }, '2025-03-04T09:00:00.000Z'),
          updated({ identifier: [KVID] }, '2025-03-04T09:30:00.000Z'),
        ]);
        await applyInOrder(events[0]!);
        expect((await rowsOf('Patient', id)).identifiers).to.deep.equal([
          identifierRow('Patient', 1, MRN, id),
        ]);

        // One batch: the creation again and the update, folded into one row that is still a creation.
        await h.sql.transaction((tx) => resourcesProjection.apply(events, tx, 'catch-up'));

        const after = await rowsOf('Patient', id);
        expect(after.resources.map((r) => r.version_id)).to.deep.equal([2]);
        expect(after.identifiers).to.deep.equal([identifierRow('Patient', 1, KVID, id)]);
      });
    });
  });
}
