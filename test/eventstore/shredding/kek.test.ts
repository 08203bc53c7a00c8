/**
 * The key-encryption key from configuration (docs/architecture.md "Erasure", KEK): CASEBOOK_KEK,
 * CASEBOOK_KEK_FILE, the KEK the embedded default makes and keeps, and the refusals — each naming
 * the variable, never its value.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { loadConfig } from '../../../src/config.js';
import { createFileExclusive } from '../../../src/eventstore/shredding/durable-file.js';
import {
  EMBEDDED_KEK_FILE,
  KekConfigurationError,
  LocalKek,
  loadKek,
  parseKek,
  WrongKek,
} from '../../../src/eventstore/shredding/kek.js';

/** What `openssl rand -base64 32` prints. */
const opensslKek = () => `${randomBytes(32).toString('base64')}\n`;

describe('KEK (CASEBOOK_KEK, CASEBOOK_KEK_FILE, the embedded default)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'casebook-kek-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('reads what openssl rand -base64 32 prints, and names it by 8 bytes of its SHA-256', () => {
    const text = opensslKek();
    const kek = parseKek(text, 'CASEBOOK_KEK');
    const expected = createHash('sha256')
      .update(Buffer.from(text.trim(), 'base64'))
      .digest('hex')
      .slice(0, 16);
    expect(kek.id).to.equal(expected);
    expect(JSON.stringify(kek)).to.equal(JSON.stringify({ id: expected }));
  });

  it('refuses bad base64, 31 bytes, 33 bytes and an empty value, naming the variable, never the value', () => {
    const short = randomBytes(31).toString('base64');
    const long = randomBytes(33).toString('base64');
    const cases: [string, RegExp][] = [
      ['not base64 at all!', /CASEBOOK_KEK is not base64/],
      ['c2VjcmV0*', /CASEBOOK_KEK is not base64/],
      [short, /CASEBOOK_KEK decodes to 31 bytes/],
      [long, /CASEBOOK_KEK decodes to 33 bytes/],
      ['  ', /CASEBOOK_KEK is empty/],
    ];
    for (const [value, message] of cases) {
      let error: unknown;
      try {
        parseKek(value, 'CASEBOOK_KEK');
      } catch (e) {
        error = e;
      }
      expect(error).to.be.instanceOf(KekConfigurationError);
      expect((error as Error).message)
        .to.match(message)
        .and.to.match(/openssl rand -base64 32/);
      if (value.trim()) expect((error as Error).message).not.to.include(value.trim());
    }
  });

  it('loadConfig refuses a CASEBOOK_KEK of 31 bytes without echoing it, and takes a good one', () => {
    const short = randomBytes(31).toString('base64');
    expect(() => loadConfig({ CASEBOOK_KEK: short }))
      .to.throw(/invalid configuration: CASEBOOK_KEK decodes to 31 bytes/)
      .with.property('message')
      .that.does.not.include(short);
    const good = opensslKek().trim();
    const config = loadConfig({ CASEBOOK_KEK: good, KEY_STORE_SCHEMA: 'keys_2' });
    expect(config.keys).to.deep.equal({
      kek: good,
      kekFile: undefined,
      storeUrl: undefined,
      storeSchema: 'keys_2',
    });
    // Unset: casebook_keys, or <schema>_keys beside an event store outside public (chosen at open).
    expect(loadConfig({}).keys.storeSchema).to.equal(undefined);
    expect(() => loadConfig({ KEY_STORE_SCHEMA: 'Bad-Name' })).to.throw(/KEY_STORE_SCHEMA/);
  });

  it('reads CASEBOOK_KEK_FILE, and refuses a missing or bad file naming it', () => {
    const text = opensslKek();
    const file = join(dir, 'kek.b64');
    writeFileSync(file, text);
    const loaded = loadKek({ kekFile: file, dataDir: dir, databaseUrl: 'postgres://x' });
    expect(loaded.origin).to.equal('CASEBOOK_KEK_FILE');
    expect(loaded.kek.id).to.equal(parseKek(text, 'x').id);
    expect(loaded.made).to.equal(undefined);
    expect(() => loadKek({ kekFile: join(dir, 'missing'), dataDir: dir })).to.throw(
      KekConfigurationError,
      /CASEBOOK_KEK_FILE \(.*missing\) cannot be read: ENOENT/,
    );
    writeFileSync(file, randomBytes(31).toString('base64'));
    expect(() => loadKek({ kekFile: file, dataDir: dir })).to.throw(
      /CASEBOOK_KEK_FILE .* decodes to 31 bytes/,
    );
  });

  it('prefers CASEBOOK_KEK, refuses both at once', () => {
    const text = opensslKek();
    expect(loadKek({ kek: text, dataDir: dir }).origin).to.equal('CASEBOOK_KEK');
    expect(() => loadKek({ kek: text, kekFile: join(dir, 'f'), dataDir: dir })).to.throw(/not both/);
  });

  it('refuses to start on PostgreSQL without a KEK, saying what to set', () => {
    for (const settings of [{ databaseUrl: 'postgres://db/casebook' }, { keyStoreUrl: 'postgres://keys/k' }])
      expect(() => loadKek({ dataDir: dir, ...settings })).to.throw(
        KekConfigurationError,
        /needs a key-encryption key: set CASEBOOK_KEK .*openssl rand -base64 32.*CASEBOOK_KEK_FILE/,
      );
  });

  it('the embedded default makes a KEK in its data directory (0600), says where, and reuses it', () => {
    const data = join(dir, 'data');
    const first = loadKek({ dataDir: data });
    const path = join(data, EMBEDDED_KEK_FILE);
    expect(first).to.include({ origin: 'data directory', made: path, path });
    expect(statSync(path).mode & 0o777).to.equal(0o600);
    const text = readFileSync(path, 'utf8');
    expect(Buffer.from(text.trim(), 'base64')).to.have.length(32);
    expect(first.kek.id).to.equal(parseKek(text, 'x').id);
    const second = loadKek({ dataDir: data });
    expect(second.made).to.equal(undefined);
    expect(second.kek.id).to.equal(first.kek.id);
    expect(readFileSync(path, 'utf8')).to.equal(text);
    // No temporary file is left beside it.
    expect(readdirSync(data).filter((name) => name.endsWith('.tmp'))).to.deep.equal([]);
  });

  it('a KEK file made first by another process is kept, not overwritten', () => {
    const path = join(dir, EMBEDDED_KEK_FILE);
    const theirs = opensslKek();
    expect(createFileExclusive(path, theirs)).to.equal(true);
    expect(createFileExclusive(path, opensslKek())).to.equal(false);
    expect(readFileSync(path, 'utf8')).to.equal(theirs);
    expect(loadKek({ dataDir: dir }).kek.id).to.equal(parseKek(theirs, 'x').id);
    expect(readdirSync(dir)).to.deep.equal([EMBEDDED_KEK_FILE]);
  });

  it('never overwrites a KEK file it cannot read, and makes none when told not to', () => {
    const path = join(dir, EMBEDDED_KEK_FILE);
    writeFileSync(path, 'garbage');
    expect(() => loadKek({ dataDir: dir })).to.throw(/the KEK file .*casebook\.kek is not base64/);
    expect(readFileSync(path, 'utf8')).to.equal('garbage');
    rmSync(path);
    expect(() => loadKek({ dataDir: dir }, { make: false })).to.throw(/no KEK/);
  });

  it('keeps nothing for DATA_DIR=memory://', () => {
    const loaded = loadKek({ dataDir: 'memory://' });
    expect(loaded.origin).to.equal('memory');
    expect(loaded.made).to.equal(undefined);
  });

  it('wraps and unwraps a data key bound to its place; another KEK or place is a WrongKek', async () => {
    const kek = LocalKek.random();
    const key = randomBytes(32);
    const wrapped = await kek.wrap(key, 'casebook-dek:1:1:abc');
    expect(wrapped).to.have.length(12 + 32 + 16);
    expect(await kek.unwrap(wrapped, 'casebook-dek:1:1:abc')).to.deep.equal(key);
    await kek.unwrap(wrapped, 'casebook-dek:1:2:abc').then(
      () => expect.fail('unwrapped in another place'),
      (error) => expect(error).to.be.instanceOf(WrongKek),
    );
    await LocalKek.random()
      .unwrap(wrapped, 'casebook-dek:1:1:abc')
      .then(
        () => expect.fail('unwrapped with another KEK'),
        (error) => expect(error).to.be.instanceOf(WrongKek),
      );
  });
});
