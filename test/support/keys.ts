/**
 * The key store of a test database (docs/architecture.md "Erasure"): one per database, in memory,
 * under a random KEK, so that every casebook a test opens on that database — a restart included —
 * reads what the last one encrypted, as an installation's processes share its key store.
 */
import { FileKeyRecords } from '../../src/eventstore/shredding/file-key-store.js';
import { LocalKek } from '../../src/eventstore/shredding/kek.js';
import { KeyStore } from '../../src/eventstore/shredding/key-store.js';

const stores = new WeakMap<object, Promise<KeyStore>>();

/** The key store of `database` (an opened test database), made on first use. */
export const keysOf = (database: object): Promise<KeyStore> => {
  let store = stores.get(database);
  if (!store) {
    store = KeyStore.open(FileKeyRecords.open(undefined), LocalKek.random());
    stores.set(database, store);
  }
  return store;
};
