/**
 * The key store's contract (docs/architecture.md "Erasure", Key store), asserted on every adapter:
 * the SQL records on PGlite and on PostgreSQL (in a schema of their own), and the file of the
 * embedded default (on disk; in memory for `DATA_DIR=memory://` the same class keeps no file). One key per subject under concurrent calls, erasure
 * that leaves a tombstone and no key material, rotation all or nothing, and the wrong KEK refused.
 */
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { PostgresSql, quoteIdentifier, type Sql } from '../../../src/db/sql.js';
import { DataKeyDestroyed, decryptJson, encryptJson } from '../../../src/eventstore/shredding/envelope.js';
import { FileKeyRecords } from '../../../src/eventstore/shredding/file-key-store.js';
import { openKeyStore } from '../../../src/eventstore/shredding/index.js';
import { LocalKek, WrongKek } from '../../../src/eventstore/shredding/kek.js';
import { type KeyRecords, Keyring, KeyStore } from '../../../src/eventstore/shredding/key-store.js';
import { SqlKeyRecords } from '../../../src/eventstore/shredding/sql-key-store.js';
import { type Cleanups, closeAfterEach, POSTGRES_TEST_URL, testDatabases } from '../../support/databases.js';

/** Where one test's key store is kept: every call of `records` opens the same storage anew. */
interface Backend {
  records(): Promise<KeyRecords>;
  /** Everything the storage holds, as text (every row of every table; the file). */
  dump(): Promise<string>;
}

interface Adapter {
  readonly name: string;
  make(cleanups: Cleanups): Promise<Backend>;
}

