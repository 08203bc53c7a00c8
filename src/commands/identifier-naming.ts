/**
 * The names of identifier reservation streams (docs/architecture.md "Erasure"): in a store created
 * with keyed hashing, `reservation-<HMAC-SHA256 of the key under the tenant's identifier secret>`,
 * so a stream name tells nothing of the identifier to whoever cannot read the key store; in an
 * older store, `reservation-<SHA-256 of the key>` as before ({@link reservationStream}), so its
 * existing reservations keep holding.
 */
import {
  IDENTIFIER_HASHING_STREAM,
  type IdentifierHashingScheme,
  identifierHashingDecider,
} from '../domain/reservation/identifier-hashing.js';
import { reservationStream } from '../domain/reservation/reservation.js';
import { type KeyStore, keyedHash } from '../eventstore/shredding/key-store.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';

/** How a command names the reservation stream of an identifier key. */
export interface IdentifierNaming {
  readonly scheme: IdentifierHashingScheme;
  /** Makes {@link stream} ready for `tenantId` (loads its identifier secret once). */
  prepare(tenantId: number | null): Promise<void>;
  /**
   * The reservation stream of `key` (an identifier key of `tenantId`).
   * @throws {Error} when the tenant was not prepared (a programming error).
   */
  stream(tenantId: number, key: string): string;
}

/** The names of a store from before keyed hashing: SHA-256 of the key. */
export const UNKEYED_NAMING: IdentifierNaming = {
  scheme: 'sha256',
  prepare: async () => undefined,
  stream: (_tenantId, key) => reservationStream(key),
};

/** Keyed names: HMAC-SHA256 of the key under the tenant's identifier secret. */
const keyedNaming = (keys: KeyStore): IdentifierNaming => {
  const secrets = new Map<number, Buffer>();
  return {
    scheme: 'hmac-sha256',
    prepare: async (tenantId) => {
      if (tenantId === null || secrets.has(tenantId)) return;
      secrets.set(tenantId, await keys.identifierSecret(tenantId));
    },
    stream: (tenantId, key) => {
      const secret = secrets.get(tenantId);
      if (!secret) throw new Error(`the identifier secret of tenant ${tenantId} is not loaded`);
      return `reservation-${keyedHash(secret, 'reservation', key).slice(0, 40)}`;
    },
  };
};

/**
 * The naming of this store: as recorded in stream `identifier-hashing`; on an empty log, keyed
 * hashing, recorded now; on a log from before the choice, unkeyed (nothing is recorded: a
 * read-only process such as `casebook verify` writes nothing).
 * @param ctx a system context of the store (no tenant).
 */
export const openIdentifierNaming = async (
  ctx: CommandContext,
  keys: KeyStore,
): Promise<IdentifierNaming> => {
  const recorded = await ctx.store.readStream(IDENTIFIER_HASHING_STREAM);
  let scheme =
    recorded.length > 0 ? (recorded[0]!.data as { scheme: IdentifierHashingScheme }).scheme : undefined;
  if (scheme === undefined && (await ctx.store.headPosition()) === undefined) {
    await execute(ctx, (uow) =>
      uow.decide(IDENTIFIER_HASHING_STREAM, identifierHashingDecider, {
        type: 'ChooseIdentifierHashing',
        scheme: 'hmac-sha256',
        now: uow.now,
      }),
    );
    const [chosen] = await ctx.store.readStream(IDENTIFIER_HASHING_STREAM);
    scheme = (chosen?.data as { scheme: IdentifierHashingScheme } | undefined)?.scheme;
  }
  return scheme === 'hmac-sha256' ? keyedNaming(keys) : UNKEYED_NAMING;
};
