/** The read models' tables as data, to compare them before and after a change of the server. */
import type { Sql } from '../../src/db/sql.js';

/** Every row of `table` as JSON text, sorted (the AuditEvent view without its numbering). */
export const dumpTable = async (sql: Sql, table: string): Promise<string[]> => {
  const rows = await sql.query<{ r: string }>(
    table === 'rm_audit_events'
      ? `SELECT (to_jsonb(t) - 'seq')::text AS r FROM ${table} t`
      : `SELECT to_jsonb(t)::text AS r FROM ${table} t`,
  );
  return rows.map((row) => row.r).sort();
};

/** The table's identity: a rebuild that swapped it in gives it a new one. */
export const oidOf = async (sql: Sql, table: string): Promise<string> =>
  (await sql.query<{ oid: string }>(`SELECT $1::regclass::oid::text AS oid`, [table]))[0]!.oid;
