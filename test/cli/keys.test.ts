/**
 * `casebook keys rotate` as an operator runs it (docs/architecture.md "Erasure", Rotation): a real
 * process re-wraps every key under the new KEK and prints how many; a wrong old KEK exits non-zero
 * and changes nothing. On the embedded default (its KEK file replaced) and on PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { PostgresSql } from '../../src/db/sql.js';
import {
  decryptJson,
  type Encrypted,
  encryptJson,
  type KeyStoreSettings,
  type LocalKek,
  loadKek,
  openKeyStore,
  parseKek,
} from '../../src/eventstore/shredding/index.js';
import { POSTGRES_TEST_URL } from '../support/databases.js';
import { cli as spawnCli } from '../support/process.js';

/**
 * The CLI with `env` and no CASEBOOK_KEK unless `env` sets it: the test processes carry the suite's
 * (test/support/env.ts), and these tests choose the KEK themselves.
 */
const cli = (args: string[], env: Record<string, string>) => spawnCli(args, { CASEBOOK_KEK: '', ...env });

/** The key store files of a data directory (snapshot and journal), as one text. */
const keyFiles = (data: string): string =>
  ['keys.json', 'keys.json.journal']
    .map((name) => join(data, 'keys', name))
    .map((path) => (existsSync(path) ? readFileSync(path, 'utf8') : ''))
    .join('\n');

const failure = (args: string[], env: Record<string, string>) =>
  cli(args, env).then(
    (out) => `0: ${out}`,
    (error: { code: number; stderr: string }) => `${error.code}: ${error.stderr}`,
  );

/** Keys for two patients and a tenant's identifier secret, and an envelope under each key. */
const fill = async (settings: KeyStoreSettings, kek: LocalKek): Promise<Encrypted[]> => {
  const store = await openKeyStore(settings, kek);
  try {
    await store.identifierSecret(1);
    return [
      encryptJson({ name: 'Anna' }, await store.getOrCreate(1, 'Patient/1'), 'event-1'),
      encryptJson({ name: 'Bert' }, await store.getOrCreate(1, 'Patient/2'), 'event-2'),
    ];
  } finally {
    await store.close();
  }
};

/** What the envelopes hold, decrypted with the key store under `kek`. */
const read = async (settings: KeyStoreSettings, kek: LocalKek, envelopes: Encrypted[]) => {
  const store = await openKeyStore(settings, kek);
  try {
    return await Promise.all(
      envelopes.map(async (e, i) => decryptJson(e, await store.get(1, e.key), `event-${i + 1}`)),
    );
  } finally {
    await store.close();
  }
};

const newKekText = () => randomBytes(32).toString('base64');

