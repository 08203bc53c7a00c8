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
import { cli } from '../support/process.js';

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
      /^verified 4 events \(4 sealed, 0 not yet sealed\); head \d+\/\d+ hash [0-9a-f]{64}\n$/,
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
    expect(await cli(['verify', '--seal'], env)).to.match(/^verified 4 events/);
    expect(await failure(['verify', '--against', headFile])).to.match(
      new RegExp(
        `^1: casebook verify: head at position ${head.position}: the events up to the head no longer hash to it`,
      ),
    );
  });
});
