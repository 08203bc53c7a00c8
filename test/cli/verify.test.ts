/**
 * `casebook verify` as an operator runs it (issue 14): a real process on the Postgres server, its
 * exit code and what it prints.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { PostgresSql } from '../../src/db/sql.js';
import { POSTGRES_TEST_URL } from '../support/databases.js';
import { cli, type RunningServer, startServer } from '../support/process.js';

describe('casebook verify on the Postgres server', function () {
  this.timeout(120_000);
  const schema = `v_${randomBytes(5).toString('hex')}`;
  const url = new URL(POSTGRES_TEST_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const env = { DATABASE_URL: url.toString() };
  const dir = mkdtempSync(join(tmpdir(), 'casebook-verify-'));
  let admin: PostgresSql;
  const failure = (args: string[]) =>
    cli(args, env).then(
      (out) => `0: ${out}`,
      (error: { code: number; stderr: string }) => `${error.code}: ${error.stderr}`,
    );

  before(async () => {
    admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1, searchPath: schema });
    await admin.exec(`CREATE SCHEMA ${schema}`);
  });
  after(async () => {
    rmSync(dir, { recursive: true, force: true });
    await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.close();
  });

  it('seals and verifies an untouched log, prints a head, then names the position of an edit (exit 1)', async () => {
    await cli(['tenants', 'create', '--name', 'Verify Hospital'], env);
    await cli(['tenants', 'create', '--name', 'Second Hospital'], env);
    const ok = await cli(['verify', '--seal'], env);
    expect(ok).to.match(
      // Two tenants (a name reservation and a creation each) and the new store's identifier hashing.
      /^verified 5 events \(5 sealed, 0 not yet sealed\); head \d+\/\d+ hash [0-9a-f]{64}\n$/,
    );
    const head = JSON.parse(await cli(['verify', '--head'], env));
    expect(head).to.have.keys('position', 'hash', 'events', 'time');
    expect(ok).to.include(head.hash);
    const headFile = join(dir, 'head.json');
    writeFileSync(headFile, JSON.stringify(head));
    expect(await cli(['verify', '--against', headFile], env)).to.match(/^verified: the log extends the head/);

    const [target] = await admin.query<{ position: string; transaction_id: string }>(
      `SELECT transaction_id::text, position::text FROM es_events WHERE type = 'TenantCreated' AND data->>'name' = 'Second Hospital'`,
    );
    await admin.exec(
      `UPDATE es_events SET data = '{"id":2,"name":"Forged Hospital"}'::json WHERE type = 'TenantCreated' AND data->>'name' = 'Second Hospital'`,
    );
    const at = `${target!.transaction_id}/${target!.position}`;
    expect(await failure(['verify'])).to.match(
      new RegExp(`^1: casebook verify: altered at position ${at}: `),
    );
    // The intruder recomputes leaves and seals: verify passes, the head kept outside does not.
    await admin.exec(`DELETE FROM es_seal_leaves; DELETE FROM es_seals;`);
    expect(await cli(['verify', '--seal'], env)).to.match(/^verified 5 events/);
    expect(await failure(['verify', '--against', headFile])).to.match(
      new RegExp(
        `^1: casebook verify: head at position ${head.position}: the events up to the head no longer hash to it`,
      ),
    );
  });
});

const LOAD_CLIENT = `Basic ${Buffer.from('load-ehr:load-secret-0123456789').toString('base64')}`;

/**
 * Issue 33: a clean log verifies, whatever its positions and transaction ids. A real server takes a
 * 60-entry transaction Bundle, then 20 writers and 20 audited readers, and is killed (SIGKILL)
 * halfway through; `casebook verify` then exits 0, before and after sealing the rest, and
 * `verify --head` counts every event. On PGlite the CLI runs once the server is gone (one process
 * owns the data directory).
 */
