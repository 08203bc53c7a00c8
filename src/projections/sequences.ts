import { type IdKind, sequenceName } from '../commands/context.js';
import type { Sql } from '../db/sql.js';

/**
 * Moves an id sequence past `id`, so ids allocated after a replay into a fresh database (or from a
 * KurrentDB log) never collide with ids already in the log.
 */
export const bumpSequence = async (tx: Sql, kind: IdKind, id: number): Promise<void> => {
  const seq = sequenceName(kind);
  await tx.query(`SELECT setval('${seq}', GREATEST($1::bigint, (SELECT last_value FROM ${seq})))`, [id]);
};
