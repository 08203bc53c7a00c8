/**
 * The key-encryption key (KEK; docs/architecture.md "Erasure"): the one secret from configuration
 * that wraps every data key and every tenant's identifier secret in the key store. It comes from
 * `CASEBOOK_KEK` (32 random bytes in base64, as `openssl rand -base64 32` prints) or
 * `CASEBOOK_KEK_FILE` (a file holding that base64); the embedded default makes one in its data
 * directory when neither is given. A server on PostgreSQL refuses to start without one.
 *
 * Behind {@link KeyEncryptionKey}, so that a KMS can wrap and unwrap later instead of a local key.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { nonSecretRandomBytes } from '../../domain/ids.js';
import { createFileExclusive, writeFileAtomic } from './durable-file.js';

/** Bytes of a KEK and of every key it wraps (AES-256). */
export const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * What wraps data keys. `wrap` and `unwrap` are async so that a KMS (a network call) can stand in
 * for the local key later.
 */
export interface KeyEncryptionKey {
  /**
   * Names the KEK without revealing it: the first 8 bytes of SHA-256 of the key, in hex (16
   * characters; `openssl base64 -d <<< "$CASEBOOK_KEK" | sha256sum | cut -c1-16`). Recorded with
   * every wrapped key, so a wrong KEK is named as such instead of failing as corrupt data.
   */
  readonly id: string;
  /**
   * Encrypts `key` (a data key or an identifier secret), bound to `context` (where the wrapped
   * bytes are stored: a row moved elsewhere does not unwrap).
   */
  wrap(key: Buffer, context: string): Promise<Buffer>;
  /** @throws {WrongKek} when `wrapped` was not wrapped by this KEK for `context` (or was altered). */
  unwrap(wrapped: Buffer, context: string): Promise<Buffer>;
}

/** A KEK that does not fit what is stored: another KEK wrapped it, or the stored bytes were altered. */
export class WrongKek extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WrongKek';
  }
}

/** A KEK setting that cannot be used. Its message names the variable or file, never the value. */
export class KekConfigurationError extends Error {
  constructor(message: string) {
    super(`invalid configuration: ${message}`);
    this.name = 'KekConfigurationError';
  }
}

/** The id of a KEK (see {@link KeyEncryptionKey.id}). */
export const kekId = (key: Buffer): string =>
  createHash('sha256').update(key).digest().subarray(0, 8).toString('hex');

/**
 * A KEK held in this process. Wrapped form: IV (12 bytes) ‖ AES-256-GCM ciphertext ‖ tag (16 bytes),
 * with `context` as the associated data.
 */