for (const store of ['postgres', 'pglite'] as const) {
  describe(`casebook verify after a load and a kill -9 (${store})`, function () {
    this.timeout(300_000);
    const schema = `v_${randomBytes(5).toString('hex')}`;
    const dir = mkdtempSync(join(tmpdir(), 'casebook-verify-load-'));
    let admin: PostgresSql | undefined;
    let server: RunningServer | undefined;
    let env: Record<string, string>;

    before(async () => {
      const seedFile = join(dir, 'seed.json');
      writeFileSync(
        seedFile,
        JSON.stringify({
          tenants: [
            {
              name: 'Load Hospital',
              allowed_scopes: 'user/*.* patient/*.*',
              clients: [
                {
                  client_id: 'load-ehr',
                  client_secret: 'load-secret-0123456789',
                  scopes: 'system/*.*',
                  projects: [],
                },
              ],
            },
          ],
        }),
      );
      if (store === 'postgres') {
        admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
        await admin.exec(`CREATE SCHEMA ${schema}`);
        const url = new URL(POSTGRES_TEST_URL);
        url.searchParams.set('options', `-c search_path=${schema}`);
        env = { DATABASE_URL: url.toString(), CASEBOOK_SEED: seedFile };
      } else env = { DATA_DIR: join(dir, 'data'), CASEBOOK_SEED: seedFile };
    });
    after(async () => {
      await server?.kill();
      if (admin) {
        await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await admin.close();
      }
      rmSync(dir, { recursive: true, force: true });
    });

    it('exits 0 on the untouched log, and --head counts every event', async () => {
      server = await startServer(env);
      const fhirBase = `http://127.0.0.1:${server.port}/fhir/r5`;
      const send = (method: string, path: string, body?: unknown) =>
        fetch(`${fhirBase}${path}`, {
          method,
          headers: {
            Authorization: LOAD_CLIENT,
            Accept: 'application/fhir+json',
            ...(body ? { 'Content-Type': 'application/fhir+json' } : {}),
          },
          ...(body ? { body: JSON.stringify(body) } : {}),
        });
      const patient = (value: string) => ({
        resourceType: 'Patient',
        identifier: [{ system: 'urn:load:mrn', value }],
      });
      // The issue's own case on PostgreSQL: one transaction of 60 entries (positions 9 → 10, 99 → 100).
      const bundle = await send('POST', '/', {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: Array.from({ length: 60 }, (_, i) => ({
          resource: patient(`bundle-${i}`),
          request: { method: 'POST', url: 'Patient' },
        })),
      });
      expect(bundle.status).to.equal(200);
      const read = (await (await send('POST', '/Patient', patient('read-me'))).json()) as { id: string };

      let alive = true;
      const statuses = new Map<number, number>();
      const count = (status: number) => statuses.set(status, (statuses.get(status) ?? 0) + 1);
      const loop = async (request: (i: number) => Promise<Response>) => {
        for (let i = 0; alive; i++) {
          try {
            const res = await request(i);
            await res.arrayBuffer();
            if (alive) count(res.status);
          } catch {
            return; // the server was killed
          }
        }
      };
      const load = [
        ...Array.from({ length: 20 }, (_, w) => loop((i) => send('POST', '/Patient', patient(`w${w}-${i}`)))),
        ...Array.from({ length: 20 }, () => loop(() => send('GET', `/Patient/${read.id}`))),
      ];
      await new Promise((r) => setTimeout(r, 4000));
      await server.kill();
      alive = false;
      await Promise.all(load);
      server = undefined;
      expect([...statuses.keys()].sort(), JSON.stringify([...statuses])).to.deep.equal([200, 201]);
      expect(statuses.get(201)).to.be.greaterThan(20);

      // Unsealed events recorded just now are not a problem; the sealed ones cross powers of ten.
      expect(await cli(['verify'], env)).to.match(/^verified \d+ events \(\d+ sealed, \d+ not yet sealed\)/);
      const sealed = await cli(['verify', '--seal'], env);
      const [, events] = /^verified (\d+) events \(\1 sealed, 0 not yet sealed\)/.exec(sealed) ?? [];
      expect(Number(events), sealed).to.be.greaterThan(100);
      const head = JSON.parse(await cli(['verify', '--head'], env));
      expect(head.events).to.equal(Number(events));
      expect(head.position).to.match(/^\d+\/\d+$/);
      if (admin) {
        const [row] = await admin.query<{ n: string; last: string }>(
          `SELECT count(*)::text AS n, max(position)::text AS last FROM ${schema}.es_events`,
        );
        expect(Number(row!.n)).to.equal(head.events);
        expect(Number(row!.last)).to.be.greaterThan(1000);
      }
      expect(await cli(['verify', '--against', JSON.stringify(head)], env)).to.match(
        /^verified: the log extends the head/,
      );
    });
  });
}