/** Every row of every table in `schema`, as JSON text (bytea as `\x` hex). */
const dumpSchema = async (sql: Sql, schema: string): Promise<string> => {
  const tables = await sql.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name`,
    [schema],
  );
  expect(tables.map((t) => t.table_name)).to.include.members(['data_keys', 'identifier_secrets', 'kek']);
  const out: string[] = [];
  for (const { table_name } of tables) {
    const rows = await sql.query<{ row: string }>(
      `SELECT row_to_json(t)::text AS row FROM ${quoteIdentifier(schema)}.${quoteIdentifier(table_name)} t`,
    );
    out.push(...rows.map((r) => `${table_name}: ${r.row}`));
  }
  return out.join('\n');
};

const sqlAdapters: Adapter[] = testDatabases.map((database) => ({
  name: `SQL on ${database.name}`,
  async make(cleanups) {
    const opened = await database.open();
    const schema = `k_${randomBytes(5).toString('hex')}`;
    cleanups.push(async () => {
      await opened.sql.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await opened.dispose();
    });
    return {
      records: async () => {
        const records = await SqlKeyRecords.open(await opened.reopen(2), { schema });
        cleanups.push(() => records.close());
        return records;
      },
      dump: () => dumpSchema(opened.sql, schema),
    };
  },
}));

const fileAdapter: Adapter = {
  name: 'file',
  async make(cleanups) {
    const dir = mkdtempSync(join(tmpdir(), 'casebook-keys-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'keys', 'keys.json');
    return {
      records: async () => FileKeyRecords.open(path),
      // The snapshot and the journal: a destroyed key must be in neither.
      dump: async () =>
        [path, `${path}.journal`].map((p) => (existsSync(p) ? readFileSync(p, 'utf8') : '')).join('\n'),
    };
  },
};

/** `key` in every text form a dump could show it in. */
const forms = (key: Buffer): string[] => [
  key.toString('hex'),
  key.toString('base64'),
  key.toString('base64url'),
];

const rejection = async (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => expect.fail('resolved'),
    (error: unknown) => error,
  );

for (const adapter of [...sqlAdapters, fileAdapter]) {
  describe(`key store contract: ${adapter.name}`, function () {
    this.timeout(120_000);
    const cleanups = closeAfterEach();
    let backend: Backend;
    let kek: LocalKek;
    let store: KeyStore;

    beforeEach(async () => {
      backend = await adapter.make(cleanups);
      kek = LocalKek.random();
      store = await KeyStore.open(await backend.records(), kek);
    });

    it('gives one key per subject, the same on every call, and another per subject and tenant', async () => {
      const a = await store.getOrCreate(1, 'Patient/123');
      expect(a.key).to.have.length(32);
      expect(a.id).to.match(/^[A-Za-z0-9_-]{22}$/);
      expect(await store.getOrCreate(1, 'Patient/123')).to.deep.equal(a);
      const b = await store.getOrCreate(1, 'Patient/124');
      const c = await store.getOrCreate(2, 'Patient/123');
      expect(new Set([a.id, b.id, c.id]).size).to.equal(3);
      expect(await store.get(1, a.id)).to.deep.equal(a);
      expect(await store.get(2, a.id), 'another tenant').to.equal(undefined);
      expect(await store.get(1, 'no-such-key')).to.equal(undefined);
      // The same key from a store opened anew on the same storage.
      const again = await KeyStore.open(await backend.records(), kek);
      expect(await again.get(1, a.id)).to.deep.equal(a);
      expect(await again.getOrCreate(1, 'Patient/123')).to.deep.equal(a);
    });

    it('20 concurrent calls for one subject yield one key', async () => {
      const keys = await Promise.all(Array.from({ length: 20 }, () => store.getOrCreate(1, 'Patient/7')));
      expect(new Set(keys.map((k) => k.id)).size).to.equal(1);
      expect(new Set(keys.map((k) => k.key.toString('hex'))).size).to.equal(1);
    });

    it('100 concurrent calls for 50 subjects in two tenants (batched together) yield one key each', async () => {
      const subjects = Array.from({ length: 50 }, (_, i) => ({
        tenant: 1 + (i % 2),
        subject: `Patient/${i}`,
      }));
      const keys = await Promise.all(
        [...subjects, ...subjects].map(({ tenant, subject }) => store.getOrCreate(tenant, subject)),
      );
      expect(new Set(keys.map((k) => k.id)).size).to.equal(50);
      for (const [i, key] of keys.slice(0, 50).entries()) {
        expect(keys[50 + i], subjects[i]!.subject).to.deep.equal(key);
        expect(await store.get(subjects[i]!.tenant, key.id)).to.deep.equal(key);
        expect(await store.get(3 - subjects[i]!.tenant, key.id), 'the other tenant').to.equal(undefined);
      }
      const again = await KeyStore.open(await backend.records(), kek);
      const reread = await Promise.all(
        subjects.map(({ tenant, subject }) => again.getOrCreate(tenant, subject)),
      );
      expect(reread).to.deep.equal(keys.slice(0, 50));
    });

    it('stores the subject only as a keyed hash, and keys only wrapped', async () => {
      const key = await store.getOrCreate(1, 'Patient/subject-in-clear');
      await store.identifierSecret(1);
      const dump = await backend.dump();
      expect(dump).not.to.include('subject-in-clear');
      for (const form of forms(key.key)) expect(dump).not.to.include(form);
      for (const form of forms(await store.identifierSecret(1))) expect(dump).not.to.include(form);
    });

    it('destroys a key idempotently: a tombstone answers "destroyed", no key material is left', async () => {
      const key = await store.getOrCreate(1, 'Patient/erase-me');
      const other = await store.getOrCreate(1, 'Patient/keep-me');
      const wrapped = (await store.records.keyById(1, key.id))!.wrapped!;
      const before = await backend.dump();
      expect(before).to.satisfy((d: string) => forms(wrapped).some((f) => d.includes(f)));

      const first = await store.destroy(1, 'Patient/erase-me');
      expect(first).to.include({ keyId: key.id, destroyed: true });
      expect(Date.parse(first.destroyedAt)).to.be.closeTo(Date.now(), 60_000);
      const second = await store.destroy(1, 'Patient/erase-me');
      expect(second).to.deep.equal({ ...first, destroyed: false });

      expect(await store.get(1, key.id)).to.equal('destroyed');
      const error = await rejection(store.getOrCreate(1, 'Patient/erase-me'));
      expect(error).to.be.instanceOf(DataKeyDestroyed).with.property('keyId', key.id);
      expect(await store.get(1, other.id)).to.deep.equal(other);

      const after = await backend.dump();
      for (const form of [...forms(key.key), ...forms(wrapped)]) expect(after).not.to.include(form);
      expect(after).to.include(key.id);
    });

    it('keeps a tombstone for a subject that never had a key: nothing is encrypted for it later', async () => {
      const tombstone = await store.destroy(1, 'Patient/never-keyed');
      expect(tombstone.destroyed).to.equal(false);
      expect(await store.get(1, tombstone.keyId)).to.equal('destroyed');
      expect(await rejection(store.getOrCreate(1, 'Patient/never-keyed'))).to.be.instanceOf(DataKeyDestroyed);
    });

    it('decrypting through a keyring: erased data is DataKeyDestroyed, other data still reads', async () => {
      const keyring = new Keyring(store);
      const erased = encryptJson({ name: 'Anna' }, await keyring.forSubject(1, 'Patient/1'), 'event-1');
      const kept = encryptJson({ name: 'Bert' }, await keyring.forSubject(1, 'Patient/2'), 'event-2');
      await store.destroy(1, 'Patient/1');
      const later = new Keyring(store);
      expect(() => decryptJson(erased, 'destroyed', 'event-1')).to.throw(DataKeyDestroyed);
      const lookup = await later.byId(1, erased.key);
      expect(lookup).to.equal('destroyed');
      expect(() => decryptJson(erased, lookup, 'event-1')).to.throw(DataKeyDestroyed);
      expect(decryptJson(kept, await later.byId(1, kept.key), 'event-2')).to.deep.equal({ name: 'Bert' });
    });

    it('makes one identifier secret per tenant, kept across opens', async () => {
      const [a, b] = await Promise.all([store.identifierSecret(1), store.identifierSecret(1)]);
      expect(a).to.have.length(32);
      expect(b).to.deep.equal(a);
      expect(await store.identifierSecret(2)).not.to.deep.equal(a);
      const again = await KeyStore.open(await backend.records(), kek);
      expect(await again.identifierSecret(1)).to.deep.equal(a);
    });

    it('refuses to open with another KEK', async () => {
      await store.getOrCreate(1, 'Patient/1');
      const error = await rejection(KeyStore.open(await backend.records(), LocalKek.random()));
      expect(error).to.be.instanceOf(WrongKek);
      expect((error as Error).message)
        .to.include(kek.id)
        .and.to.match(/configured KEK is [0-9a-f]{16}/);
    });

    it('rewraps every key under a new KEK: old envelopes decrypt with it, the old KEK is refused', async () => {
      const envelopes = [];
      for (const [tenant, subject] of [
        [1, 'Patient/1'],
        [1, 'Patient/2'],
        [2, 'Patient/1'],
      ] as const) {
        const key = await store.getOrCreate(tenant, subject);
        envelopes.push({
          tenant,
          envelope: encryptJson({ subject }, key, `event-${tenant}-${subject}`),
          subject,
        });
      }
      const erased = await store.getOrCreate(1, 'Patient/erased');
      await store.destroy(1, 'Patient/erased');
      const secrets = [await store.identifierSecret(1), await store.identifierSecret(2)];

      const newKek = LocalKek.random();
      expect(await store.rewrap(kek, newKek)).to.equal(5); // 3 live keys and 2 secrets
      expect(store.kekId).to.equal(newKek.id);

      const rotated = await KeyStore.open(await backend.records(), newKek);
      for (const { tenant, envelope, subject } of envelopes)
        expect(
          decryptJson(envelope, await rotated.get(tenant, envelope.key), `event-${tenant}-${subject}`),
        ).to.deep.equal({
          subject,
        });
      expect(await rotated.get(1, erased.id)).to.equal('destroyed');
      expect(await rotated.identifierSecret(1)).to.deep.equal(secrets[0]);
      expect(await rotated.identifierSecret(2)).to.deep.equal(secrets[1]);
      // New keys are made under the new KEK.
      const fresh = await rotated.getOrCreate(1, 'Patient/3');
      expect((await rotated.records.keyById(1, fresh.id))!.kekId).to.equal(newKek.id);

      expect(await rejection(KeyStore.open(await backend.records(), kek))).to.be.instanceOf(WrongKek);
    });

    it('refuses a rotation from the wrong old KEK and changes nothing', async () => {
      await store.getOrCreate(1, 'Patient/1');
      await store.identifierSecret(2);
      const before = await backend.dump();
      const error = await rejection(store.rewrap(LocalKek.random(), LocalKek.random()));
      expect(error).to.be.instanceOf(WrongKek);
      expect((error as Error).message).to.match(/nothing was changed/);
      expect(await backend.dump()).to.equal(before);
      expect(store.kekId).to.equal(kek.id);
    });

    it('a subject said to be new ("fresh") that has a key gets that key; a destroyed one is refused', async () => {
      const kept = await store.getOrCreate(1, 'Patient/40');
      expect(await store.getOrCreate(1, 'Patient/40', { fresh: true })).to.deep.equal(kept);
      const made = await store.getOrCreate(1, 'Patient/41', { fresh: true });
      // A store opened anew (another process) told the same: the stored keys.
      const again = await KeyStore.open(await backend.records(), kek);
      expect(await again.getOrCreate(1, 'Patient/40', { fresh: true })).to.deep.equal(kept);
      expect(await again.getOrCreate(1, 'Patient/41')).to.deep.equal(made);
      await store.destroy(1, 'Patient/41');
      expect(await rejection(store.getOrCreate(1, 'Patient/41', { fresh: true }))).to.be.instanceOf(
        DataKeyDestroyed,
      );
    });

    it('a rotation that fails half-way changes nothing', async () => {
      for (let i = 0; i < 5; i++) await store.getOrCreate(1, `Patient/${i}`);
      const before = await backend.dump();
      let calls = 0;
      const failing = await rejection(
        store.records.rewrapAll(kek.id, 'f00df00df00df00d', async ({ wrapped }) => {
          if (++calls === 4) throw new Error('the KMS went away');
          return wrapped;
        }),
      );
      expect((failing as Error).message).to.equal('the KMS went away');
      expect(await backend.dump()).to.equal(before);
    });
  });
}

describe('key store: SQL specifics', function () {
  this.timeout(120_000);
  const cleanups = closeAfterEach();

  it('asyncInserts: a new key commits without a WAL flush wait, and only that statement (PostgreSQL)', async () => {
    const schema = `k_${randomBytes(5).toString('hex')}`;
    const sql = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
    cleanups.push(async () => {
      await sql.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await sql.close();
    });
    const store = await KeyStore.open(
      await SqlKeyRecords.open(sql, { schema, asyncInserts: true }),
      LocalKek.random(),
    );
    const keys = await Promise.all(
      Array.from({ length: 10 }, (_, i) => store.getOrCreate(1, `Patient/${i}`)),
    );
    expect(new Set(keys.map((k) => k.id)).size).to.equal(10);
    // One connection: the setting did not outlive the insert's transaction.
    const [setting] = await sql.query<{ synchronous_commit: string }>(`SHOW synchronous_commit`);
    expect(setting!.synchronous_commit).to.equal('on');
    const [{ n }] = (await sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${schema}.data_keys WHERE wrapped IS NOT NULL`,
    )) as [{ n: number }];
    expect(n).to.equal(10);
  });

  for (const database of testDatabases)
    it(`looks concurrent callers' keys up by id in one statement, each its own key, on ${database.name}`, async () => {
      const opened = await database.open();
      const schema = `k_${randomBytes(5).toString('hex')}`;
      cleanups.push(async () => {
        await opened.sql.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await opened.dispose();
      });
      // The records' statements, counted.
      let statements = 0;
      const counted = new Proxy(opened.sql, {
        get(target, property, receiver) {
          if (property !== 'query') return Reflect.get(target, property, receiver);
          return (text: string, params?: readonly unknown[]) => {
            statements++;
            return target.query(text, params);
          };
        },
      });
      const records = await SqlKeyRecords.open(counted, { schema });
      const store = await KeyStore.open(records, LocalKek.random());
      const made = await Promise.all(
        Array.from({ length: 12 }, (_, i) => store.getOrCreate(1 + (i % 2), `Patient/${i}`)),
      );
      statements = 0;
      const found = await Promise.all([
        ...made.map((key, i) => records.keyById(1 + (i % 2), key.id)),
        records.keyById(1, 'no-such-key'),
        // Another tenant's key id is not found.
        records.keyById(2, made[0]!.id),
      ]);
      expect(found.slice(0, 12).map((r) => r?.keyId)).to.deep.equal(made.map((k) => k.id));
      expect(found.slice(12)).to.deep.equal([undefined, undefined]);
      // The first lookup goes alone; the others wait for it and go together.
      expect(statements).to.equal(2);
    });

  for (const database of testDatabases)
    it(`puts its tables in its own schema, whatever the search path, on ${database.name}`, async () => {
      const opened = await database.open();
      const schema = `k_${randomBytes(5).toString('hex')}`;
      cleanups.push(async () => {
        await opened.sql.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await opened.dispose();
      });
      const [{ current }] = (await opened.sql.query<{ current: string }>(
        `SELECT current_schema() AS current`,
      )) as [{ current: string }];
      const records = await SqlKeyRecords.open(opened.sql, { schema });
      // A second open (another process starting) finds the schema current.
      await SqlKeyRecords.open(opened.sql, { schema });
      const tablesIn = async (s: string) =>
        (
          await opened.sql.query<{ table_name: string }>(
            `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name`,
            [s],
          )
        ).map((t) => t.table_name);
      expect(await tablesIn(schema)).to.deep.equal([
        'data_keys',
        'identifier_secrets',
        'kek',
        'schema_migrations',
      ]);
      expect(await tablesIn(current)).to.deep.equal([]);
      const store = await KeyStore.open(records, LocalKek.random());
      await store.getOrCreate(1, 'Patient/1');
      const [{ n }] = (await opened.sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${schema}.data_keys`,
      )) as [{ n: number }];
      expect(n).to.equal(1);
    });

  for (const database of testDatabases)
    it(`stores opened on separate connections make one key for a subject called at once, on ${database.name}`, async () => {
      const opened = await database.open();
      const schema = `k_${randomBytes(5).toString('hex')}`;
      cleanups.push(async () => {
        await opened.sql.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await opened.dispose();
      });
      const kek = LocalKek.random();
      const stores: KeyStore[] = [];
      for (let i = 0; i < 4; i++) {
        const records = await SqlKeyRecords.open(await opened.reopen(2), { schema });
        cleanups.push(() => records.close());
        stores.push(await KeyStore.open(records, kek));
      }
      const keys = await Promise.all(
        Array.from({ length: 20 }, (_, i) => stores[i % stores.length]!.getOrCreate(1, 'Patient/race')),
      );
      expect(new Set(keys.map((k) => k.id)).size).to.equal(1);
      // Batches of new subjects racing each other across stores: still one key per subject.
      const many = await Promise.all(
        Array.from({ length: 80 }, (_, i) => stores[i % stores.length]!.getOrCreate(1, `Patient/m${i % 20}`)),
      );
      for (let i = 0; i < 20; i++)
        expect(new Set(many.filter((_, j) => j % 20 === i).map((k) => k.id)).size, `Patient/m${i}`).to.equal(
          1,
        );
      expect(new Set(many.map((k) => k.id)).size).to.equal(20);
      const secrets = await Promise.all(stores.map((s) => s.identifierSecret(5)));
      expect(new Set(secrets.map((s) => s.toString('hex'))).size).to.equal(1);
    });

  it('KEY_STORE_URL: a database of its own, its schema named by KEY_STORE_SCHEMA', async () => {
    const schema = `k_${randomBytes(5).toString('hex')}`;
    const kek = LocalKek.random();
    const settings = { dataDir: 'memory://', keyStoreUrl: POSTGRES_TEST_URL, keyStoreSchema: schema };
    const store = await openKeyStore(settings, kek);
    cleanups.push(async () => {
      const cleanup = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
      await cleanup.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await cleanup.close();
    });
    const key = await store.getOrCreate(3, 'Patient/9');
    await store.close();
    const again = await openKeyStore(settings, kek);
    expect(await again.get(3, key.id)).to.deep.equal(key);
    await again.close();
  });
});

describe('key store: the embedded default file', () => {
  const cleanups = closeAfterEach();

  it('lives in <DATA_DIR>/keys/keys.json, mode 0600: a new key is one journal line, a reopen compacts', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'casebook-keys-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const kek = LocalKek.random();
    const store = await openKeyStore({ dataDir: dir }, kek);
    await Promise.all(Array.from({ length: 30 }, (_, i) => store.getOrCreate(1, `Patient/${i}`)));
    const path = join(dir, 'keys', 'keys.json');
    const journal = `${path}.journal`;
    // The KEK id, the tenant's secret and 30 keys: a line each, nothing rewritten.
    expect(readFileSync(journal, 'utf8').trim().split('\n')).to.have.length(32);
    expect(statSync(journal).mode & 0o777).to.equal(0o600);
    const before = await store.getOrCreate(1, 'Patient/7');
    await store.close();
    // A torn last line (a crash mid-append) is dropped; the rest is compacted into the snapshot.
    appendFileSync(journal, '{"key":"1:torn","value":{"id":');
    const reopened = await openKeyStore({ dataDir: dir }, kek);
    expect(readFileSync(journal, 'utf8')).to.equal('');
    expect(statSync(path).mode & 0o777).to.equal(0o600);
    const file = JSON.parse(readFileSync(path, 'utf8'));
    expect(file.format).to.equal(1);
    expect(Object.keys(file.keys)).to.have.length(30);
    const again = await reopened.getOrCreate(1, 'Patient/7');
    expect(again.id).to.equal(before.id);
    expect(again.key.equals(before.key)).to.equal(true);
    await reopened.close();
  });
});

describe('Keyring (the keys of one batch)', () => {
  it('looks each subject and each key id up once per keyring, however many events name it', async () => {
    const records = FileKeyRecords.open(undefined);
    const calls = { keyBySubject: 0, keyById: 0 };
    const counting = new Proxy(records, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => {
          if (property === 'keyBySubject' || property === 'keyById') calls[property]++;
          return value.apply(target, args);
        };
      },
    });
    const store = await KeyStore.open(counting, LocalKek.random());
    const keyring = new Keyring(store);
    const keys = await Promise.all(
      Array.from({ length: 50 }, (_, i) => keyring.forSubject(1, i % 2 ? 'Patient/a' : 'Patient/b')),
    );
    expect(new Set(keys.map((k) => k.id)).size).to.equal(2);
    expect(calls.keyBySubject).to.equal(2);
    // A key found by subject is known by id in the same keyring.
    for (const key of keys) expect(await keyring.byId(1, key.id)).to.deep.equal(key);
    expect(calls.keyById).to.equal(0);
    const next = new Keyring(store);
    await Promise.all(Array.from({ length: 20 }, () => next.byId(1, keys[0]!.id)));
    expect(calls.keyById).to.equal(1);
  });
});
