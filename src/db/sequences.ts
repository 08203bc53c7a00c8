/**
 * Id sequences (docs/architecture.md "Ids"): the integer ids of tenants, sessions and FHIR
 * resources come from Postgres sequences in the read-model database. Sequences are not read
 * models: a rebuild never drops them, and catching up moves them past every id in the log.
 */
import type { Sql } from './sql.js';

export const ID_SEQUENCES = [
  'tenant',
  'session',
  'Patient',
  'Encounter',
  'Practitioner',
  'Task',
  'Questionnaire',
  'QuestionnaireResponse',
  'ValueSet',
] as const;
export type IdKind = (typeof ID_SEQUENCES)[number];

export const sequenceName = (kind: IdKind): string => `casebook_${kind.toLowerCase()}_id_seq`;

/** Creates the id sequences if missing. */
export const migrateSequences = async (sql: Sql): Promise<void> => {
  for (const kind of ID_SEQUENCES) await sql.exec(`CREATE SEQUENCE IF NOT EXISTS ${sequenceName(kind)}`);
};

/** Allocates the next integer id of `kind` from its sequence (one round trip). */
export const allocateId = async (sql: Sql, kind: IdKind): Promise<number> => {
  const rows = await sql.query<{ id: string }>(`SELECT nextval('${sequenceName(kind)}')::text AS id`);
  return Number(rows[0]!.id);
};

/**
 * Moves the sequence of `kind` past `id` (never backwards), so ids allocated after a rebuild into a
 * fresh database, or next to a KurrentDB log, never collide with ids already in the log.
 */
export const bumpSequence = async (tx: Sql, kind: IdKind, id: number): Promise<void> => {
  const seq = sequenceName(kind);
  await tx.query(`SELECT setval('${seq}', GREATEST($1::bigint, (SELECT last_value FROM ${seq})))`, [id]);
};
