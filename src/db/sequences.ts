/**
 * Id sequences (docs/architecture.md "Ids"): the integer ids of tenants, sessions and FHIR
 * resources come from Postgres sequences in the read-model database. Sequences are not read
 * models: a rebuild never drops them, and catching up moves them past every id in the log.
 */

import { CLINICAL_TYPES } from '../domain/fhir/resource.js';
import { migrate, migrationsIn } from './migrations.js';
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
  ...CLINICAL_TYPES,
] as const;
export type IdKind = (typeof ID_SEQUENCES)[number];

export const sequenceName = (kind: IdKind): string => `casebook_${kind.toLowerCase()}_id_seq`;

/**
 * Brings the id sequences in the current schema to the last version of src/db/sql/id-sequences/
 * (component `id-sequences`; docs/architecture.md "Ids", "Schema migrations"): one sequence per
 * kind of {@link ID_SEQUENCES}. Idempotent.
 * @throws what a failing migration throws (its transaction is rolled back).
 */
export const migrateSequences = async (sql: Sql): Promise<void> => {
  await migrate(sql, 'id-sequences', migrationsIn(new URL('./sql/id-sequences/', import.meta.url)));
};

/** Ids of one kind being allocated on one database: the round trip in flight and who waits for the next. */
interface AllocationQueue {
  inFlight: boolean;
  waiting: { resolve: (id: number) => void; reject: (error: unknown) => void }[];
}

/** Most ids one round trip allocates. */
const MAX_IDS_PER_ROUND_TRIP = 256;
const queues = new WeakMap<Sql, Map<IdKind, AllocationQueue>>();

/**
 * Allocates the next integer id of `kind` from its sequence. Allocations asked for while one is
 * in flight share the next round trip (`nextval` over `generate_series`), in the order they were
 * asked, as the audit trail's group commit shares an append: under 20 concurrent creates this
 * saves most of a round trip each; one at a time it allocates just that id, and no id is
 * held back (a restart leaves no gap).
 * @throws what the query threw (the database is unreachable…).
 */
export const allocateId = (sql: Sql, kind: IdKind): Promise<number> =>
  new Promise<number>((resolve, reject) => {
    const byKind = queues.get(sql) ?? new Map<IdKind, AllocationQueue>();
    queues.set(sql, byKind);
    const queue = byKind.get(kind) ?? { inFlight: false, waiting: [] };
    byKind.set(kind, queue);
    queue.waiting.push({ resolve, reject });
    if (!queue.inFlight) void drainAllocations(sql, kind, queue);
  });

const drainAllocations = async (sql: Sql, kind: IdKind, queue: AllocationQueue): Promise<void> => {
  queue.inFlight = true;
  try {
    while (queue.waiting.length > 0) {
      const batch = queue.waiting.splice(0, MAX_IDS_PER_ROUND_TRIP);
      try {
        const rows = await sql.query<{ id: string }>(
          `SELECT nextval('${sequenceName(kind)}') AS id FROM generate_series(1, $1::int) ORDER BY 1`,
          [batch.length],
        );
        for (const [i, waiter] of batch.entries()) waiter.resolve(Number(rows[i]!.id));
      } catch (error) {
        for (const waiter of batch) waiter.reject(error);
      }
    }
  } finally {
    queue.inFlight = false;
  }
};

/**
 * Moves the sequence of `kind` past `id` (never backwards), so ids allocated after a rebuild into a
 * fresh database, or next to a KurrentDB log, never collide with ids already in the log.
 */
export const bumpSequence = async (tx: Sql, kind: IdKind, id: number): Promise<void> => {
  const seq = sequenceName(kind);
  await tx.query(`SELECT setval('${seq}', GREATEST($1::bigint, (SELECT last_value FROM ${seq})))`, [id]);
};
