/**
 * The key store of a test database (docs/architecture.md "Erasure"), as an installation has one:
 * every casebook a test opens on that database — a restart, a CLI process on PostgreSQL — reads
 * what the last one encrypted. On PostgreSQL the key store is where a casebook process finds it
 * (`<test schema>_keys` of the same database, under the suite's KEK of test/support/env.ts); on
 * PGlite, which no second process can open, in memory under a random KEK.
 */
import { PostgresSql } from '../../src/db/sql.js';
import { FileKeyRecords } from '../../src/eventstore/shredding/file-key-store.js';
import { LocalKek, parseKek } from '../../src/eventstore/shredding/kek.js';
import { KeyStore } from '../../src/eventstore/shredding/key-store.js';
import { SqlKeyRecords } from '../../src/eventstore/shredding/sql-key-store.js';
import type { OpenedDatabase } from './databases.js';

const stores = new WeakMap<object, Promise<KeyStore>>();

/** The key store of `database` (an opened test database), made on first use. */
export const keysOf = (database: OpenedDatabase): Promise<KeyStore> => {
  let store = stores.get(database);
  if (!store) {
    store =
      database.sql instanceof PostgresSql
        ? SqlKeyRecords.open(database.sql).then((records) =>
            KeyStore.open(records, parseKek(process.env.CASEBOOK_KEK ?? '', 'CASEBOOK_KEK')),
          )
        : KeyStore.open(FileKeyRecords.open(undefined), LocalKek.random());
    stores.set(database, store);
  }
  return store;
};