export class LocalKek implements KeyEncryptionKey {
  readonly id: string;
  readonly #key: Buffer;
  /** @throws {RangeError} unless `key` is 32 bytes. */
  constructor(key: Buffer) {
    if (key.length !== KEY_BYTES) throw new RangeError(`a KEK is ${KEY_BYTES} bytes, not ${key.length}`);
    this.#key = Buffer.from(key);
    this.id = kekId(key);
  }
  /** A new random KEK (for an in-memory store, or tests). */
  static random(): LocalKek {
    return new LocalKek(randomBytes(KEY_BYTES));
  }
  async wrap(key: Buffer, context: string): Promise<Buffer> {
    const iv = nonSecretRandomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv);
    cipher.setAAD(Buffer.from(context, 'utf8'));
    const ct = Buffer.concat([cipher.update(key), cipher.final()]);
    return Buffer.concat([iv, ct, cipher.getAuthTag()]);
  }
  async unwrap(wrapped: Buffer, context: string): Promise<Buffer> {
    if (wrapped.length < IV_BYTES + TAG_BYTES)
      throw new WrongKek(`a wrapped key of ${wrapped.length} bytes is too short`);
    const decipher = createDecipheriv('aes-256-gcm', this.#key, wrapped.subarray(0, IV_BYTES));
    decipher.setAAD(Buffer.from(context, 'utf8'));
    decipher.setAuthTag(wrapped.subarray(wrapped.length - TAG_BYTES));
    try {
      return Buffer.concat([
        decipher.update(wrapped.subarray(IV_BYTES, wrapped.length - TAG_BYTES)),
        decipher.final(),
      ]);
    } catch {
      throw new WrongKek(
        `KEK ${this.id} does not unwrap the key stored for ${context}: another KEK wrapped it, or it was altered`,
      );
    }
  }
  /** Never print the key (util.inspect, a logger serialising an object holding it). */
  toJSON(): { id: string } {
    return { id: this.id };
  }
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * A KEK from its base64 text (surrounding white space, such as a file's last newline, ignored).
 * @param name what the text came from, for the error (`CASEBOOK_KEK`, `CASEBOOK_KEK_FILE (/etc/casebook/kek)`).
 * @throws {KekConfigurationError} naming `name` — never the value — when the text is not base64 or
 *   does not decode to exactly 32 bytes.
 */
export const parseKek = (text: string, name: string): LocalKek => {
  const trimmed = text.trim();
  const advice = `a KEK is ${KEY_BYTES} random bytes in base64, as \`openssl rand -base64 32\` prints`;
  if (trimmed === '') throw new KekConfigurationError(`${name} is empty; ${advice}`);
  if (!BASE64.test(trimmed) || trimmed.length % 4 !== 0)
    throw new KekConfigurationError(`${name} is not base64; ${advice}`);
  const key = Buffer.from(trimmed, 'base64');
  if (key.length !== KEY_BYTES)
    throw new KekConfigurationError(`${name} decodes to ${key.length} bytes; ${advice}`);
  return new LocalKek(key);
};

/** Where the embedded default keeps the KEK it made: in its data directory. */
export const EMBEDDED_KEK_FILE = 'casebook.kek';

/** The KEK settings and what decides whether one may be made. */
export interface KekSettings {
  /** CASEBOOK_KEK: the base64 text. */
  readonly kek?: string | undefined;
  /** CASEBOOK_KEK_FILE: a file holding the base64 text. */
  readonly kekFile?: string | undefined;
  /** DATA_DIR (`memory://`: nothing is kept). */
  readonly dataDir: string;
  /** DATABASE_URL: on a server, the KEK must be configured. */
  readonly databaseUrl?: string | undefined;
  /** KEY_STORE_URL: a key store on a server needs a configured KEK as well. */
  readonly keyStoreUrl?: string | undefined;
}

/** The KEK to use and where it came from. */
export interface LoadedKek {
  readonly kek: KeyEncryptionKey;
  readonly origin: 'CASEBOOK_KEK' | 'CASEBOOK_KEK_FILE' | 'data directory' | 'memory';
  /** The file it was read from or kept in (CASEBOOK_KEK_FILE, or the data directory's). */
  readonly path?: string;
  /**
   * Set when this call made the KEK (the embedded default's first start): the file it is in, for
   * the caller to log "made a KEK at <path>; back it up apart from the data".
   */
  readonly made?: string;
}

/**
 * The KEK of a casebook (docs/architecture.md "Erasure"): CASEBOOK_KEK, else CASEBOOK_KEK_FILE;
 * with neither, on the embedded default, the KEK in `<DATA_DIR>/casebook.kek`, made on first use
 * (32 bytes of `crypto.randomBytes`, mode 0600, created atomically so that two processes starting
 * at once keep one) and read on every later start; with `DATA_DIR=memory://` a random one for the
 * life of the process.
 * @param options.make false: refuse instead of making a KEK (`casebook keys rotate`: nothing to rotate).
 * @throws {KekConfigurationError} when both variables are set, a value is not a KEK, the file cannot
 *   be read, none is found with `make: false`, or neither is set on a server (DATABASE_URL or KEY_STORE_URL): a KEK made beside a
 *   server's data would be lost with the machine, and every key it wraps with it.
 */
export const loadKek = (settings: KekSettings, options: { make?: boolean } = {}): LoadedKek => {
  const { kek, kekFile, dataDir } = settings;
  if (kek && kekFile) throw new KekConfigurationError('set CASEBOOK_KEK or CASEBOOK_KEK_FILE, not both');
  if (kek) return { kek: parseKek(kek, 'CASEBOOK_KEK'), origin: 'CASEBOOK_KEK' };
  if (kekFile) {
    const path = resolve(kekFile);
    return { kek: readKekFile(path, `CASEBOOK_KEK_FILE (${path})`), origin: 'CASEBOOK_KEK_FILE', path };
  }
  if (settings.databaseUrl || settings.keyStoreUrl)
    throw new KekConfigurationError(
      `casebook on PostgreSQL (${settings.databaseUrl ? 'DATABASE_URL' : 'KEY_STORE_URL'}) needs a key-encryption key: set CASEBOOK_KEK to the output of \`openssl rand -base64 32\` (or CASEBOOK_KEK_FILE to a file holding it), and keep it apart from the database and its backups (docs/architecture.md "Erasure")`,
    );
  if (dataDir === 'memory://') return { kek: LocalKek.random(), origin: 'memory' };
  mkdirSync(dataDir, { recursive: true });
  const path = resolve(join(dataDir, EMBEDDED_KEK_FILE));
  if (!existsSync(path)) {
    if (options.make === false)
      throw new KekConfigurationError(
        `no KEK: neither CASEBOOK_KEK nor CASEBOOK_KEK_FILE is set, and ${path} does not exist`,
      );
    const made = createFileExclusive(path, `${randomBytes(KEY_BYTES).toString('base64')}\n`, 0o600);
    // Another process may have made it first; either way the file now holds the one KEK.
    const loaded = readKekFile(path, `the KEK file ${path}`);
    return made
      ? { kek: loaded, origin: 'data directory', path, made: path }
      : { kek: loaded, origin: 'data directory', path };
  }
  return { kek: readKekFile(path, `the KEK file ${path}`), origin: 'data directory', path };
};

/**
 * The KEK in the file at `path` (its base64, as `openssl rand -base64 32 > file` writes it).
 * @param name what to call it in errors (`CASEBOOK_KEK_FILE (/etc/casebook/kek)`).
 * @throws {KekConfigurationError} when the file cannot be read or does not hold a KEK.
 */
export const readKekFile = (path: string, name: string): LocalKek => {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new KekConfigurationError(
      `${name} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`,
    );
  }
  return parseKek(text, name);
};

/**
 * Replaces the KEK file at `path` with `text` (a KEK's base64), atomically, mode 0600: after a
 * rotation of the embedded default, whose KEK lives in its data directory.
 * @throws {KekConfigurationError} when `text` is not a KEK (the file is left as it was).
 */
export const replaceKekFile = (path: string, text: string, name: string): void => {
  parseKek(text, name);
  writeFileAtomic(path, `${text.trim()}\n`, 0o600);
};
