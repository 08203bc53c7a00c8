/**
 * The PostgreSQL handle's pool (src/db/sql.ts `PostgresSql`): a statement the server refuses keeps
 * its connection (pg-pool's own `query` closed it, and every refused statement paid for a new
 * connection); a connection the server ends is replaced, and its loss crashes nothing.
 */
import { expect } from 'chai';
import { isDatabaseUnavailable, PgliteSql, PostgresSql, timestampText } from '../../src/db/sql.js';
import { POSTGRES_TEST_URL, testDatabases } from '../support/databases.js';

describe('PostgreSQL pool connections', function () {
  this.timeout(30_000);
  let sql: PostgresSql;
  let admin: PostgresSql;
  beforeEach(() => {
    sql = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
    admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
  });
  afterEach(async () => {
    await sql.close();
    await admin.close();
  });

  const pid = async () =>
    Number((await sql.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]?.pid);
  const connections = async (applicationPid: number) =>
    Number(
      (
        await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [
          applicationPid,
        ])
      )[0]?.n,
    );

  it('keeps the connection of a statement the server refused, parameterised or not', async () => {
    const before = await pid();
    const refused = await sql.query('SELECT 1 / $1::int AS x', [0]).catch((e: unknown) => e);
    expect(refused).to.have.property('code', '22012');
    const raised = await sql
      .exec(`DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'CBW01', MESSAGE = 'wrong expected version'; END $$`)
      .catch((e: unknown) => e);
    expect(raised).to.have.property('code', 'CBW01');
    expect(await pid()).to.equal(before);
    expect(await connections(before)).to.equal(1);
    // The connection is idle again, not in a failed transaction.
    expect(await sql.query('SELECT 2 AS x')).to.deep.equal([{ x: 2 }]);
  });

  it('replaces a connection the server ended, without crashing', async () => {
    const before = await pid();
    const ended = await sql.query('SELECT pg_terminate_backend(pg_backend_pid())').catch((e: unknown) => e);
    expect(ended).to.be.instanceOf(Error);
    const after = await pid();
    expect(after).to.not.equal(before);
    expect(await sql.query('SELECT 3 AS x')).to.deep.equal([{ x: 3 }]);
  });

  /** Ends `backend` from the other pool and waits until the server has let it go. */
  const terminate = async (backend: number) => {
    await admin.query('SELECT pg_terminate_backend($1)', [backend]);
    for (let i = 0; i < 50 && (await connections(backend)) > 0; i++)
      await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 50)); // the client's error event
  };

  it('survives a held connection the server ends between two statements, and never hands it out again', async () => {
    let held = 0;
    const outcome = await sql
      .withConnection(async (conn) => {
        held = Number((await conn.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]?.pid);
        await terminate(held); // while idle and checked out: an error event, no query to take it
        return conn.query('SELECT 1 AS x');
      })
      .catch((e: unknown) => e);
    expect(outcome).to.be.instanceOf(Error);
    expect(await connections(held)).to.equal(0);
    const after = await pid();
    expect(after).to.not.equal(held);
    expect(await sql.query('SELECT 4 AS x')).to.deep.equal([{ x: 4 }]);
  });

  it('closes a connection whose transaction could not be rolled back, so no caller inherits it', async () => {
    let held = 0;
    const outcome = await sql
      .transaction(async (tx) => {
        held = Number((await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]?.pid);
        await tx.query('CREATE TEMP TABLE casebook_sql_test (x int)');
        await terminate(held);
        throw new Error('the command failed');
      })
      .catch((e: unknown) => e);
    expect((outcome as Error).message).to.equal('the command failed');
    expect(await pid()).to.not.equal(held);
    expect(await sql.query('SELECT 5 AS x')).to.deep.equal([{ x: 5 }]);
  });

  it('keeps a held connection after an error of the code that held it, or a statement refused in it', async () => {
    const before = await pid();
    const thrown = await sql
      .withConnection(async (conn) => {
        await conn.query('SELECT 1 AS x');
        throw new TypeError('a bug in the caller');
      })
      .catch((e: unknown) => e);
    expect(thrown).to.be.instanceOf(TypeError);
    const refused = await sql
      .transaction(async (tx) => {
        await tx.query('SELECT 1 / $1::int AS x', [0]);
      })
      .catch((e: unknown) => e);
    expect(refused).to.have.property('code', '22012');
    expect(await pid()).to.equal(before);
    // Idle again, not inside the failed transaction.
    expect(await sql.query<{ open: boolean }>(`SELECT now() = statement_timestamp() AS open`)).to.deep.equal([
      { open: true },
    ]);
  });
});

