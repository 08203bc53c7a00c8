/**
 * The read models' versioned migrations (issue 34 "SQL in files, with migrations";
 * docs/architecture.md "Projections", "Schema migrations"): a database whose read models were made
 * by casebook before them (test/fixtures/read-models-6b2458c.sql: tables, indexes and functions
 * with their sha1 markers) upgrades to the same schema as an empty database gets, records the
 * versions, and, written to and replayed, holds the same rows. On PGlite and PostgreSQL.
 */
import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { pino } from 'pino';
import { readMigrations } from '../../src/db/migrations.js';
import { migrateSequences } from '../../src/db/sequences.js';
import type { Sql } from '../../src/db/sql.js';
import type { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { allProjections } from '../../src/projections/index.js';
import { bulkParameters, readModelComponent } from '../../src/projections/projection.js';
import { APPLY_COLUMNS as RESOURCE_COLUMNS } from '../../src/projections/resources.js';
import { ProjectionRunner } from '../../src/projections/runner/index.js';
import { APPLY_COLUMNS as SESSION_COLUMNS } from '../../src/projections/sessions.js';
import { closeAfterEach, openStore, testDatabases } from '../support/databases.js';
import { testEvent } from '../support/events.js';

const logger = pino({ level: 'silent' });
const FIXTURE = readFileSync(new URL('../fixtures/read-models-6b2458c.sql', import.meta.url), 'utf8');
const TABLES = allProjections.flatMap((p) => p.tables);
const AT = '2026-03-01T10:00:00.000Z';

/** A log touching every read model. */
const LOG: [string, string, unknown][] = [
  [
    'tenant-1',
    'TenantCreated',
    { tenantId: 1, name: 'T', ehrManaged: false, allowedScopes: [], redirectOrigins: [], createdAt: AT },
  ],
  [
    'client-c1',
    'ApiClientRegistered',
    { clientId: 'c1', tenantId: 1, secretHash: 'h', scopes: [], projects: [], at: AT },
  ],
  [
    'session-1',
    'SessionCreated',
    {
      sessionId: 1,
      tenantId: 1,
      clientId: 'c1',
      userId: 1,
      patientId: null,
      encounterId: null,
      scopes: [],
      deploymentMode: 'embedded',
      postSubmitRedirect: null,
      postCancelRedirect: null,
      handoverTokenHash: 't',
      handoverExpiresAt: AT,
      createdAt: AT,
      expiresAt: AT,
    },
  ],
  ['session-1', 'SessionHandedOver', { sessionId: 1, cookieHash: 'k', at: AT }],
  [
    'Patient-1',
    'PatientRegistered',
    { id: 1, tenantId: 1, resource: { identifier: [{ system: 'urn:x', value: 'a' }] }, at: AT },
  ],
  [
    'Patient-1',
    'PatientUpdated',
    { id: 1, resource: { identifier: [{ system: 'urn:x', value: 'b' }] }, at: AT },
  ],
  [
    'QuestionnaireResponse-2',
    'QuestionnaireResponseCreated',
    { id: 2, tenantId: 1, resource: { status: 'completed', questionnaire: 'https://q' }, at: AT },
  ],
  [
    'subscription-s1',
    'SubscriptionCreated',
    { subscriptionId: 's1', tenantId: 1, owner: 'c1', resource: { status: 'requested' }, at: AT },
  ],
  [
    'audit-1',
    'AuditEventsRecorded',
    {
      records: [
        {
          id: '00000000-0000-4000-8000-000000000001',
          tenantId: 1,
          interaction: 'read',
          action: 'R',
          recorded: AT,
          status: 200,
          agent: { kind: 'client', clientId: 'c1' },
          entities: [{ reference: 'Patient/1', patientId: 1 }],
        },
      ],
    },
  ],
];

/** Every row of the read models (a subscription's position in this database's log left out). */
const dump = async (sql: Sql): Promise<Record<string, string[]>> => {
  const tables: Record<string, string[]> = {};
  for (const table of TABLES)
    tables[table] = (
      await sql.query<{ r: string }>(
        `SELECT (to_jsonb(t) - 'created_position' - 'seq')::text AS r FROM ${table} t ORDER BY 1`,
      )
    ).map((row) => row.r);
  return tables;
};

/** The read models' columns and indexes, and the signatures of the functions of the current schema. */
const schemaOf = async (sql: Sql) => ({
  columns: await sql.query(
    `SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns
      WHERE table_schema = current_schema() AND table_name = ANY($1::text[]) ORDER BY table_name, ordinal_position`,
    [TABLES],
  ),
  indexes: (
    await sql.query<{ d: string }>(
      `SELECT replace(indexdef, current_schema() || '.', '') AS d FROM pg_indexes
        WHERE schemaname = current_schema() AND tablename = ANY($1::text[]) ORDER BY 1`,
      [TABLES],
    )
  ).map((r) => r.d),
  functions: (
    await sql.query<{ f: string }>(
      `SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS f FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'rm\\_%' ORDER BY 1`,
    )
  ).map((r) => r.f),
});

const append = async (store: SqlEventStore) => {
  for (const [stream, type, data] of LOG) await store.append(stream, [testEvent(type, data)], 'any');
};

for (const db of testDatabases)
  describe(`read models made before versioned migrations, on ${db.name}`, function () {
    this.timeout(180_000);
    const cleanups = closeAfterEach();

    const open = async (before?: (sql: Sql) => Promise<void>) => {
      const { opened, store } = await openStore(db, cleanups);
      await migrateSequences(opened.sql);
      await before?.(opened.sql);
      const runner = new ProjectionRunner(store, opened.sql, allProjections, logger);
      await runner.migrate();
      await runner.catchUp();
      cleanups.push(() => runner.stop());
      return { sql: opened.sql, store, runner };
    };

    it('upgrade to the schema of an empty database and, replayed, hold the same rows', async () => {
      const fresh = await open();
      const old = await open(async (sql) => {
        await sql.exec(FIXTURE);
        for (const p of allProjections)
          await sql.query(`INSERT INTO projection_state (name, status) VALUES ($1, 'live')`, [p.name]);
      });
      const versions = await old.sql.query<{ component: string; version: number }>(
        `SELECT component, max(version) AS version FROM schema_migrations WHERE component LIKE 'projection%'
          GROUP BY component ORDER BY component`,
      );
      // Every read model at its last version: the fixture's schema is version 1, later files upgrade it.
      const last = (name: string) =>
        readMigrations(new URL(`../../src/projections/sql/${name}/`, import.meta.url)).length;
      expect(versions.map((v) => `${v.component}@${v.version}`)).to.have.members([
        'projection-state@1',
        ...allProjections.map((p) => `${readModelComponent(p.name)}@${last(p.name)}`),
      ]);
      // No function keeps the sha1 marker of the definitions made before.
      const marked = await old.sql.query(
        `SELECT proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
            AND strpos(prosrc, 'casebook definition') > 0`,
      );
      expect(marked).to.deep.equal([]);
      expect(await schemaOf(old.sql)).to.deep.equal(await schemaOf(fresh.sql));

      await append(fresh.store);
      await append(old.store);
      await fresh.runner.catchUpDeferred();
      await old.runner.catchUpDeferred();
      const rows = await dump(fresh.sql);
      expect(rows.rm_resources).to.have.length(2); // the Patient and the QuestionnaireResponse
      expect(rows.rm_audit_events).to.have.length(1);
      expect(await dump(old.sql)).to.deep.equal(rows);
      const result = await old.runner.rebuild();
      expect([...result.stopped.keys()]).to.deep.equal([]);
      expect(await dump(old.sql)).to.deep.equal(rows);
      expect(await schemaOf(old.sql)).to.deep.equal(await schemaOf(fresh.sql));
    });

    it('the bulk apply functions take the columns the code sends them', async () => {
      const { sql } = await open();
      // regprocedure: by argument types only (`c0 integer[], c1 json` → `integer[], json`).
      const exists = async (name: string, parameters: string) =>
        (
          await sql.query<{ ok: boolean }>(`SELECT to_regprocedure($1) IS NOT NULL AS ok`, [
            `${name}(${parameters.replace(/\bc\d+ /g, '')})`,
          ])
        )[0]?.ok;
      expect(await exists('rm_sessions_apply_bulk', bulkParameters(SESSION_COLUMNS))).to.equal(true);
      expect(await exists('rm_resources_apply_bulk', bulkParameters(RESOURCE_COLUMNS))).to.equal(true);
      expect(await exists('rm_resources_apply_bulk', bulkParameters(SESSION_COLUMNS))).to.equal(false);
    });

    it('the one body of each apply function takes changes of the columns the code sends, in order', async () => {
      const { sql } = await open();
      const attributes = async (type: string) =>
        (
          await sql.query<{ name: string }>(
            `SELECT a.attname AS name FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid
              WHERE t.oid = to_regtype($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
            [type],
          )
        ).map((r) => r.name);
      expect(await attributes('rm_sessions_change')).to.deep.equal(SESSION_COLUMNS.map((c) => c.name));
      expect(await attributes('rm_resources_change')).to.deep.equal(RESOURCE_COLUMNS.map((c) => c.name));
    });
  });
