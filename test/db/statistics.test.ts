/**
 * Planner statistics of casebook's tables (src/db/statistics.ts): where autovacuum does not keep
 * them (PGlite; a server with it off, as the test server is), a table that changed by more than
 * 50 rows + 10 % since its last analyze is analyzed, and a search on it gets index plans.
 */
import { expect } from 'chai';
import { analyzeStaleTables } from '../../src/db/statistics.js';
import { testDatabases } from '../support/databases.js';

for (const database of testDatabases)
  describe(`planner statistics on ${database.name}`, function () {
    this.timeout(30_000);

    it('analyzes a table that grew since its last analyze, once, and leaves a small change alone', async () => {
      const { sql, dispose } = await database.open();
      try {
        await sql.exec(
          `CREATE TABLE stats_probe (id integer PRIMARY KEY, tenant integer NOT NULL, value text NOT NULL)`,
        );
        await sql.exec(`CREATE INDEX stats_probe_value ON stats_probe (value)`);
        await sql.exec(`INSERT INTO stats_probe SELECT g, 1, 'v' || g FROM generate_series(1, 3000) g`);
        // The server's counters reach pg_stat_user_tables within a second or so of the commit.
        let analyzed: string[] = [];
        for (let i = 0; i < 40 && !analyzed.includes('stats_probe'); i++) {
          await new Promise((resolve) => setTimeout(resolve, 250));
          analyzed = await analyzeStaleTables(sql);
        }
        expect(analyzed).to.include('stats_probe');
        const [stats] = await sql.query<{ analyzed: boolean; tuples: number }>(
          `SELECT last_analyze IS NOT NULL AS analyzed, (SELECT reltuples::int FROM pg_class WHERE relname = 'stats_probe' AND relnamespace = to_regnamespace(current_schema())) AS tuples
             FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'stats_probe'`,
        );
        expect(stats).to.deep.equal({ analyzed: true, tuples: 3000 });
        // Analyzed: nothing to do until it changes by more than 50 + 10 %.
        expect(await analyzeStaleTables(sql)).to.not.include('stats_probe');
        await sql.exec(`UPDATE stats_probe SET value = value || 'x' WHERE id <= 100`);
        await new Promise((resolve) => setTimeout(resolve, 1500));
        await sql.query(`SELECT 1`);
        expect(await analyzeStaleTables(sql)).to.not.include('stats_probe');
      } finally {
        await dispose();
      }
    });
  });
