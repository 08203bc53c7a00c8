/**
 * The read models' SQL apply functions, called directly on both SQL stores (issue 34: "each SQL
 * function has its own test"; docs/architecture.md "Projections"): `rm_sessions_*` and
 * `rm_resources_*` are one body (`_write`, over an array of the change type) behind a keyed entry
 * point (`_apply(batch json)`, an append's) and a bulk one (`_apply_bulk`, a rebuild's parallel
 * arrays). The same changes through either write the same rows; an older revision or version
 * changes nothing; identifiers follow the row.
 */
import { expect } from 'chai';
import type { Sql } from '../../src/db/sql.js';
import { applyCall, migrateReadModel, rowsParam } from '../../src/projections/projection.js';
import {
  APPLY_COLUMNS as RESOURCE_COLUMNS,
  type ResourceRowChange,
} from '../../src/projections/resources.js';
import { APPLY_COLUMNS as SESSION_COLUMNS, type SessionRowChange } from '../../src/projections/sessions.js';
import { closeAfterEach, testDatabases } from '../support/databases.js';

const AT = '2026-03-01T10:00:00.000Z';
const LATER = '2026-03-01T11:00:00.000Z';

const session = (id: number, revision: number, status: SessionRowChange['status']): SessionRowChange => ({
  id,
  revision,
  created:
    revision === 0
      ? {
          sessionId: id,
          tenantId: 1 + (id % 3),
          clientId: 'c1',
          userId: 7,
          patientId: id,
          encounterId: null,
          scopes: ['user/*.rs'],
          deploymentMode: 'embedded',
          postSubmitRedirect: null,
          postCancelRedirect: null,
          handoverTokenHash: 'h',
          handoverExpiresAt: AT,
          createdAt: AT,
          expiresAt: LATER,
        }
      : null,
  status,
  cookie_hash: status === 'active' ? `cookie-${id}` : null,
  last_modified_at: revision === 0 ? AT : LATER,
});

const patient = (id: number, version: number, mrn: string): ResourceRowChange => ({
  resource_type: 'Patient',
  id,
  tenant_id: 1,
  version_id: version,
  content: { resourceType: 'Patient', id: String(id), meta: { versionId: String(version) } },
  last_updated: version === 1 ? AT : LATER,
  deleted: false,
  patient_id: id,
  encounter_id: null,
  project: null,
  author: 'Practitioner/1',
  created: version === 1,
  identifiers: [{ system: 'urn:mrn', value: mrn }],
  practitioner_ids: [1],
  questionnaire: null,
  search_tokens: [`identifier|urn:mrn|${mrn}`],
  search_dates: [],
});

/** Every row of the two read models, in key order, as text. */
const dump = async (sql: Sql) => ({
  sessions: await sql.query(`SELECT * FROM rm_sessions ORDER BY id`),
  resources: await sql.query(`SELECT * FROM rm_resources ORDER BY resource_type, id`),
  identifiers: await sql.query(
    `SELECT * FROM rm_resource_identifiers ORDER BY resource_type, tenant_id, system, value, id`,
  ),
});

for (const database of testDatabases) {
  describe(`read-model apply functions on ${database.name}`, function () {
    this.timeout(60_000);
    const cleanups = closeAfterEach();

    const open = async () => {
      const opened = await database.open();
      cleanups.push(() => opened.dispose());
      await migrateReadModel(opened.sql, 'sessions');
      await migrateReadModel(opened.sql, 'resources');
      return opened.sql;
    };

    /** 150 creations, then 150 changes (handed over, and a few ended), as batches of `size`. */
    const SESSION_BATCHES = [
      Array.from({ length: 150 }, (_, i) => session(i + 1, 0, 'inactive')),
      Array.from({ length: 150 }, (_, i) => session(i + 1, 1, i % 10 === 0 ? 'ended' : 'active')),
    ];
    const RESOURCE_BATCHES = [
      Array.from({ length: 150 }, (_, i) => patient(i + 1, 1, `m${i + 1}`)),
      Array.from({ length: 150 }, (_, i) => patient(i + 1, 2, i % 2 === 0 ? `m${i + 1}` : `n${i + 1}`)),
    ];

    it('the keyed and the bulk entry points write the same rows', async () => {
      const keyed = await open();
      const bulk = await open();
      for (const batch of SESSION_BATCHES) {
        await keyed.query(`SELECT rm_sessions_apply($1::json)`, [rowsParam(batch)]);
        const call = applyCall('rm_sessions_apply', SESSION_COLUMNS, batch);
        expect(call.text).to.match(/rm_sessions_apply_bulk/);
        await bulk.query(call.text, call.values);
      }
      for (const batch of RESOURCE_BATCHES) {
        const [written] = await keyed.query<{ n: number }>(`SELECT rm_resources_apply($1::json) AS n`, [
          rowsParam(batch),
        ]);
        expect(written?.n).to.equal(150);
        const call = applyCall('rm_resources_apply', RESOURCE_COLUMNS, batch);
        expect(call.text).to.match(/rm_resources_apply_bulk/);
        await bulk.query(call.text, call.values);
      }
      const rows = await dump(keyed);
      expect(rows.sessions).to.have.length(150);
      expect(rows.sessions.filter((r) => (r as { status: string }).status === 'ended')).to.have.length(15);
      expect(rows.resources).to.have.length(150);
      // Odd Patients changed their MRN: the old identifier went, the new one came.
      expect(rows.identifiers).to.have.length(150);
      expect(rows.identifiers.map((r) => (r as { value: string }).value)).to.include.members(['m1', 'n2']);
      expect(rows.identifiers.map((r) => (r as { value: string }).value)).not.to.include('m2');
      expect(await dump(bulk)).to.deep.equal(rows);
    });

    it('an older revision or version, delivered again, changes nothing through either entry point', async () => {
      const sql = await open();
      for (const batch of SESSION_BATCHES)
        await sql.query(`SELECT rm_sessions_apply($1::json)`, [rowsParam(batch)]);
      for (const batch of RESOURCE_BATCHES)
        await sql.query(`SELECT rm_resources_apply($1::json)`, [rowsParam(batch)]);
      const before = await dump(sql);
      // The creations again: keyed (a small batch) and bulk (a rebuild's page).
      await sql.query(`SELECT rm_sessions_apply($1::json)`, [rowsParam(SESSION_BATCHES[0]!.slice(0, 5))]);
      const sessions = applyCall('rm_sessions_apply', SESSION_COLUMNS, SESSION_BATCHES[0]!);
      await sql.query(sessions.text, sessions.values);
      const [keyed] = await sql.query<{ n: number }>(`SELECT rm_resources_apply($1::json) AS n`, [
        rowsParam(RESOURCE_BATCHES[0]!.slice(0, 5)),
      ]);
      expect(keyed?.n).to.equal(0);
      const resources = applyCall('rm_resources_apply', RESOURCE_COLUMNS, RESOURCE_BATCHES[0]!);
      const [bulk] = await sql.query<Record<string, number>>(resources.text, resources.values);
      expect(Object.values(bulk ?? {})).to.deep.equal([0]);
      expect(await dump(sql)).to.deep.equal(before);
    });
  });
}
