/**
 * `casebook verify` (docs/architecture.md "Tamper-evident log"; issue 14): walks the log against
 * its leaves and seals, and proves a head kept outside casebook.
 */
import { createPrivateKey, createPublicKey, sign, verify as verifySignature } from 'node:crypto';
import type { Sql } from '../db/sql.js';
import { comparePositions, type EventStore, type Position, parsePosition, positionToString } from './port.js';
import { allSeals, canonicalJson, chainHash, GENESIS_HASH, leafHash } from './seal.js';

const PAGE = 5000;

/** What a walk of the log found wrong first. */
export interface VerifyProblem {
  /** altered: an event differs from its leaf; removed: a sealed event is missing; inserted: an
   * event sits in a sealed range without a leaf; seal: leaves and seals disagree (they were
   * edited); head: the log does not extend the head given; unsealed: an event older than the
   * grace period was never sealed (its seals were deleted, or no sealer runs). */
  readonly kind: 'altered' | 'removed' | 'inserted' | 'seal' | 'head' | 'unsealed';
  /** `$all` position, `commit/prepare`. */
  readonly position: string;
  readonly detail: string;
}

export interface VerifyResult {
  readonly ok: boolean;
  /** Events walked (sealed and unsealed). */
  readonly events: number;
  readonly sealed: number;
  /** Events after the last seal (not an error: the sealer has not reached them yet). */
  readonly unsealed: number;
  /** Chain hash at the last sealed event (hex; the genesis hash before any seal). */
  readonly headHash: string;
  readonly headPosition: string | undefined;
  readonly problem?: VerifyProblem;
}

interface LeafRow extends Record<string, unknown> {
  commit_text: string;
  prepare_text: string;
  event_id: string;
  leaf: string;
  seal_seq: string | number;
}

const positionOf = (row: LeafRow): Position => ({
  commit: BigInt(row.commit_text),
  prepare: BigInt(row.prepare_text),
});

// Positions are selected as text (PGlite returns numeric and int8 as lossy numbers) under other
// names on purpose: ORDER BY resolves a bare name to an output column first, and ordering the text
// put position 100 before 99 (a clean log verified as "inserted at …", issue 33).
const LEAF_COLUMNS = `commit_pos::text AS commit_text, prepare_pos::text AS prepare_text,
  event_id::text AS event_id, leaf, seal_seq`;

/** Pages of `es_seal_leaves` in position order (numeric: transaction id, then sequence). */
async function* leavesOf(sql: Sql): AsyncGenerator<LeafRow> {
  let after: Position | undefined;
  for (;;) {
    const rows: LeafRow[] = after
      ? await sql.query<LeafRow>(
          `SELECT ${LEAF_COLUMNS} FROM es_seal_leaves
            WHERE (commit_pos, prepare_pos) > ($1::numeric, $2::numeric)
            ORDER BY es_seal_leaves.commit_pos, es_seal_leaves.prepare_pos LIMIT ${PAGE}`,
          [String(after.commit), String(after.prepare)],
        )
      : await sql.query<LeafRow>(
          `SELECT ${LEAF_COLUMNS} FROM es_seal_leaves
            ORDER BY es_seal_leaves.commit_pos, es_seal_leaves.prepare_pos LIMIT ${PAGE}`,
        );
    if (rows.length === 0) return;
    yield* rows;
    after = positionOf(rows.at(-1)!);
  }
}

/** Pages of `$all`, in order, as stored (the chain is over the stored bytes: docs/architecture.md "Erasure"). */
async function* eventsOf(store: EventStore) {
  let from: Position | undefined;
  for (;;) {
    const page = await store.readAll({ ...(from ? { from } : {}), maxCount: PAGE, stored: true });
    if (page.length === 0) return;
    yield* page;
    from = page.at(-1)!.position;
  }
}

/** How long an event may stay unsealed before `verify` calls it a problem (the sealer runs every second). */
export const DEFAULT_MAX_UNSEALED_AGE_MS = 10 * 60 * 1000;

export interface VerifyOptions {
  /** The time the walk is judged at (the unsealed grace period counts back from it). */
  readonly now?: Date;
  /**
   * An unsealed event recorded longer ago than this is a problem (`unsealed`): deleting the seals
   * must not pass for "not sealed yet". Default {@link DEFAULT_MAX_UNSEALED_AGE_MS}; Infinity: never.
   */
  readonly maxUnsealedAgeMs?: number;
}

