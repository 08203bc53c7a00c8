/**
 * An erasure killed halfway (issue 36 "kill -9 in the middle of an erasure, restart: it completes;
 * nothing is left readable"). A real casebook process on PostgreSQL records `PatientErased`, then
 * waits to destroy the patient's data key (the test holds the key store's table locked), and is
 * killed (SIGKILL) there. After a restart the key is destroyed (src/commands/erasure.ts
 * `completeErasures`, run at every start): the patient's events read as erased, its reads 410.
 */
import { expect } from 'chai';
import pg from 'pg';
import type { PostgresSql } from '../../src/db/sql.js';
import { POSTGRES_TEST_URL } from '../support/databases.js';
import {
  eventually,
  type ProcessSchema,
  processSchema,
  type RunningServer,
  startServer,
} from '../support/process.js';

const CLIENT = `Basic ${Buffer.from('erase-ehr:erase-secret-0123456789').toString('base64')}`;
const FAMILY = 'Killhalfway';

describe('an erasure killed halfway (real process, PostgreSQL)', function () {
  this.timeout(120_000);
  let server: RunningServer | undefined;
  let db: ProcessSchema;
  let admin: PostgresSql;
  let schema: string;
  let keys: string;

  before(async () => {
    db = await processSchema('k', {
      tenants: [
        {
          name: 'Erasure Hospital',
          allowed_scopes: 'user/*.* patient/*.*',
          clients: [
            { client_id: 'erase-ehr', client_secret: 'erase-secret-0123456789', scopes: 'system/*.*' },
          ],
        },
      ],
    });
    ({ admin, schema } = db);
    keys = `${schema}_keys`;
  });
  after(async () => {
    await server?.kill();
    await db?.dispose();
  });

  it('completes at the next start: the key is destroyed, nothing of the patient is readable', async () => {
    server = await startServer(db.env);
    const base = () => `http://127.0.0.1:${server!.port}/fhir/r5`;
    const created = await fetch(`${base()}/Patient`, {
      method: 'POST',
      headers: { Authorization: CLIENT, 'Content-Type': 'application/fhir+json' },
      body: JSON.stringify({ resourceType: 'Patient', name: [{ family: FAMILY }], birthDate: '1951-11-03' }),
    });
    expect(created.status).to.equal(201);
    const id = Number(((await created.json()) as { id: string }).id);
    const liveKeys = async () =>
      Number(
        (
          await admin.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM ${keys}.data_keys WHERE wrapped IS NOT NULL`,
          )
        )[0]!.n,
      );
    expect(await liveKeys()).to.equal(1);

    // The key store's table held: the erasure records its event, then waits to destroy the key.
    const holder = new pg.Client({ connectionString: POSTGRES_TEST_URL });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`LOCK TABLE ${keys}.data_keys IN EXCLUSIVE MODE`);
      const erasing = fetch(`${base()}/Patient/${id}/$erase`, {
        method: 'POST',
        headers: { Authorization: CLIENT, 'Content-Type': 'application/fhir+json' },
        body: JSON.stringify({
          resourceType: 'Parameters',
          parameter: [{ name: 'reason', valueString: 'registered twice' }],
        }),
      }).catch(() => 'no answer');
      await eventually(
        async () =>
          (await admin.query(`SELECT 1 FROM ${schema}.es_events WHERE type = 'PatientErased'`)).length,
        'PatientErased',
        20_000,
      );
      await new Promise((r) => setTimeout(r, 200)); // on its way to the key store, and waiting there
      await server.kill();
      expect(await erasing).to.equal('no answer');
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    }
    // Cut short: the event is there, the key is not destroyed yet.
    expect(await liveKeys()).to.equal(1);

    server = await startServer(db.env);
    expect(await liveKeys()).to.equal(0);
    const read = await fetch(`${base()}/Patient/${id}`, { headers: { Authorization: CLIENT } });
    expect(read.status).to.equal(410);
    // Nothing of the patient is left readable in the schema: log, read models, all.
    const tables = await admin.query<{ name: string }>(
      `SELECT tablename AS name FROM pg_tables WHERE schemaname = $1`,
      [schema],
    );
    for (const { name } of tables) {
      const rows = await admin.query<{ t: string }>(`SELECT t::text AS t FROM ${schema}."${name}" t`);
      expect(rows.map((r) => r.t).join('\n'), name).not.to.include(FAMILY);
    }
    // Erasing again answers 200 and records nothing more.
    const again = await fetch(`${base()}/Patient/${id}/$erase`, {
      method: 'POST',
      headers: { Authorization: CLIENT, 'Content-Type': 'application/fhir+json' },
      body: JSON.stringify({
        resourceType: 'Parameters',
        parameter: [{ name: 'reason', valueString: 'again' }],
      }),
    });
    expect(again.status).to.equal(200);
    expect(
      (await admin.query(`SELECT 1 FROM ${schema}.es_events WHERE type = 'PatientErased'`)).length,
    ).to.equal(1);
  });
});
