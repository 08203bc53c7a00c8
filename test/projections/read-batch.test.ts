/**
 * Batched reads by key (docs/architecture.md "Reads"): reads of resources that arrive together on
 * a shared handle (the pool, PGlite) go in one statement, each with the answer it would have had
 * alone — another tenant's resource stays missing, a deleted one stays deleted — and a read asked
 * after a write sees it even while an earlier batch is in flight. In a transaction, reads go on
 * their own. On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { pino } from 'pino';
import { execute } from '../../src/commands/handler.js';
import { allocateId, migrateSequences } from '../../src/db/sequences.js';
import { type ResourceCommand, resourceDecider, resourceStream } from '../../src/domain/fhir/resource.js';
import { allProjections } from '../../src/projections/index.js';
import { type ResourceQuery, readResource, searchResources } from '../../src/projections/resources.js';
import { ProjectionRunner } from '../../src/projections/runner/index.js';
import { testCommandContext } from '../support/commands.js';
import { closeAfterEach, openStore, testDatabases } from '../support/databases.js';
import { recordingSql } from '../support/sql.js';

const logger = pino({ level: 'silent' });
const NOW = '2026-03-01T10:00:00.000Z';
/** A batch: the functions of src/projections/sql/resources/003_batched_reads.sql. */
const isBatch = (text: string) =>
  text.includes('rm_resources_read_keys(') || text.includes('rm_resources_search_identifiers(');
const isRead = (text: string) => text.includes('FROM rm_resources');