describe('casebook keys rotate', function () {
  this.timeout(120_000);
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'casebook-rotate-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('on the embedded default: re-wraps every key, prints how many, and replaces the KEK file', async () => {
    const data = join(dir, 'data');
    const settings = { dataDir: data };
    const made = loadKek(settings);
    expect(made.made).to.be.a('string');
    const envelopes = await fill(settings, made.kek as LocalKek);
    const keysBefore = keyFiles(data);

    const text = newKekText();
    const out = JSON.parse(await cli(['keys', 'rotate'], { DATA_DIR: data, CASEBOOK_NEW_KEK: text }));
    const newKek = parseKek(text, 'new');
    expect(out).to.deep.include({ rewrapped: 3, from: made.kek.id, to: newKek.id });
    expect(out.next).to.include(made.path);

    expect(readFileSync(made.path!, 'utf8').trim()).to.equal(text);
    expect(statSync(made.path!).mode & 0o777).to.equal(0o600);
    expect(keyFiles(data)).not.to.equal(keysBefore);
    const reloaded = loadKek(settings);
    expect(reloaded.kek.id).to.equal(newKek.id);
    expect(await read(settings, newKek, envelopes)).to.deep.equal([{ name: 'Anna' }, { name: 'Bert' }]);
  });

  it('refuses without a new KEK, or with the KEK in use, and changes nothing', async () => {
    const data = join(dir, 'data');
    const made = loadKek({ dataDir: data });
    await fill({ dataDir: data }, made.kek as LocalKek);
    const before = keyFiles(data);
    expect(await failure(['keys', 'rotate'], { DATA_DIR: data })).to.match(
      /^1: casebook: keys rotate needs the new KEK: set CASEBOOK_NEW_KEK/,
    );
    const current = readFileSync(made.path!, 'utf8');
    expect(await failure(['keys', 'rotate'], { DATA_DIR: data, CASEBOOK_NEW_KEK: current })).to.match(
      /^1: casebook: the new KEK is the KEK in use/,
    );
    const short = randomBytes(31).toString('base64');
    const refused = await failure(['keys', 'rotate'], { DATA_DIR: data, CASEBOOK_NEW_KEK: short });
    expect(refused).to.match(/^1: casebook: invalid configuration: CASEBOOK_NEW_KEK decodes to 31 bytes/);
    expect(refused).not.to.include(short);
    expect(keyFiles(data)).to.equal(before);
    expect(readFileSync(made.path!, 'utf8')).to.equal(current);
  });

  describe('on PostgreSQL', () => {
    const schema = `k_${randomBytes(5).toString('hex')}`;
    const settings = { dataDir: 'memory://', databaseUrl: POSTGRES_TEST_URL, keyStoreSchema: schema };
    const env = { DATABASE_URL: POSTGRES_TEST_URL, KEY_STORE_SCHEMA: schema };
    after(async () => {
      const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
      await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await admin.close();
    });
    /** Every row of the key store's tables. */
    const dump = async () => {
      const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
      try {
        const rows = await admin.query<{ row: string }>(
          `SELECT row_to_json(k)::text AS row FROM ${schema}.data_keys k
           UNION ALL SELECT row_to_json(s)::text FROM ${schema}.identifier_secrets s
           UNION ALL SELECT row_to_json(e)::text FROM ${schema}.kek e ORDER BY 1`,
        );
        return rows.map((r) => r.row).join('\n');
      } finally {
        await admin.close();
      }
    };

    it('a wrong old KEK exits non-zero naming both KEKs, and nothing changes; the right one rotates', async () => {
      const oldText = newKekText();
      const oldKek = parseKek(oldText, 'old');
      const envelopes = await fill(settings, oldKek);
      const before = await dump();
      const newText = newKekText();
      const newFile = join(dir, 'new.kek');
      writeFileSync(newFile, `${newText}\n`);

      const refused = await failure(['keys', 'rotate', '--new-kek-file', newFile], {
        ...env,
        CASEBOOK_KEK: newKekText(),
      });
      expect(refused).to.match(
        /^1: casebook: the key store \(schema k_[0-9a-f]+\) is wrapped under KEK [0-9a-f]{16}/,
      );
      expect(refused).to.include(oldKek.id);
      expect(await dump()).to.equal(before);

      expect(await failure(['keys', 'rotate', '--new-kek-file', newFile], env)).to.match(
        /^1: casebook: invalid configuration: casebook on PostgreSQL \(DATABASE_URL\) needs a key-encryption key/,
      );

      const out = JSON.parse(
        await cli(['keys', 'rotate', '--new-kek-file', newFile], { ...env, CASEBOOK_KEK: oldText }),
      );
      const newKek = parseKek(newText, 'new');
      expect(out).to.deep.include({ rewrapped: 3, from: oldKek.id, to: newKek.id });
      expect(out.next).to.match(/CASEBOOK_KEK/);
      expect(await dump()).not.to.equal(before);
      expect(await read(settings, newKek, envelopes)).to.deep.equal([{ name: 'Anna' }, { name: 'Bert' }]);
      // The old KEK no longer opens the key store.
      expect(
        await failure(['keys', 'rotate'], { ...env, CASEBOOK_KEK: oldText, CASEBOOK_NEW_KEK: newKekText() }),
      ).to.match(/^1: casebook: the key store .* is wrapped under KEK/);
    });
  });
});
