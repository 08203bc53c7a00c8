/**
 * The key store (docs/architecture.md "Erasure", Key store): one data key per (tenant, subject) —
 * a subject is what a caller encrypts for, a patient (`Patient/123`) — and one identifier secret
 * per tenant, each wrapped under the KEK, kept apart from the event log. Destroying a subject's key
 * erases everything encrypted under it, in the log and in every backup of the log, while the log's
 * bytes (and so its seals) stay as they are.
 *
 * {@link KeyStore} holds the rules (wrapping, keyed subject hashes, one key per subject under
 * concurrent calls, tombstones, rotation); where the wrapped bytes live is a {@link KeyRecords}
 * adapter: SQL tables in their own schema (src/eventstore/shredding/sql-key-store.ts) or one file
 * for the embedded default (src/eventstore/shredding/file-key-store.ts).
 */
import { createHmac, randomBytes } from 'node:crypto';
import { nonSecretRandomBytes } from '../../domain/ids.js';
import { type DataKey, DataKeyDestroyed, type DataKeyLookup } from './envelope.js';
import { KEY_BYTES, type KeyEncryptionKey, WrongKek } from './kek.js';

/** A data key's record as stored: wrapped bytes and the KEK that wrapped them, or a tombstone. */
export interface KeyRecord {
  readonly keyId: string;
  /** The data key wrapped under the KEK `kekId`; null once destroyed. */
  readonly wrapped: Buffer | null;
  readonly kekId: string | null;
  /** When the key was destroyed (ISO 8601), null while it lives. */
  readonly destroyedAt: string | null;
}

/** A tenant's identifier secret as stored. */
export interface SecretRecord {
  readonly wrapped: Buffer;
  readonly kekId: string;
}

/** A live record re-wrapped by {@link KeyRecords.rewrapAll}'s callback. */
export interface RewrapItem {
  /** The wrapping context ({@link dataKeyContext} or {@link secretContext}). */
  readonly context: string;
  readonly wrapped: Buffer;
}

/**
 * Where a key store keeps its records: the storage half of {@link KeyStore}, without crypto.
 * Subjects arrive as keyed hashes (hex), never in the clear.
 */
export interface KeyRecords {
  /** Where the records are, for messages (`schema casebook_keys`, a file path); never a password. */
  readonly where: string;
  /** The KEK id the store records; records `kekId` first when the store records none (a new store). */
  claimKek(kekId: string): Promise<string>;
  secret(tenant: number): Promise<SecretRecord | undefined>;
  /** Keeps `record` as `tenant`'s secret unless one is kept already; returns the one kept. */
  insertSecret(tenant: number, record: SecretRecord): Promise<SecretRecord>;
  keyBySubject(tenant: number, subjectHash: string): Promise<KeyRecord | undefined>;
  keyById(tenant: number, keyId: string): Promise<KeyRecord | undefined>;
  /** Keeps `record` for the subject unless one is kept already (alive or destroyed); returns the one kept. */
  insertKey(tenant: number, subjectHash: string, record: KeyRecord): Promise<KeyRecord>;
  /**
   * Deletes the subject's wrapped key and keeps a tombstone (its key id, the time); a tombstone
   * with `tombstoneKeyId` when the subject had no key. Idempotent: a tombstone keeps its first time.
   * @returns the tombstone, and whether this call destroyed a live key.
   */
  destroy(
    tenant: number,
    subjectHash: string,
    tombstoneKeyId: string,
  ): Promise<{ record: KeyRecord; destroyed: boolean }>;
  /**
   * Replaces every live wrapped key and secret with `rewrap`'s result and records `newKekId`, all or
   * nothing (one transaction; one file write), provided the store records `oldKekId`.
   * @returns how many records were re-wrapped.
   * @throws {WrongKek} when the store records another KEK; whatever `rewrap` throws (nothing changed).
   */
  rewrapAll(
    oldKekId: string,
    newKekId: string,
    rewrap: (item: RewrapItem) => Promise<Buffer>,
  ): Promise<number>;
  close(): Promise<void>;
}

/** The wrapping context of a data key: a wrapped key copied to another row does not unwrap. */
export const dataKeyContext = (tenant: number, keyId: string): string => `casebook-dek:1:${tenant}:${keyId}`;

/** The wrapping context of a tenant's identifier secret. */
export const secretContext = (tenant: number): string => `casebook-ids:1:${tenant}`;

/**
 * A keyed hash of an identifier (HMAC-SHA256 under a tenant's identifier secret, hex): the same
 * value gives the same hash in one tenant, and nobody without the key store can try an MRN space
 * against it. `purpose` separates uses (`key-subject`, `reservation`), so a hash made for one
 * cannot be matched against another.
 */
export const keyedHash = (secret: Buffer, purpose: string, value: string): string =>
  createHmac('sha256', secret).update(`${purpose}\0${value}`, 'utf8').digest('hex');

/**
 * The refusal of a record written under `kekId` after the store was rotated to another KEK (a
 * process still running with the old KEK).
 */
