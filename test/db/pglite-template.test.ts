/**
 * The empty-cluster template of the embedded default (docs/architecture.md "Embedded start"): a
 * fresh PGlite data directory is a file copy of a cluster initialised once per PGlite version in a
 * child process, so the server opens it as an existing directory.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { templatePath } from '../../src/db/pglite-template.js';
import { PgliteSql } from '../../src/db/sql.js';

describe('PGlite empty-cluster template', function () {
  this.timeout(120_000);
  let root: string;
  let cache: string | undefined;

  before(() => {
    root = mkdtempSync(join(tmpdir(), 'casebook-template-test-'));
    cache = process.env.XDG_CACHE_HOME;
    process.env.XDG_CACHE_HOME = join(root, 'cache');
  });
  after(() => {
    if (cache === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = cache;
    rmSync(root, { recursive: true, force: true });
  });

  /** Opens `dataDir`, writes and reads a row, closes. */
  const roundTrip = async (dataDir: string, value: string) => {
    const sql = await PgliteSql.open(dataDir);
    try {
      await sql.exec(`CREATE TABLE IF NOT EXISTS t (v text)`);
      await sql.query(`INSERT INTO t VALUES ($1)`, [value]);
      return (await sql.query<{ v: string }>(`SELECT v FROM t ORDER BY v`)).map((r) => r.v);
    } finally {
      await sql.close();
    }
  };

  it('makes the template once, then starts every fresh directory as a copy of it', async () => {
    const template = templatePath();
    expect(template.startsWith(join(root, 'cache', 'casebook'))).to.equal(true);
    expect(existsSync(template)).to.equal(false);

    const first = join(root, 'first');
    expect(await roundTrip(first, 'a')).to.deep.equal(['a']);
    expect(existsSync(join(template, 'PG_VERSION'))).to.equal(true);
    const made = statSync(join(template, 'PG_VERSION')).mtimeMs;
    // No temporary directory of the child is left beside it.
    expect(readdirSync(join(root, 'cache', 'casebook'))).to.deep.equal([template.split('/').at(-1)]);

    // A second fresh directory (existing but empty) is a copy of the same, untouched template.
    const second = join(root, 'second');
    mkdirSync(second);
    expect(await roundTrip(second, 'b')).to.deep.equal(['b']);
    expect(statSync(join(template, 'PG_VERSION')).mtimeMs).to.equal(made);
    // The directories keep their own data; the template holds none of it.
    expect(await roundTrip(first, 'c')).to.deep.equal(['a', 'c']);
    const fresh = join(root, 'third');
    expect(await roundTrip(fresh, 'd')).to.deep.equal(['d']);
  });

  it('copies again over a copy cut short (its top-level PG_VERSION, copied last, is missing)', async () => {
    const dataDir = join(root, 'cut-short');
    expect(await roundTrip(dataDir, 'x')).to.deep.equal(['x']);
    // What a kill during the copy leaves: the files, but not the marker.
    const cut = join(root, 'cut-short-2');
    expect(await roundTrip(cut, 'y')).to.deep.equal(['y']);
    unlinkSync(join(cut, 'PG_VERSION'));
    expect(await roundTrip(cut, 'z')).to.include('z');
  });
});

describe('in-memory PGlite', function () {
  this.timeout(120_000);

  it('opens every in-memory cluster empty and on its own, the later ones loaded from a tarball', async () => {
    const opened: PgliteSql[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const sql = await PgliteSql.open();
        opened.push(sql);
        // What an earlier cluster holds is not in this one: each starts as initdb left it.
        const tables = await sql.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'`,
        );
        expect(tables[0]!.n, `cluster ${i + 1}`).to.equal(0);
        await sql.exec(`CREATE TABLE t${i} (v text); INSERT INTO t${i} VALUES ('${i}')`);
        const [db] = await sql.query<{ name: string; encoding: string }>(
          `SELECT current_database() AS name, pg_encoding_to_char(encoding) AS encoding
             FROM pg_database WHERE datname = current_database()`,
        );
        expect(db).to.deep.equal({ name: 'postgres', encoding: 'UTF8' });
      }
      // The first still holds its own table, unaffected by the others.
      expect(await opened[0]!.query(`SELECT v FROM t0`)).to.deep.equal([{ v: '0' }]);
    } finally {
      for (const sql of opened) await sql.close();
    }
  });
});