describe('isDatabaseUnavailable: what the db layer calls a lost database (issue 33)', function () {
  this.timeout(30_000);

  it('names a terminated connection, a closed pool, a server out of reach and a closed PGlite; not a refused statement', async () => {
    const sql = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
    try {
      const terminated = await sql
        .query('SELECT pg_terminate_backend(pg_backend_pid())')
        .catch((e: unknown) => e);
      expect(isDatabaseUnavailable(terminated), String(terminated)).to.equal(true);
      const refused = await sql.query('SELECT 1 / $1::int AS x', [0]).catch((e: unknown) => e);
      expect(refused).to.have.property('code', '22012');
      expect(isDatabaseUnavailable(refused)).to.equal(false);
      const syntax = await sql.query('SELEC 1').catch((e: unknown) => e);
      expect(isDatabaseUnavailable(syntax)).to.equal(false);
    } finally {
      await sql.close();
    }
    const ended = await sql.query('SELECT 1').catch((e: unknown) => e);
    expect(isDatabaseUnavailable(ended), String(ended)).to.equal(true);

    // Nothing listens on port 1: the pool cannot connect.
    const nowhere = new PostgresSql('postgres://postgres@127.0.0.1:1/test', { max: 1 });
    try {
      const unreachable = await nowhere.query('SELECT 1').catch((e: unknown) => e);
      expect(isDatabaseUnavailable(unreachable), String(unreachable)).to.equal(true);
      // Wrapped by the code above the db layer, it is still a lost database.
      expect(isDatabaseUnavailable(new Error('append failed', { cause: unreachable }))).to.equal(true);
      expect(isDatabaseUnavailable(new AggregateError([new Error('x'), unreachable]))).to.equal(true);
    } finally {
      await nowhere.close();
    }

    const pglite = await PgliteSql.open();
    await pglite.close();
    const closed = await pglite.query('SELECT 1').catch((e: unknown) => e);
    expect(isDatabaseUnavailable(closed), String(closed)).to.equal(true);

    for (const other of [new TypeError('a bug'), new Error('no such row'), undefined, 'text', { code: 42 }])
      expect(isDatabaseUnavailable(other), String(other)).to.equal(false);
  });
});

describe('timestampText: instants as PostgreSQL reads them (issue 33)', () => {
  for (const database of testDatabases)
    it(`gives every bound a FHIR date search can have as a timestamptz ${database.name} reads back (${database.name})`, async () => {
      const opened = await database.open();
      try {
        for (const [instant, expected] of [
          ['2026-03-01T10:00:00.000Z', '2026-03-01 10:00:00'],
          ['0001-01-01T00:00:00.000Z', '0001-01-01 00:00:00'],
          // 0001-01-01T00:00+14:00: the day before year 1 is 1 BC (toISOString writes year 0000).
          ['0001-01-01T00:00:00.000+14:00', '0001-12-31 10:00:00 BC'],
          // The end of 9999-12-31 (toISOString writes +010000).
          ['9999-12-31T24:00:00.000Z', '10000-01-01 00:00:00'],
        ] as const) {
          const text = timestampText(new Date(instant));
          const [row] = await opened.sql.query<{ t: string }>(
            `SELECT to_char($1::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS BC') AS t`,
            [text],
          );
          expect(row?.t.replace(/ AD$/, ''), instant).to.equal(expected);
        }
      } finally {
        await opened.dispose();
      }
    });
});