export const rotatedAway = (where: string, kekId: string): WrongKek =>
  new WrongKek(
    `the key store (${where}) is no longer under KEK ${kekId}: it was rotated; restart with the new KEK`,
  );

/** The refusal of a rotation from `oldKekId` of a store that records `recorded` (none: an empty store). */
export const notUnderOldKek = (where: string, recorded: string | undefined, oldKekId: string): WrongKek =>
  new WrongKek(
    `the key store (${where}) is wrapped under KEK ${recorded ?? '(none)'}, not under the old KEK given (${oldKekId}): nothing was changed`,
  );

/** A new data key id: 16 random bytes, base64url (22 characters). Names no subject. */
const newKeyId = (): string => nonSecretRandomBytes(16).toString('base64url');

/** What {@link KeyStore.destroy} did. */
export interface KeyDestruction {
  /** The id of the destroyed key (a tombstone's, when the subject never had one). */
  readonly keyId: string;
  /** When the key was destroyed (ISO 8601): the first destruction's time, on every later call. */
  readonly destroyedAt: string;
  /** True when this call destroyed a live key; false when it was destroyed already, or never existed. */
  readonly destroyed: boolean;
}

/** The tenant and subject of a data key, as callers name them. */
const subjectKey = (tenant: number, subject: string) => `${tenant}\0${subject}`;

/**
 * Data keys and identifier secrets, wrapped under a KEK, over a {@link KeyRecords} adapter. Open
 * it with {@link KeyStore.open}. Unwrapped data keys are not cached here: a {@link Keyring} caches
 * them for one batch (destruction by another process is seen by the next batch). Identifier
 * secrets, which are never destroyed, are cached for the life of the store.
 */
export class KeyStore {
  #kek: KeyEncryptionKey;
  readonly #secrets = new Map<number, Promise<Buffer>>();
  readonly #creating = new Map<string, Promise<DataKey>>();

  private constructor(
    readonly records: KeyRecords,
    kek: KeyEncryptionKey,
  ) {
    this.#kek = kek;
  }

  /**
   * A key store over `records` with `kek`. A new store records the KEK's id.
   * @throws {WrongKek} when the store's keys are wrapped under another KEK (a rotated store opened
   *   with the old KEK, or a wrong one): refused at once rather than at the first read.
   */
  static async open(records: KeyRecords, kek: KeyEncryptionKey): Promise<KeyStore> {
    const recorded = await records.claimKek(kek.id);
    if (recorded !== kek.id)
      throw new WrongKek(
        `the key store (${records.where}) is wrapped under KEK ${recorded}, but the configured KEK is ${kek.id}: set CASEBOOK_KEK (or CASEBOOK_KEK_FILE) to the KEK the keys were last rotated to`,
      );
    return new KeyStore(records, kek);
  }

  /** The id of the KEK the store's keys are wrapped under. */
  get kekId(): string {
    return this.#kek.id;
  }

  /**
   * `tenant`'s identifier secret (32 random bytes), made and kept on first use: the key of the
   * keyed hashes of identifiers that become stream names or index keys ({@link keyedHash}).
   * @throws {WrongKek} when the stored secret does not unwrap.
   */
  identifierSecret(tenant: number): Promise<Buffer> {
    let secret = this.#secrets.get(tenant);
    if (!secret) {
      secret = this.#loadSecret(tenant);
      this.#secrets.set(tenant, secret);
      secret.catch(() => this.#secrets.delete(tenant));
    }
    return secret;
  }

  async #loadSecret(tenant: number): Promise<Buffer> {
    const context = secretContext(tenant);
    let record = await this.records.secret(tenant);
    if (!record) {
      const wrapped = await this.#kek.wrap(randomBytes(KEY_BYTES), context);
      record = await this.records.insertSecret(tenant, { wrapped, kekId: this.#kek.id });
    }
    return this.#unwrap(record.wrapped, record.kekId, context);
  }

  async #unwrap(wrapped: Buffer, kekId: string | null, context: string): Promise<Buffer> {
    if (kekId !== this.#kek.id)
      throw new WrongKek(
        `the key for ${context} is wrapped under KEK ${kekId}, not the configured ${this.#kek.id}`,
      );
    return this.#kek.unwrap(wrapped, context);
  }

  /** The keyed hash a subject is stored under. */
  async #subjectHash(tenant: number, subject: string): Promise<string> {
    return keyedHash(await this.identifierSecret(tenant), 'key-subject', subject);
  }

  /**
   * The data key of `subject` in `tenant`, made on first use. Concurrent calls for one subject get
   * one key: in this process they share one call, across processes the store keeps the first insert.
   * @param subject an opaque name the caller gives (`Patient/123`); stored only as a keyed hash.
   * @param options.fresh the subject is new (a patient being created): a new key is inserted at
   *   once, and the stored one read only when the insert finds one (one statement instead of two).
   * @throws {DataKeyDestroyed} when the subject's key was destroyed: nothing is encrypted for an
   *   erased subject again (a new key would make its new data readable again).
   * @throws {WrongKek} when the stored key does not unwrap.
   */
  getOrCreate(tenant: number, subject: string, options: { fresh?: boolean } = {}): Promise<DataKey> {
    const k = subjectKey(tenant, subject);
    let pending = this.#creating.get(k);
    if (!pending) {
      pending = this.#getOrCreate(tenant, subject, options.fresh === true).finally(() =>
        this.#creating.delete(k),
      );
      this.#creating.set(k, pending);
    }
    return pending;
  }