/**
 * Walks the whole log against the leaves and the seals: every event up to the last seal must have
 * its leaf (same id, same hash), every leaf its event, and the leaves of each seal must chain to
 * its hash from the previous seal's. Events after the last seal may wait for the sealer, but not
 * longer than the grace period.
 * @returns ok with the counts and the sealed head, or the first problem found (in log order).
 */
export const verifyLog = async (
  store: EventStore,
  sql: Sql,
  options: VerifyOptions = {},
): Promise<VerifyResult> => {
  const now = (options.now ?? new Date()).getTime();
  const maxUnsealedAgeMs = options.maxUnsealedAgeMs ?? DEFAULT_MAX_UNSEALED_AGE_MS;
  const seals = await allSeals(sql);
  const lastSealed = seals.at(-1)?.to;
  const events = eventsOf(store)[Symbol.asyncIterator]();
  const leaves = leavesOf(sql)[Symbol.asyncIterator]();
  let event = await events.next();
  let leaf = await leaves.next();
  let walked = 0;
  let sealed = 0;
  let hash = GENESIS_HASH;
  let sealIndex = 0;
  let inSeal = 0;
  const fail = (kind: VerifyProblem['kind'], position: string, detail: string): VerifyResult => ({
    ok: false,
    events: walked,
    sealed,
    unsealed: 0,
    headHash: hash,
    headPosition: undefined,
    problem: { kind, position, detail },
  });
  while (
    !leaf.done ||
    (!event.done && lastSealed && comparePositions(event.value.position, lastSealed) <= 0)
  ) {
    const order = leaf.done
      ? -1
      : event.done
        ? 1
        : comparePositions(event.value.position, positionOf(leaf.value));
    if (order < 0) {
      const e = event.value!;
      return fail(
        'inserted',
        positionToString(e.position),
        `event ${e.id} is in a sealed range but was never sealed`,
      );
    }
    if (order > 0) {
      const p = positionToString(positionOf(leaf.value));
      return fail('removed', p, `sealed event ${leaf.value.event_id} is missing from the log`);
    }
    const e = event.value!;
    const l = leaf.value;
    const position = positionToString(e.position);
    if (e.id !== l.event_id || leafHash(e) !== l.leaf)
      return fail(
        'altered',
        position,
        `event ${e.id} (${e.type} on ${e.streamName}) differs from what was sealed`,
      );
    const seal = seals[sealIndex];
    if (!seal || Number(l.seal_seq) !== seal.seq)
      return fail(
        'seal',
        position,
        `the leaf of this event belongs to no seal in order (seal ${l.seal_seq})`,
      );
    if (inSeal === 0 && seal.previousHash !== hash)
      return fail('seal', position, `seal ${seal.seq} does not follow seal ${seal.seq - 1}`);
    hash = chainHash(hash, l.leaf);
    inSeal++;
    walked++;
    sealed++;
    if (inSeal === seal.count) {
      if (hash !== seal.headHash || comparePositions(e.position, seal.to) !== 0)
        return fail(
          'seal',
          position,
          `the leaves of seal ${seal.seq} do not hash to it (leaves or seals were edited)`,
        );
      sealIndex++;
      inSeal = 0;
    }
    event = await events.next();
    leaf = await leaves.next();
  }
  if (inSeal !== 0 || sealIndex !== seals.length) {
    const seal = seals[sealIndex]!;
    return fail('seal', positionToString(seal.to), `seal ${seal.seq} counts events the log does not have`);
  }
  let unsealed = 0;
  while (!event.done) {
    const recordedAt = Date.parse(event.value.metadata.recordedAt);
    if (unsealed === 0 && Number.isFinite(recordedAt) && now - recordedAt > maxUnsealedAgeMs)
      return fail(
        'unsealed',
        positionToString(event.value.position),
        `event ${event.value.id} was recorded at ${event.value.metadata.recordedAt} and never sealed (its seals were deleted, or no sealer runs)`,
      );
    unsealed++;
    event = await events.next();
  }
  return {
    ok: true,
    events: walked + unsealed,
    sealed,
    unsealed,
    headHash: hash,
    headPosition: lastSealed ? positionToString(lastSealed) : undefined,
  };
};

