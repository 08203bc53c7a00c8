/**
 * The tamper-evident log (docs/architecture.md "Tamper-evident log"; issue 14): every event of
 * `$all`, in order, is hashed into a chain, and the chain is sealed in batches.
 *
 * - The **leaf** of an event is SHA-256 of the RFC 8785 canonical JSON of
 *   `{position, id, stream, revision, type, data, metadata}` (`canonicalize`): the event's identity,
 *   its place in the log and everything it says.
 * - The **chain**: `h_0` = 32 zero bytes, `h_n = SHA-256(h_{n-1} ‖ leaf_n)`. A head
 *   `{position, hash}` therefore commits to every event up to that position, in that order.
 * - **Seals** (`es_seals`, one row per batch: the range, the number of events, the chain hash at
 *   its end) and **leaves** (`es_seal_leaves`, one row per event: position and leaf hash) live in
 *   the read-model database (PostgreSQL or PGlite; on KurrentDB too, as its read models do). The
 *   leaves let `casebook verify` name the first event that was altered, removed or inserted.
 *
 * Seals only prove something against a head kept outside casebook (`casebook verify --head`): a
 * person with write access to the database can rewrite events, leaves and seals together, and only
 * a head they cannot reach (printed, signed, mailed to the compliance office) shows it
 * (`casebook verify --against`).
 */
import { createHash } from 'node:crypto';
import canonicalizeModule from 'canonicalize';
import { migrate, migrationsIn } from '../db/migrations.js';
import type { Sql } from '../db/sql.js';
import {
  comparePositions,
  type Position,
  parsePosition,
  positionToString,
  type RecordedEvent,
} from './port.js';

// A CommonJS module whose types declare an ES default export: at run time the default import is
// the function itself.
const canonicalize = canonicalizeModule as unknown as (input: unknown) => string | undefined;

/** RFC 8785 canonical JSON of `value` (JSON Canonicalization Scheme). */
export const canonicalJson = (value: unknown): string => canonicalize(value) ?? '';

/** The chain's start: 32 zero bytes, hex. */
export const GENESIS_HASH = '0'.repeat(64);

/**
 * Brings the seal tables (`es_seals`, `es_seal_leaves`) in the current schema to the last version
 * of src/eventstore/sql/seals/ (component `seals`; docs/architecture.md "Tamper-evident log",
 * "Schema migrations"). Idempotent.
 * @throws what a failing migration throws (its transaction is rolled back).
 */
export const migrateSeals = async (sql: Sql): Promise<void> => {
  await migrate(sql, 'seals', migrationsIn(new URL('./sql/seals/', import.meta.url)));
};

/** SHA-256 of the canonical bytes of `event`, hex. */
export const leafHash = (event: RecordedEvent): string => {
  const canonical = canonicalJson({
    position: positionToString(event.position),
    id: event.id,
    stream: event.streamName,
    revision: String(event.revision),
    type: event.type,
    data: event.data ?? null,
    metadata: event.metadata,
  });
  return createHash('sha256').update(canonical).digest('hex');
};

/** The next link of the chain: SHA-256(previous ‖ leaf), both hex. */
export const chainHash = (previous: string, leaf: string): string =>
  createHash('sha256').update(Buffer.from(previous, 'hex')).update(Buffer.from(leaf, 'hex')).digest('hex');

/** One row of `es_seals`. */
export interface Seal {
  readonly seq: number;
  readonly to: Position;
  readonly count: number;
  readonly previousHash: string;
  readonly headHash: string;
  readonly sealedAt: string;
}

const toSeal = (row: {
  seq: string | number;
  to_position: string;
  event_count: number;
  previous_hash: string;
  head_hash: string;
  sealed_at: string | Date;
}): Seal => ({
  seq: Number(row.seq),
  to: parsePosition(row.to_position),
  count: Number(row.event_count),
  previousHash: row.previous_hash,
  headHash: row.head_hash,
  sealedAt: new Date(row.sealed_at).toISOString(),
});

const SEAL_COLUMNS = 'seq, to_position, event_count, previous_hash, head_hash, sealed_at';

/** The last seal, or undefined before the first. */
export const lastSeal = async (sql: Sql): Promise<Seal | undefined> => {
  const [row] = await sql.query<Parameters<typeof toSeal>[0]>(
    `SELECT ${SEAL_COLUMNS} FROM es_seals ORDER BY seq DESC LIMIT 1`,
  );
  return row ? toSeal(row) : undefined;
};

/** Every seal, oldest first. */
export const allSeals = async (sql: Sql): Promise<Seal[]> =>
  (await sql.query<Parameters<typeof toSeal>[0]>(`SELECT ${SEAL_COLUMNS} FROM es_seals ORDER BY seq`)).map(
    toSeal,
  );

/**
 * Seals `events` (the events right after `previous`, in `$all` order) as the next batch: one
 * transaction writes their leaves and the seal, under an advisory lock, and only when `previous`
 * is still the last seal (another sealer did not get there first).
 * @returns the new seal, or undefined when another sealer sealed first (read again and retry).
 */
export const writeSeal = async (
  sql: Sql,
  previous: Seal | undefined,
  events: readonly RecordedEvent[],
): Promise<Seal | undefined> => {
  if (events.length === 0) return undefined;
  let hash = previous?.headHash ?? GENESIS_HASH;
  const leaves = events.map((event) => {
    const leaf = leafHash(event);
    hash = chainHash(hash, leaf);
    return {
      commit_pos: String(event.position.commit),
      prepare_pos: String(event.position.prepare),
      event_id: event.id,
      leaf,
    };
  });
  const last = events.at(-1)!.position;
  if (previous && comparePositions(events[0]!.position, previous.to) <= 0)
    throw new RangeError('events to seal must follow the last seal');
  return sql.transaction(async (tx) => {
    await tx.query(`SELECT pg_advisory_xact_lock(hashtext('casebook-seal:' || current_schema()))`);
    const current = await lastSeal(tx);
    if ((current?.seq ?? 0) !== (previous?.seq ?? 0)) return undefined;
    const seq = (previous?.seq ?? 0) + 1;
    // Parallel arrays (unnest): PostgreSQL reads them several times faster than the same rows as
    // one JSON document (json_to_recordset; docs/performance.md "Parallel arrays instead of `json_to_recordset`").
    await tx.query(
      `INSERT INTO es_seal_leaves (commit_pos, prepare_pos, event_id, leaf, seal_seq)
       SELECT x.commit_pos, x.prepare_pos, x.event_id, x.leaf, $5
         FROM unnest($1::numeric[], $2::numeric[], $3::uuid[], $4::text[]) AS x(commit_pos, prepare_pos, event_id, leaf)`,
      [
        leaves.map((l) => l.commit_pos),
        leaves.map((l) => l.prepare_pos),
        leaves.map((l) => l.event_id),
        leaves.map((l) => l.leaf),
        seq,
      ],
    );
    const [row] = await tx.query<Parameters<typeof toSeal>[0]>(
      `INSERT INTO es_seals (seq, from_position, to_position, to_commit, to_prepare, event_count, previous_hash, head_hash)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ${SEAL_COLUMNS}`,
      [
        seq,
        positionToString(events[0]!.position),
        positionToString(last),
        String(last.commit),
        String(last.prepare),
        events.length,
        previous?.headHash ?? GENESIS_HASH,
        hash,
      ],
    );
    return toSeal(row!);
  });
};
