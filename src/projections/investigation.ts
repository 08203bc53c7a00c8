/**
 * Read models as they stood at a point in time (issue 14; `casebook replay --until`): every
 * projection built from the log up to an instant or a position, into a separate schema of the same
 * database, for an investigation. The live read models are not touched.
 */
import pino from 'pino';
import { quoteIdentifier, type Sql, withSearchPath } from '../db/sql.js';
import type { EventStore, Position } from '../eventstore/port.js';
import { allProjections } from './index.js';
import { ProjectionRunner } from './runner/index.js';

const SCHEMA = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Builds the read models of `casebook`'s log up to `until` into `schema` (created; it must not
 * hold read models already). `casebook` is the log and its read-model database (the composition
 * root, src/casebook.ts, is one; projections sit below it, docs/architecture.md "Layers").
 * @returns the number of events applied.
 * @throws {Error} for a schema name that is not a plain lower-case identifier, or one in use.
 */
export const replayUntil = async (
  casebook: { readonly store: EventStore; readonly sql: Sql },
  schema: string,
  until: Date | Position,
  onProgress?: (read: number, position: Position) => void,
): Promise<number> => {
  if (!SCHEMA.test(schema))
    throw new Error(`--into must be a lower-case identifier, not ${JSON.stringify(schema)}`);
  const { sql } = casebook;
  const [{ current }] = (await sql.query<{ current: string }>(`SELECT current_schema() AS current`)) as [
    { current: string },
  ];
  if (schema === current) throw new Error(`--into must name another schema than the live one (${current})`);
  const [taken] = await sql.query(
    `SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'projection_state'`,
    [schema],
  );
  if (taken) throw new Error(`schema ${schema} already holds read models: choose another with --into`);
  await sql.exec(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  // Reads of the log resolve to the live schema (the target has no es_ tables); read-model tables
  // are created and written in the target, the first schema of the path.
  const [{ path }] = (await sql.query<{ path: string }>(`SELECT current_setting('search_path') AS path`)) as [
    { path: string },
  ];
  const target = withSearchPath(sql, `${quoteIdentifier(schema)}, ${path}`);
  const runner = new ProjectionRunner(casebook.store, target, allProjections, pino({ level: 'silent' }), {
    mode: 'async',
  });
  return runner.buildUntil(until, onProgress);
};