for (const db of testDatabases) {
  describe(`batched reads by key on ${db.name}`, function () {
    this.timeout(60_000);
    const cleanups = closeAfterEach();

    const open = async () => {
      const { opened, store } = await openStore(db, cleanups);
      await migrateSequences(opened.sql);
      const runner = new ProjectionRunner(store, opened.sql, allProjections, logger);
      await runner.migrate();
      await runner.catchUp();
      cleanups.push(() => runner.stop());
      const ctx = (tenantId: number) => testCommandContext(store, opened.sql, [], { tenantId });
      /** Runs a resource command on Patient `id` of `tenantId`. */
      const patient = (tenantId: number, id: number, command: ResourceCommand) =>
        execute(ctx(tenantId), (uow) =>
          uow.decide(resourceStream('Patient', id), resourceDecider('Patient'), command, {
            fresh: command.type === 'CreateResource',
          }),
        );
      /** Creates a Patient of `tenantId` (with `mrn` as its identifier when given); returns its id. */
      const create = async (tenantId: number, family: string, mrn?: string) => {
        const id = await allocateId(opened.sql, 'Patient');
        await patient(tenantId, id, {
          type: 'CreateResource',
          id,
          tenantId,
          resource: {
            name: [{ family }],
            ...(mrn ? { identifier: [{ system: 'urn:mrn', value: mrn }] } : {}),
          },
          now: NOW,
        });
        return id;
      };
      return { sql: opened.sql, reopen: opened.reopen, create, patient };
    };

    /** What a read answers, in a form to compare. */
    const seen = (row: Awaited<ReturnType<typeof readResource>>) =>
      row && {
        id: row.id,
        tenantId: row.tenantId,
        versionId: row.versionId,
        deleted: row.deleted,
        family: (row.resource.name as { family: string }[])[0]?.family,
      };

    it('answers reads that arrive together in one statement, each as it would be alone', async () => {
      const { sql, create, patient } = await open();
      const ours = [await create(1, 'Ada'), await create(1, 'Grace'), await create(1, 'Edith')];
      const theirs = await create(2, 'Other');
      const deleted = await create(1, 'Gone');
      await patient(1, deleted, { type: 'DeleteResource', now: NOW });
      const missing = deleted + 1_000;
      const asked = [...ours, theirs, deleted, missing, ours[0]!, ...ours];
      // Each read alone, in a transaction (never batched).
      const alone = await sql.transaction(async (tx) => {
        const rows = [];
        for (const id of asked) rows.push(seen(await readResource(tx, 'Patient', id, 1)));
        return rows;
      });
      expect(alone.map((r) => r?.family)).to.deep.equal([
        'Ada',
        'Grace',
        'Edith',
        undefined, // another tenant's reads as missing
        'Gone',
        undefined,
        'Ada',
        'Ada',
        'Grace',
        'Edith',
      ]);
      expect(alone[4]).to.include({ deleted: true, versionId: 2 });

      const statements: string[] = [];
      const shared = recordingSql(statements)(sql);
      const together = await Promise.all(asked.map((id) => readResource(shared, 'Patient', id, 1)));
      expect(together.map(seen)).to.deep.equal(alone);
      // The first read goes at once, alone; the nine asked meanwhile go together in one statement.
      expect(statements.filter(isRead)).to.have.length(2);
      expect(statements.filter(isBatch)).to.have.length(1);
      // Its function keeps one plan per connection, as the search's (003_batched_reads.sql).
      const settings = await sql.query<{ name: string; config: string[] }>(
        `SELECT proname AS name, proconfig AS config FROM pg_proc
          WHERE proname IN ('rm_resources_read_keys', 'rm_resources_search_identifiers')
            AND pronamespace = current_schema()::regnamespace ORDER BY 1`,
      );
      expect(settings.map((p) => [p.name, p.config])).to.deep.equal([
        ['rm_resources_read_keys', ['plan_cache_mode=force_generic_plan']],
        ['rm_resources_search_identifiers', ['plan_cache_mode=force_generic_plan']],
      ]);
    });

    it('sends the reads of a transaction on their own', async () => {
      const { sql, create } = await open();
      const ids = [await create(1, 'Ada'), await create(1, 'Grace'), await create(1, 'Edith')];
      const statements: string[] = [];
      const rows = await recordingSql(statements)(sql).transaction((tx) =>
        Promise.all(ids.map((id) => readResource(tx, 'Patient', id, 1))),
      );
      expect(rows.map((r) => r?.id)).to.deep.equal(ids);
      expect(statements.filter(isRead)).to.have.length(3);
      expect(statements.filter(isBatch)).to.deep.equal([]);
    });

    it('shows a write to a read asked after it, while an earlier batch is still in flight', async () => {
      const { sql, create } = await open();
      const first = await create(1, 'Ada');
      let release: () => void = () => undefined;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      const statements: string[] = [];
      // The first read is held before it is sent; reads asked meanwhile wait for it.
      let holding = true;
      const shared = recordingSql(statements, async (text) => {
        if (holding && isRead(text)) {
          holding = false;
          await held;
        }
      })(sql);
      const inFlight = readResource(shared, 'Patient', first, 1);
      const created = await create(1, 'Grace');
      const later = readResource(shared, 'Patient', created, 1);
      release();
      expect(seen(await inFlight)?.family).to.equal('Ada');
      expect(seen(await later)?.family).to.equal('Grace');
    });

    it('shows a write acknowledged through one pool to reads and searches batched on another (another API replica)', async () => {
      const { create, reopen } = await open();
      const replica = await reopen(4);
      const before = await create(1, 'Ada', 'A-1');
      // Keep the replica's batchers busy while the other pool writes, then ask for the new resource.
      const busy = Array.from({ length: 20 }, () => readResource(replica, 'Patient', before, 1));
      const written = await create(1, 'Grace', 'G-1');
      const [read, searched] = await Promise.all([
        readResource(replica, 'Patient', written, 1),
        searchResources(replica, 'Patient', 1, {
          identifiers: [{ system: 'urn:mrn', value: 'G-1' }],
          limit: 2,
        }),
        ...busy,
      ]);
      expect(seen(read)?.family).to.equal('Grace');
      expect(searched.map((r) => r.id)).to.deep.equal([written]);
    });

    it('gives a read that cannot run its own error and the reads batched with it their rows', async () => {
      const { sql, create } = await open();
      const ids = [await create(1, 'Ada'), await create(1, 'Grace')];
      const results = await Promise.allSettled([
        readResource(sql, 'Patient', ids[0]!, 1),
        // Out of the integer range of ids: the batch it joins fails, and each read is sent again alone.
        readResource(sql, 'Patient', 2 ** 40, 1),
        readResource(sql, 'Patient', ids[1]!, 1),
        readResource(sql, 'Patient', ids[0]!, 1),
      ]);
      expect(results.map((r) => r.status)).to.deep.equal(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
      expect(results.map((r) => (r.status === 'fulfilled' ? r.value?.id : undefined))).to.deep.equal([
        ids[0],
        undefined,
        ids[1],
        ids[0],
      ]);
    });

    it('answers searches by one identifier that arrive together in one statement, each as it would be alone', async () => {
      const { sql, create, patient } = await open();
      const ada = await create(1, 'Ada', 'A-1');
      const twinA = await create(1, 'Twin', 'T-1');
      const twinB = await create(1, 'Twin', 'T-1');
      await create(2, 'Other', 'A-1'); // the same identifier in another tenant
      const gone = await create(1, 'Gone', 'G-1');
      await patient(1, gone, { type: 'DeleteResource', now: NOW });
      const byMrn = (value: string, limit = 10, tenantId = 1) => ({
        tenantId,
        query: { identifiers: [{ system: 'urn:mrn', value }], limit } satisfies ResourceQuery,
      });
      const asked = [
        byMrn('A-1'),
        byMrn('T-1'),
        byMrn('T-1', 1), // one page of one: the lower id only
        byMrn('G-1'), // deleted: not found
        byMrn('none'),
        byMrn('A-1', 10, 2),
        byMrn('A-1'),
      ];
      const found = (rows: Awaited<ReturnType<typeof searchResources>>) =>
        rows.map((r) => ({ id: r.id, tenantId: r.tenantId, key: r.key, family: seen(r)?.family }));
      const alone = await sql.transaction(async (tx) => {
        const all = [];
        for (const { tenantId, query } of asked)
          all.push(found(await searchResources(tx, 'Patient', tenantId, query)));
        return all;
      });
      expect(alone.map((rows) => rows.map((r) => r.id))).to.deep.equal([
        [ada],
        [twinA, twinB],
        [twinA],
        [],
        [],
        [ada + 3], // the other tenant's (created fourth)
        [ada],
      ]);
      expect(alone[1]![0]!.key).to.deep.equal({ value: String(twinA), id: twinA });

      const statements: string[] = [];
      const shared = recordingSql(statements)(sql);
      const together = await Promise.all(
        asked.map(({ tenantId, query }) => searchResources(shared, 'Patient', tenantId, query)),
      );
      expect(together.map(found)).to.deep.equal(alone);
      const searches = statements.filter(
        (text) =>
          text.includes('rm_resource_identifiers') || text.includes('rm_resources_search_identifiers('),
      );
      // The first search goes at once, alone; the six asked meanwhile go together.
      expect(searches).to.have.length(2);
      expect(searches.filter(isBatch)).to.have.length(1);
    });

    it('searches by anything else than one system|value identifier on their own', async () => {
      const { sql, create } = await open();
      await create(1, 'Ada', 'A-1');
      const statements: string[] = [];
      const shared = recordingSql(statements)(sql);
      const queries: ResourceQuery[] = [
        { identifiers: [{ system: undefined, value: 'A-1' }], limit: 10 },
        {
          identifiers: [{ system: 'urn:mrn', value: 'A-1' }],
          sort: { by: '_id', descending: true },
          limit: 10,
        },
        {
          identifiers: [
            { system: 'urn:mrn', value: 'A-1' },
            { system: 'urn:mrn', value: 'B-1' },
          ],
          limit: 10,
        },
      ];
      const rows = await Promise.all(queries.map((query) => searchResources(shared, 'Patient', 1, query)));
      expect(rows.map((r) => r.length)).to.deep.equal([1, 1, 1]);
      expect(statements.filter(isBatch)).to.deep.equal([]);
      expect(statements).to.have.length(3);
    });
  });
}
