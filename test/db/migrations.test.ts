/**
 * The migration runner (src/db/migrations.ts) and the event store's migrations
 * (src/eventstore/sql/), on PGlite and PostgreSQL: versions applied in order and once, recorded in
 * schema_migrations, a failing one rolled back, a newer schema refused; and a database whose event
 * store was made by the schema code before migrations (commit 9e7716e, test/fixtures) upgrades and
 * then replays to the same rows, md5 of every table, as a database made new.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import pino from 'pino';
import { appliedVersion, migrate, readMigrations } from '../../src/db/migrations.js';
import type { Sql } from '../../src/db/sql.js';
import type { NewEvent } from '../../src/eventstore/port.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { allProjections } from '../../src/projections/index.js';
import { ProjectionRunner } from '../../src/projections/runner/index.js';
import { testDatabases } from '../support/databases.js';
import { testEvent } from '../support/events.js';
import { dumpTable } from '../support/read-models.js';

const FIXTURE = new URL('../fixtures/eventstore-schema-9e7716e.sql', import.meta.url);

/** A folder of migration files named as given (removed after the test). */
const folderOf = (files: Record<string, string>): string => {
  const dir = mkdtempSync(join(tmpdir(), 'i34-store-migrations-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
};

describe('migration files', () => {
  it('are read in version order, and a gap or a misnamed file is refused', () => {
    const dirs = [
      folderOf({ '002_b.sql': 'SELECT 2;', '001_a.sql': 'SELECT 1;' }),
      folderOf({ '001_a.sql': 'SELECT 1;', '003_c.sql': 'SELECT 3;' }),
      folderOf({ '001_A.sql': 'SELECT 1;' }),
    ];
    try {
      expect(readMigrations(dirs[0]!).map((m) => [m.version, m.name])).to.deep.equal([
        [1, '001_a.sql'],
        [2, '002_b.sql'],
      ]);
      expect(() => readMigrations(dirs[1]!)).to.throw(/version 2 expected/);
      expect(() => readMigrations(dirs[2]!)).to.throw(/NNN_lower_case/);
    } finally {
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** md5 of every row of every table of the event store and the read models (not projection_state). */
const tableDigests = async (sql: Sql): Promise<Record<string, string>> => {
  const tables = await sql.query<{ name: string }>(
    `SELECT table_name AS name FROM information_schema.tables
      WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
        AND (table_name LIKE 'rm\\_%' OR table_name IN ('es_events', 'es_streams'))
      ORDER BY 1`,
  );
  const digests: Record<string, string> = {};
  for (const { name } of tables) {
    // The transaction id of an event is the database's own: not part of what a replay must give.
    const rows =
      name === 'es_events'
        ? (
            await sql.query<{ r: string }>(
              `SELECT (to_jsonb(e) - 'transaction_id')::text AS r FROM es_events e ORDER BY position`,
            )
          ).map((row) => row.r)
        : await dumpTable(sql, name);
    const [row] = await sql.query<{ md5: string }>(`SELECT md5($1) AS md5`, [rows.join('\n')]);
    digests[name] = `${rows.length}:${row!.md5}`;
  }
  return digests;
};

/** Patients, an update and a deletion, then a Practitioner: events as a command would append them. */
const EVENTS: { stream: string; events: NewEvent[] }[] = [
  ...[1, 2, 3].map((id) => ({
    stream: `Patient-${id}`,
    events: [
      testEvent('PatientRegistered', {
        id,
        tenantId: 1,
        resource: { resourceType: 'Patient', identifier: [{ system: 'urn:mrn', value: `M${id}` }] },
        at: '2026-03-01T10:00:00.000Z',
      }),
    ],
  })),
  {
    stream: 'Patient-2',
    events: [
      testEvent('PatientUpdated', {
        id: 2,
        resource: {
          resourceType: 'Patient',
          gender: 'female',
          identifier: [{ system: 'urn:mrn', value: 'M2' }],
        },
        at: '2026-03-01T10:01:00.000Z',
      }),
      testEvent('PatientDeleted', { id: 2, at: '2026-03-01T10:02:00.000Z' }),
    ],
  },
  {
    stream: 'Practitioner-4',
    events: [
      testEvent('PractitionerRegistered', {
        id: 4,
        tenantId: 1,
        resource: { resourceType: 'Practitioner', identifier: [{ system: 'urn:staff', value: 'S4' }] },
        at: '2026-03-01T10:03:00.000Z',
      }),
    ],
  },
];

/** Appends `EVENTS[from…to)` to `store`, each entry at its stream's current revision. */
const appendEvents = async (store: SqlEventStore, from: number, to: number) => {
  for (const { stream, events } of EVENTS.slice(from, to)) {
    const stored = await store.readStream(stream);
    await store.append(stream, events, stored.length === 0 ? 'no_stream' : BigInt(stored.length - 1));
  }
};

/** Builds every read model from the log, as `casebook replay` does. */
const replay = async (store: SqlEventStore, sql: Sql) => {
  const runner = new ProjectionRunner(store, sql, allProjections, pino({ level: 'silent' }), {
    mode: 'async',
  });
  return runner.buildUntil(new Date('2100-01-01T00:00:00.000Z'));
};

for (const database of testDatabases) {
  describe(`migrations on ${database.name}`, () => {
    it('applies each version once and in order, records it, and rolls back a failing one', async () => {
      const db = await database.open();
      const dir = folderOf({
        '001_t.sql': 'CREATE TABLE mig_t (a int);',
        '002_t.sql': 'ALTER TABLE mig_t ADD COLUMN b int;',
      });
      const broken = folderOf({
        '001_t.sql': 'CREATE TABLE mig_t (a int);',
        '002_t.sql': 'ALTER TABLE mig_t ADD COLUMN b int;',
        '003_t.sql': 'ALTER TABLE mig_t ADD COLUMN c int; SELECT no_such_function();',
      });
      try {
        expect(await appliedVersion(db.sql, 'test')).to.equal(0);
        expect(await migrate(db.sql, 'test', readMigrations(dir))).to.deep.equal([1, 2]);
        expect(await migrate(db.sql, 'test', readMigrations(dir))).to.deep.equal([]);
        await db.sql.query('INSERT INTO mig_t (a, b) VALUES (1, 2)');
        let failed: unknown;
        await migrate(db.sql, 'test', readMigrations(broken)).catch((error: unknown) => {
          failed = error;
        });
        expect(String(failed)).to.match(/no_such_function/);
        // Version 3 rolled back whole: no column c, still at version 2.
        expect(await appliedVersion(db.sql, 'test')).to.equal(2);
        const columns = await db.sql.query<{ name: string }>(
          `SELECT column_name AS name FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = 'mig_t' ORDER BY 1`,
        );
        expect(columns.map((c) => c.name)).to.deep.equal(['a', 'b']);
        // A schema newer than the migrations this code knows is refused.
        await db.sql.query(
          `INSERT INTO schema_migrations (component, version, name) VALUES ('test', 9, 'x')`,
        );
        let newer: unknown;
        await migrate(db.sql, 'test', readMigrations(dir)).catch((error: unknown) => {
          newer = error;
        });
        expect(String(newer)).to.match(/version 9, newer than/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
        rmSync(broken, { recursive: true, force: true });
        await db.dispose();
      }
    });

    if (database.name === 'postgres')
      it('processes opening the store at once apply the event store migrations once', async () => {
        const db = await database.open();
        try {
          const pools = await Promise.all([db.reopen(2), db.reopen(2), db.reopen(2)]);
          await Promise.all(pools.map((sql) => SqlEventStore.open(sql)));
          const rows = await db.sql.query<{ version: number }>(
            `SELECT version FROM schema_migrations WHERE component = 'eventstore'`,
          );
          expect(rows.map((r) => r.version)).to.deep.equal([1, 2, 3, 4]);
        } finally {
          await db.dispose();
        }
      });

    it('upgrades an event store made by the schema code of 9e7716e and replays to the same rows', async () => {
      const old = await database.open();
      const fresh = await database.open();
      try {
        // The old schema, and events written by its es_append before the upgrade.
        await old.sql.exec(readFileSync(FIXTURE, 'utf8'));
        for (const { stream, events } of EVENTS.slice(0, 3))
          await old.sql.query(`SELECT es_append($1::jsonb, $2::json, NULL)`, [
            JSON.stringify([
              {
                stream,
                expected: 'no_stream',
                events: events.map((e) => ({ id: e.id, type: e.type, metadata: e.metadata })),
              },
            ]),
            JSON.stringify(events.map((e) => e.data)),
          ]);
        expect(await appliedVersion(old.sql, 'eventstore')).to.equal(0);
        const upgraded = await SqlEventStore.open(old.sql);
        // Version 1 (the schema of 9e7716e written as a file), 2 (002_one_append.sql), 3
        // (003_append_by_index.sql) and 4 (004_plans_and_new_streams.sql).
        expect(await appliedVersion(old.sql, 'eventstore')).to.equal(4);
        await appendEvents(upgraded, 3, EVENTS.length);

        const made = await SqlEventStore.open(fresh.sql);
        await appendEvents(made, 0, EVENTS.length);

        expect(await replay(upgraded, old.sql)).to.equal(await replay(made, fresh.sql));
        const [before, after] = [await tableDigests(old.sql), await tableDigests(fresh.sql)];
        expect(Object.keys(before)).to.include.members(['es_events', 'es_streams', 'rm_resources']);
        expect(before.es_events).to.match(/^6:/);
        expect(before).to.deep.equal(after);
      } finally {
        await old.dispose();
        await fresh.dispose();
      }
    });
  });
}