  async #getOrCreate(tenant: number, subject: string, fresh: boolean): Promise<DataKey> {
    const hash = await this.#subjectHash(tenant, subject);
    let record = fresh ? undefined : await this.records.keyBySubject(tenant, hash);
    if (!record) {
      const keyId = newKeyId();
      const key = randomBytes(KEY_BYTES);
      const wrapped = await this.#kek.wrap(key, dataKeyContext(tenant, keyId));
      record = await this.records.insertKey(tenant, hash, {
        keyId,
        wrapped,
        kekId: this.#kek.id,
        destroyedAt: null,
      });
      // The key kept is the one just made: no need to unwrap what is in hand.
      if (record.keyId === keyId && record.wrapped) return { id: keyId, key };
    }
    return this.#open(tenant, record);
  }

  async #open(tenant: number, record: KeyRecord): Promise<DataKey> {
    if (!record.wrapped) throw new DataKeyDestroyed(record.keyId);
    const key = await this.#unwrap(record.wrapped, record.kekId, dataKeyContext(tenant, record.keyId));
    return { id: record.keyId, key };
  }

  /**
   * The data key `keyId` of `tenant` (an envelope's `key`): the key, `'destroyed'` when it was
   * destroyed, undefined when the store never held it (or holds it for another tenant).
   * @throws {WrongKek} when the stored key does not unwrap.
   */
  async get(tenant: number, keyId: string): Promise<DataKeyLookup> {
    const record = await this.records.keyById(tenant, keyId);
    if (!record) return undefined;
    if (!record.wrapped) return 'destroyed';
    return this.#open(tenant, record);
  }

  /**
   * Destroys `subject`'s data key: its wrapped bytes are deleted and a tombstone (key id, time) is
   * kept, so a later {@link get} answers `'destroyed'` and {@link getOrCreate} refuses. Idempotent;
   * a subject that never had a key gets a tombstone too, so nothing is encrypted for it later.
   */
  async destroy(tenant: number, subject: string): Promise<KeyDestruction> {
    const hash = await this.#subjectHash(tenant, subject);
    const { record, destroyed } = await this.records.destroy(tenant, hash, newKeyId());
    return { keyId: record.keyId, destroyedAt: record.destroyedAt!, destroyed };
  }

  /**
   * Re-wraps every live data key and identifier secret from `oldKek` to `newKek`, all or nothing,
   * and records `newKek`'s id; this store uses `newKek` from then on. The log is not touched: data
   * keys, and so every envelope, stay the same.
   * @returns how many keys and secrets were re-wrapped.
   * @throws {WrongKek} when the store's keys are not wrapped under `oldKek` (nothing changed).
   */
  async rewrap(oldKek: KeyEncryptionKey, newKek: KeyEncryptionKey): Promise<number> {
    const count = await this.records.rewrapAll(oldKek.id, newKek.id, async ({ context, wrapped }) =>
      newKek.wrap(await oldKek.unwrap(wrapped, context), context),
    );
    this.#kek = newKek;
    return count;
  }

  async close(): Promise<void> {
    await this.records.close();
  }
}

/**
 * The data keys of one batch (a request's appends, a page of a replay): each subject's and each key
 * id's key is looked up in the key store once per keyring, however many events name it — never once
 * per event. Make one per batch and drop it after: a key destroyed meanwhile is not seen by a
 * keyring made before.
 */
export class Keyring {
  readonly #bySubject = new Map<string, Promise<DataKey>>();
  readonly #byId = new Map<string, Promise<DataKeyLookup>>();
  constructor(private readonly store: KeyStore) {}

  /** {@link KeyStore.getOrCreate}, once per subject in this keyring. */
  forSubject(tenant: number, subject: string, options: { fresh?: boolean } = {}): Promise<DataKey> {
    const k = subjectKey(tenant, subject);
    let key = this.#bySubject.get(k);
    if (!key) {
      key = this.store.getOrCreate(tenant, subject, options);
      this.#bySubject.set(k, key);
      key.then(
        (found) => this.#byId.set(`${tenant}\0${found.id}`, Promise.resolve(found)),
        () => this.#bySubject.delete(k),
      );
    }
    return key;
  }

  /** {@link KeyStore.get}, once per key id in this keyring. */
  byId(tenant: number, keyId: string): Promise<DataKeyLookup> {
    const k = `${tenant}\0${keyId}`;
    let key = this.#byId.get(k);
    if (!key) {
      key = this.store.get(tenant, keyId);
      this.#byId.set(k, key);
      key.catch(() => this.#byId.delete(k));
    }
    return key;
  }
}
