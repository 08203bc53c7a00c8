/**
 * Crypto-shredding (docs/architecture.md "Erasure"): the KEK, the envelope, the key store and its
 * adapters. This module picks the key store's adapter from the settings, as eventstore/index.ts
 * picks the event store's.
 */
import { PostgresSql, type Sql } from '../../db/sql.js';
import { FileKeyRecords, keyStoreFile } from './file-key-store.js';
import type { KeyEncryptionKey } from './kek.js';
import { type KeyRecords, KeyStore } from './key-store.js';
import { DEFAULT_KEY_STORE_SCHEMA, SqlKeyRecords } from './sql-key-store.js';

export * from './envelope.js';
export { keyStoreFile } from './file-key-store.js';
export * from './kek.js';
export * from './key-store.js';
export { DEFAULT_KEY_STORE_SCHEMA, KEY_STORE_SCHEMA_PATTERN } from './sql-key-store.js';

/** Where the key store lives (README.md "Configuration"). */
export interface KeyStoreSettings {
  /** DATA_DIR: the embedded default keeps its key store in `<DATA_DIR>/keys/keys.json`. */
  readonly dataDir: string;
  /** DATABASE_URL: the key store goes into its own schema of this database, unless KEY_STORE_URL is set. */
  readonly databaseUrl?: string | undefined;
  /** KEY_STORE_URL: a PostgreSQL database for the key store alone. */
  readonly keyStoreUrl?: string | undefined;
  /** KEY_STORE_SCHEMA: the key store's schema (default `casebook_keys`). */
  readonly keyStoreSchema?: string | undefined;
  /**
   * The event log is the SQL event store on the `sql` given to {@link openKeyStore} (not
   * KurrentDB): a new key may then commit without waiting for its WAL flush, as every event
   * encrypted under it commits later, synchronously, in the same WAL (SqlKeyRecords `asyncInserts`).
   */
  readonly logSharesDatabase?: boolean;
}

/** Where {@link openKeyStore} puts the key store, for messages: a schema of a database, or a file. */
export const keyStorePlace = (settings: KeyStoreSettings): string => {
  const schema =
    settings.keyStoreSchema ??
    `${DEFAULT_KEY_STORE_SCHEMA} (or <schema>_keys beside a schema other than public)`;
  if (settings.keyStoreUrl) return `schema ${schema} of KEY_STORE_URL`;
  if (settings.databaseUrl) return `schema ${schema} of DATABASE_URL`;
  return settings.dataDir === 'memory://' ? 'memory' : keyStoreFile(settings.dataDir);
};

/**
 * Opens the key store the settings name, with `kek`: on KEY_STORE_URL (a pool of its own, closed
 * with the store), else on DATABASE_URL (through `sql` when given, so it shares the caller's pool;
 * else a pool of its own), in the key store's own schema; else the file of the embedded default
 * (in memory for `DATA_DIR=memory://`).
 * @throws {WrongKek} when the store's keys are wrapped under another KEK; the database's or file
 *   system's errors.
 */
export const openKeyStore = async (
  settings: KeyStoreSettings,
  kek: KeyEncryptionKey,
  sql?: Sql,
): Promise<KeyStore> => {
  const schema = settings.keyStoreSchema ?? undefined;
  const url = settings.keyStoreUrl ?? settings.databaseUrl;
  let records: KeyRecords;
  if (url) {
    const owned = settings.keyStoreUrl !== undefined || sql === undefined;
    const connection = owned ? new PostgresSql(url, { max: 4 }) : sql!;
    try {
      records = await SqlKeyRecords.open(connection, {
        ...(schema ? { schema } : {}),
        owned,
        asyncInserts: !owned && settings.logSharesDatabase === true,
      });
    } catch (error) {
      if (owned) await connection.close().catch(() => undefined);
      throw error;
    }
  } else
    records = FileKeyRecords.open(
      settings.dataDir === 'memory://' ? undefined : keyStoreFile(settings.dataDir),
    );
  try {
    return await KeyStore.open(records, kek);
  } catch (error) {
    await records.close().catch(() => undefined);
    throw error;
  }
};

/**
 * Re-wraps every key of the key store the settings name from `oldKek` to `newKek` (`casebook keys
 * rotate`; docs/architecture.md "Erasure", Rotation). The log is not touched.
 * @returns how many data keys and identifier secrets were re-wrapped.
 * @throws {WrongKek} when the keys are not wrapped under `oldKek` (nothing changed).
 */
export const rotateKeys = async (
  settings: KeyStoreSettings,
  oldKek: KeyEncryptionKey,
  newKek: KeyEncryptionKey,
): Promise<number> => {
  const store = await openKeyStore(settings, oldKek);
  try {
    return await store.rewrap(oldKek, newKek);
  } finally {
    await store.close();
  }
};
