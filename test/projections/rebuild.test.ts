/**
 * A rebuild beside a serving casebook (issue 33; docs/architecture.md "Projections", Rebuild): the
 * read models are built in a schema of their own and swapped in once complete, so that a load of
 * reads and writes gets, for the whole rebuild, the correct answer or 503 with Retry-After — never
 * a 404, a 401 or a 500 that a quiet server would not give — and no credential failure is counted
 * or audited. The read models after the rebuild are the ones before it, plus the writes made
 * meanwhile. On PGlite (one process owns the data: the rebuild runs in the serving process) and on
 * a real PostgreSQL server.
 */
import { expect } from 'chai';
import { pino } from 'pino';
import { PostgresSql } from '../../src/db/sql.js';
import { auditEventsIn } from '../../src/fhir/audit-event.js';
import { allProjections } from '../../src/projections/index.js';
import { rebuildSchemaOf } from '../../src/projections/rebuild-beside.js';
import { ProjectionRunner } from '../../src/projections/runner/index.js';
import { GENERAL, seed, startTestApp, type TestApp, unique } from '../support/app.js';
import { POSTGRES_TEST_URL, testDatabases } from '../support/databases.js';
import { ROLE_NEW, sessionCookie } from '../support/fhir.js';
import { expectOnlyCorrectOr503, startReadLoad } from '../support/read-load.js';
import { dumpTable, oidOf } from '../support/read-models.js';

const TABLES = allProjections.flatMap((p) => p.tables);

/** Patients in transaction Bundles: a log worth rebuilding. */
const createPatients = async (app: TestApp, count: number, system: string) => {
  for (let done = 0; done < count; done += 200) {
    const res = await fetch(`${app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1')}`, {
      method: 'POST',
      headers: { Authorization: GENERAL, 'Content-Type': 'application/fhir+json' },
      body: JSON.stringify({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: Array.from({ length: Math.min(200, count - done) }, (_, i) => ({
          resource: { resourceType: 'Patient', identifier: [{ system, value: `p-${done + i}` }] },
          request: { method: 'POST', url: 'Patient' },
        })),
      }),
    });
    expect(res.status, await res.clone().text()).to.equal(200);
  }
};

