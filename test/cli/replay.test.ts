/**
 * `casebook replay` beside a live server on PostgreSQL (issue 33), as an operator runs it: a real
 * server process under a load of reads and writes, and the replay as a second process. For the
 * whole rebuild every answer is the correct one or 503 with Retry-After; no credential failure is
 * counted or audited; the replay exits 0; the read models after it hold the rows of before.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { PostgresSql } from '../../src/db/sql.js';
import { auditEventsIn } from '../../src/fhir/audit-event.js';
import { allProjections } from '../../src/projections/index.js';
import { rebuildSchemaOf } from '../../src/projections/rebuild-beside.js';
import { POSTGRES_TEST_URL } from '../support/databases.js';
import { cli, type RunningServer, startServer } from '../support/process.js';
import { expectOnlyCorrectOr503, startReadLoad } from '../support/read-load.js';
import { dumpTable, oidOf } from '../support/read-models.js';

const CLIENT = `Basic ${Buffer.from('replay-ehr:replay-secret-0123456789').toString('base64')}`;
const TABLES = allProjections.flatMap((p) => p.tables);
const PATIENTS = 6000;

describe('casebook replay beside a live server (PostgreSQL)', function () {
  this.timeout(600_000);
  const schema = `r_${randomBytes(5).toString('hex')}`;
  const dir = mkdtempSync(join(tmpdir(), 'casebook-replay-'));
  let admin: PostgresSql;
  let server: RunningServer | undefined;
  let env: Record<string, string>;

  before(async () => {
    admin = new PostgresSql(POSTGRES_TEST_URL, { max: 2, searchPath: schema });
    await admin.exec(`CREATE SCHEMA ${schema}`);
    const seedFile = join(dir, 'seed.json');
    writeFileSync(
      seedFile,
      JSON.stringify({
        tenants: [
          {
            name: 'Replay Hospital',
            allowed_scopes: 'user/*.* patient/*.*',
            clients: [
              {
                client_id: 'replay-ehr',
                client_secret: 'replay-secret-0123456789',
                scopes: 'system/*.*',
                projects: [],
              },
            ],
          },
        ],
      }),
    );
    const url = new URL(POSTGRES_TEST_URL);
    url.searchParams.set('options', `-c search_path=${schema}`);
    env = { DATABASE_URL: url.toString(), CASEBOOK_SEED: seedFile };
  });
  after(async () => {
    await server?.stop();
    await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers correctly or 503 throughout, counts no credential failure, exits 0 and keeps every row', async () => {
    server = await startServer(env);
    const base = `http://127.0.0.1:${server.port}`;
    const fhirUrl = `${base}/fhir/r5`;
    const send = async (path: string, body: unknown, type = 'application/fhir+json') => {
      const res = await fetch(`${path.startsWith('http') ? '' : fhirUrl}${path}`, {
        method: 'POST',
        headers: { Authorization: CLIENT, 'Content-Type': type },
        body: JSON.stringify(body),
      });
      const json = (await res.json()) as any;
      expect(res.status, JSON.stringify(json).slice(0, 300)).to.be.within(200, 201);
      return json;
    };
    for (let done = 0; done < PATIENTS; done += 200)
      await send('/', {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: Array.from({ length: 200 }, (_, i) => ({
          resource: {
            resourceType: 'Patient',
            identifier: [{ system: 'urn:replay:mrn', value: `p-${done + i}` }],
          },
          request: { method: 'POST', url: 'Patient' },
        })),
      });
    // What the load reads comes last in the log: a rebuild in place shows it only at its end.
    const patient = await send('/Patient', {
      resourceType: 'Patient',
      identifier: [{ system: 'urn:replay:mrn', value: 'last' }],
    });
    const session = await send(
      `${base}/auth/sessions`,
      {
        scope: 'user/*.* patient/*.*',
        patient: Number(patient.id),
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:replay:staff', value: 'dr-replay' },
            role: 'https://casebook.example/fhir/role/new',
          },
        ],
      },
      'application/json',
    );
    const handover = await fetch(
      `${base}/auth/sessions/$handover?${new URLSearchParams({ token: session.handover_token, next: `${base.replace('127.0.0.1', 'localhost')}/app/` })}`,
      { redirect: 'manual' },
    );
    expect(handover.status).to.equal(303);
    const cookie = /auth_session=[^;]+/.exec(handover.headers.get('set-cookie') ?? '')![0];
    // The AuditEvent view has caught up (its follower runs every 200 ms) before the tables are read.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const before = new Map<string, string[]>();
    const oids = new Map<string, string>();
    for (const table of TABLES) {
      before.set(table, await dumpTable(admin, table));
      oids.set(table, await oidOf(admin, table));
    }
    const [{ head }] = (await admin.query<{ head: string }>(
      `SELECT coalesce(max(position), 0)::text AS head FROM es_events`,
    )) as [{ head: string }];

    let replaying = false;
    const stop = startReadLoad(
      {
        fhirUrl,
        authUrl: `${base}/auth`,
        basic: CLIENT,
        cookie,
        patient: { id: patient.id, system: 'urn:replay:mrn', value: 'last' },
        sessionId: Number(session.id),
      },
      12,
      () => replaying,
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    replaying = true;
    const started = Date.now();
    const out = await cli(['replay'], env);
    const took = Date.now() - started;
    replaying = false;
    await new Promise((resolve) => setTimeout(resolve, 500));
    const tally = await stop();

    const result = JSON.parse(out.slice(out.indexOf('{')));
    expect(result.stopped, out).to.equal(undefined);
    expect(Object.values(result.projections)).to.deep.equal(allProjections.map(() => 'live'));
    expectOnlyCorrectOr503(tally);
    expect(tally.answeredDuring, `answers during the ${took} ms of the replay`).to.be.at.least(50);
    expect(await admin.query(`SELECT key FROM credential_failures WHERE points > 0`)).to.deep.equal([]);
    const refused = (
      await admin.query<{ type: string; data: unknown }>(
        `SELECT type, data FROM es_events WHERE position > $1::bigint AND type LIKE 'AuditEvent%'`,
        [head],
      )
    )
      .flatMap((e) => auditEventsIn(e).map((a) => a.content as { status?: number }))
      .filter((r) => r.status !== undefined && r.status !== 503 && r.status >= 400);
    expect(refused).to.deep.equal([]);

    // Every table swapped for a new one holding the rows of before (and the load's writes).
    for (const table of TABLES) expect(await oidOf(admin, table), table).to.not.equal(oids.get(table));
    for (const table of ['rm_tenants', 'rm_api_clients', 'rm_sessions', 'rm_export_outbox'])
      expect(await dumpTable(admin, table), table).to.deep.equal(before.get(table));
    for (const table of ['rm_resources', 'rm_resource_identifiers', 'rm_audit_events']) {
      const after = new Set(await dumpTable(admin, table));
      expect(
        before.get(table)!.filter((row) => !after.has(row)),
        table,
      ).to.deep.equal([]);
    }
    // The rebuild's own schema is gone.
    expect(
      await admin.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [rebuildSchemaOf(schema)]),
    ).to.deep.equal([]);
  });
});