/** A head to keep outside casebook: the chain hash at a position (`casebook verify --head`). */
export interface LogHead {
  readonly position: string;
  readonly hash: string;
  /** Events up to and including `position`. */
  readonly events: number;
  readonly time: string;
  /** Ed25519 over the canonical JSON of the fields above, base64 (with CASEBOOK_SEAL_KEY). */
  readonly signature?: string;
}

const signedPart = (head: LogHead) =>
  Buffer.from(
    canonicalJson({ position: head.position, hash: head.hash, events: head.events, time: head.time }),
  );

/**
 * The head of the log as it is now, computed from the events themselves (not from the seals).
 * @param privateKeyPem an Ed25519 private key (PEM) to sign it with.
 * @throws {Error} the log is empty, or the key is not an Ed25519 private key.
 */
export const logHead = async (store: EventStore, now: Date, privateKeyPem?: string): Promise<LogHead> => {
  let hash = GENESIS_HASH;
  let count = 0;
  let position: Position | undefined;
  for await (const event of eventsOf(store)) {
    hash = chainHash(hash, leafHash(event));
    count++;
    position = event.position;
  }
  if (!position) throw new Error('the log is empty: there is no head to print');
  const head: LogHead = {
    position: positionToString(position),
    hash,
    events: count,
    time: now.toISOString(),
  };
  if (!privateKeyPem) return head;
  const key = createPrivateKey(privateKeyPem);
  if (key.asymmetricKeyType !== 'ed25519')
    throw new Error('CASEBOOK_SEAL_KEY must be an Ed25519 private key');
  return { ...head, signature: sign(null, signedPart(head), key).toString('base64') };
};

/**
 * Parses a head (JSON) and, with `publicKeyPem`, checks its signature.
 * @throws {Error} not a head; unsigned or badly signed while a public key is given.
 */
export const parseHead = (text: string, publicKeyPem?: string): LogHead => {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error('the head is not JSON');
  }
  const head = value as Partial<LogHead> | null;
  if (
    !head ||
    typeof head.position !== 'string' ||
    typeof head.hash !== 'string' ||
    !/^[0-9a-f]{64}$/.test(head.hash) ||
    typeof head.events !== 'number' ||
    typeof head.time !== 'string'
  )
    throw new Error('the head must be {position, hash, events, time[, signature]}');
  parsePosition(head.position);
  if (publicKeyPem) {
    if (typeof head.signature !== 'string') throw new Error('the head is not signed');
    const ok = verifySignature(
      null,
      signedPart(head as LogHead),
      createPublicKey(publicKeyPem),
      Buffer.from(head.signature, 'base64'),
    );
    if (!ok)
      throw new Error('the head signature does not verify: the head was altered or signed with another key');
  }
  return head as LogHead;
};

/**
 * Proves that the log still extends `head`: recomputes the chain from the genesis over the events
 * up to `head.position`, from the events alone (seals can have been recomputed).
 * @returns ok, or the problem: the events up to the head no longer hash to it.
 */
export const verifyAgainst = async (store: EventStore, head: LogHead): Promise<VerifyResult> => {
  const until = parsePosition(head.position);
  let hash = GENESIS_HASH;
  let count = 0;
  let last: Position | undefined;
  for await (const event of eventsOf(store)) {
    if (comparePositions(event.position, until) > 0) break;
    hash = chainHash(hash, leafHash(event));
    count++;
    last = event.position;
  }
  const reached = last !== undefined && comparePositions(last, until) === 0;
  if (hash === head.hash && count === head.events && reached)
    return {
      ok: true,
      events: count,
      sealed: count,
      unsealed: 0,
      headHash: hash,
      headPosition: head.position,
    };
  const detail = !reached
    ? `the event at the head's position is gone (the log ends at ${last ? positionToString(last) : 'its start'} before it)`
    : count !== head.events
      ? `${count} events up to the head where it recorded ${head.events}: events were removed or inserted at or before it`
      : 'the events up to the head no longer hash to it: an event at or before it was altered';
  return {
    ok: false,
    events: count,
    sealed: 0,
    unsealed: 0,
    headHash: hash,
    headPosition: head.position,
    problem: { kind: 'head', position: head.position, detail },
  };
};