for (const database of testDatabases) {
  describe(`a rebuild beside a serving casebook on ${database.name}`, function () {
    this.timeout(300_000);
    let app: TestApp | undefined;
    after(() => app?.close());

    it('answers every read correctly or 503 with Retry-After, records no credential failure, and swaps in the same read models', async () => {
      app = await startTestApp(database);
      await seed(app);
      const { sql } = app.casebook;
      const system = `urn:rebuild:${unique('mrn')}`;
      await createPatients(app, 3000, system);
      const fhirUrl = app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');
      // What the load reads comes last in the log: a rebuild in place shows it only at its end.
      const created = await fetch(`${fhirUrl}/Patient`, {
        method: 'POST',
        headers: { Authorization: GENERAL, 'Content-Type': 'application/fhir+json' },
        body: JSON.stringify({ resourceType: 'Patient', identifier: [{ system, value: 'last' }] }),
      });
      expect(created.status).to.equal(201);
      const patientId = ((await created.json()) as { id: string }).id;
      const { cookie, session } = await sessionCookie(app, {
        scope: 'user/*.* patient/*.*',
        patient: Number(patientId),
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:rebuild:staff', value: unique('dr') },
            role: ROLE_NEW,
          },
        ],
      });
      expect(await app.casebook.runner.waitForDeferred('audit-events')).to.equal('current');
      const before = new Map<string, string[]>();
      const oids = new Map<string, string>();
      for (const table of TABLES) {
        before.set(table, await dumpTable(sql, table));
        oids.set(table, await oidOf(sql, table));
      }
      const eventsBefore = (await app.allEvents({ audit: true })).length;

      let rebuilding = false;
      const stop = startReadLoad(
        {
          fhirUrl,
          authUrl: app.authUrl,
          basic: GENERAL,
          cookie: cookie.cookie,
          patient: { id: patientId, system, value: 'last' },
          sessionId: Number(session.id),
        },
        database.name === 'postgres' ? 12 : 4,
        () => rebuilding,
      );
      await new Promise((resolve) => setTimeout(resolve, 500));
      rebuilding = true;
      // Pages of 250 (2,500 by default): the rebuild takes many transactions, between which the
      // load's statements run, PGlite's one connection included.
      const rebuilder = new ProjectionRunner(
        app.casebook.store,
        sql,
        allProjections,
        pino({ level: 'silent' }),
        {
          pageSize: 250,
          appendHook: false,
        },
      );
      const rebuilt = await rebuilder.rebuild();
      rebuilding = false;
      await new Promise((resolve) => setTimeout(resolve, 500));
      const tally = await stop();

      expect(rebuilt.stopped.size).to.equal(0);
      expect(rebuilt.read).to.be.greaterThan(3000);
      expectOnlyCorrectOr503(tally);
      expect(tally.answeredDuring, 'answers while the rebuild ran').to.be.at.least(12);
      // Nothing was counted as a wrong secret, and no request of the load was recorded as refused.
      expect(await sql.query(`SELECT key FROM credential_failures WHERE points > 0`)).to.deep.equal([]);
      const records = (await app.allEvents({ audit: true }))
        .slice(eventsBefore)
        .flatMap((e) => auditEventsIn(e).map((a) => a.content as { status?: number }));
      expect(records.length).to.be.greaterThan(10);
      expect(
        records.filter((r) => r.status !== undefined && r.status !== 503 && r.status >= 400),
      ).to.deep.equal([]);

      // Every table was swapped for a new one holding the same rows, and the load's writes.
      expect(await app.casebook.runner.waitForDeferred('audit-events')).to.equal('current');
      for (const table of TABLES) expect(await oidOf(sql, table), table).to.not.equal(oids.get(table));
      for (const table of ['rm_tenants', 'rm_api_clients', 'rm_sessions', 'rm_export_outbox'])
        expect(await dumpTable(sql, table), table).to.deep.equal(before.get(table));
      const written = tally.correct.write ?? 0;
      for (const table of ['rm_resources', 'rm_resource_identifiers', 'rm_audit_events']) {
        const after = new Set(await dumpTable(sql, table));
        const missing = before.get(table)!.filter((row) => !after.has(row));
        expect(missing, table).to.deep.equal([]);
      }
      const patients = await sql.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM rm_resources WHERE resource_type = 'Patient'`,
      );
      expect(Number(patients[0]!.n)).to.be.at.least(3001 + written);
      // …and the same rows as a rebuild with nothing beside it.
      const settled = new Map<string, string[]>();
      for (const table of TABLES) settled.set(table, await dumpTable(sql, table));
      await app.casebook.runner.rebuild();
      expect(await app.casebook.runner.waitForDeferred('audit-events')).to.equal('current');
      for (const table of TABLES)
        expect(await dumpTable(sql, table), table).to.deep.equal(settled.get(table));
    });
  });
}

describe('the swap of a rebuild beside a transaction that holds a live table (PostgreSQL)', function () {
  this.timeout(300_000);
  const postgres = testDatabases.find((d) => d.name === 'postgres')!;
  let app: TestApp | undefined;
  let other: PostgresSql | undefined;
  afterEach(async () => {
    await other?.close();
    await app?.close();
    other = undefined;
    app = undefined;
  });

  /** A casebook with some rows, and a second pool on its schema. */
  const open = async () => {
    app = await startTestApp(postgres);
    await seed(app);
    await createPatients(app, 400, `urn:swap:${unique('mrn')}`);
    const [{ schema }] = (await app.casebook.sql.query<{ schema: string }>(
      `SELECT current_schema() AS schema`,
    )) as [{ schema: string }];
    other = new PostgresSql(POSTGRES_TEST_URL, { searchPath: schema, max: 1 });
    return { app, other, schema };
  };

  /** POSTs a new Patient: its id (201 asserted). */
  const createPatient = async (app: TestApp): Promise<string> => {
    const created = await fetch(`${app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1')}/Patient`, {
      method: 'POST',
      headers: { Authorization: GENERAL, 'Content-Type': 'application/fhir+json' },
      body: JSON.stringify({
        resourceType: 'Patient',
        identifier: [{ system: 'urn:swap:x', value: unique('w') }],
      }),
    });
    expect(created.status).to.equal(201);
    return ((await created.json()) as { id: string }).id;
  };

  /** A transaction on `sql` that reads `table` and keeps its lock until `release` is called. */
  const holdTable = async (sql: PostgresSql, table: string) => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let holding!: () => void;
    const held = new Promise<void>((resolve) => {
      holding = resolve;
    });
    const done = sql.transaction(async (tx) => {
      await tx.query(`SELECT count(*) FROM ${table}`);
      holding();
      await released;
    });
    await held;
    return async () => {
      release();
      await done;
    };
  };

  it('waits for it, letting readers and writers through meanwhile, and swaps once it ends', async () => {
    const { app, other } = await open();
    const oid = await oidOf(app.casebook.sql, 'rm_sessions');
    const release = await holdTable(other, 'rm_sessions');
    const rebuilt = app.casebook.runner.rebuild();
    await new Promise((resolve) => setTimeout(resolve, 1500));
    // Meanwhile a write and a read of what it wrote are answered (between the swap's attempts).
    const fhirUrl = app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');
    const id = await createPatient(app);
    expect(
      (await fetch(`${fhirUrl}/Patient/${id}`, { headers: { Authorization: GENERAL } })).status,
    ).to.equal(200);
    await release();
    const result = await rebuilt;
    expect(result.stopped.size).to.equal(0);
    expect(await oidOf(app.casebook.sql, 'rm_sessions')).to.not.equal(oid);
    expect(
      (await fetch(`${fhirUrl}/Patient/${id}`, { headers: { Authorization: GENERAL } })).status,
    ).to.equal(200);
  });

  it('gives up, swapping nothing, when the table stays held through every attempt', async () => {
    const { app, other, schema } = await open();
    const oids = new Map<string, string>();
    const before = new Map<string, string[]>();
    for (const table of TABLES) {
      oids.set(table, await oidOf(app.casebook.sql, table));
      if (table !== 'rm_audit_events') before.set(table, await dumpTable(app.casebook.sql, table));
    }
    const release = await holdTable(other, 'rm_resources');
    let error: unknown;
    try {
      await app.casebook.runner.rebuild();
    } catch (e) {
      error = e;
    } finally {
      await release();
    }
    expect((error as Error | undefined)?.message).to.match(
      /stayed locked by other transactions: nothing was swapped in/,
    );
    for (const table of TABLES) expect(await oidOf(app.casebook.sql, table), table).to.equal(oids.get(table));
    for (const [table, rows] of before)
      expect(await dumpTable(app.casebook.sql, table), table).to.deep.equal(rows);
    expect(
      await app.casebook.sql.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [
        rebuildSchemaOf(schema),
      ]),
    ).to.deep.equal([]);
    expect(await createPatient(app)).to.be.a('string');
  });
});
