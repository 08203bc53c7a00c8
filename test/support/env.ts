/**
 * The environment every test process starts with (mocha `require`, before any test file): the
 * key-encryption key that casebook processes the tests spawn on PostgreSQL need
 * (docs/architecture.md "Erasure"; a server on PostgreSQL refuses to start without one). A fixed
 * test key, so that processes started one after another open the same key store; never a real one.
 */
process.env.CASEBOOK_KEK ??= 'wbPn6jMPLOBvrD38rkCBmUH0bQ+Z+Sp2P6wALmFR60M=';

/**
 * After the whole run (a mocha root hook): the key stores that casebook processes made beside
 * test schemas (`<schema>_keys`, src/eventstore/shredding/sql-key-store.ts) whose schema the test
 * has dropped. Never `casebook_keys` (beside `public`: a developer's own server on this database).
 * Without a reachable server (the unit tests) it does nothing.
 */
export const mochaHooks = {
  async afterAll(): Promise<void> {
    const { PostgresSql } = await import('../../src/db/sql.js');
    const sql = new PostgresSql(process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', {
      max: 1,
    });
    try {
      const orphans = await sql.query<{ name: string }>(
        `SELECT k.nspname AS name FROM pg_namespace k
          WHERE k.nspname LIKE '%\\_keys' AND k.nspname <> 'casebook_keys'
            AND NOT EXISTS (SELECT 1 FROM pg_namespace s WHERE s.nspname = left(k.nspname, -5))`,
      );
      for (const { name } of orphans) await sql.exec(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
    } catch {
      // No server: nothing was made there.
    } finally {
      await sql.close().catch(() => undefined);
    }
  },
};
