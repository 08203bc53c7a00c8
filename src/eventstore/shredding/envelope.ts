/**
 * The envelope of an encrypted JSON value (docs/architecture.md "Erasure", Envelope): AES-256-GCM
 * under a data key of the key store, stored as a small JSON object in place of the value:
 *
 *     {"$enc":1,"key":"<data key id>","iv":"<base64url>","ct":"<base64url>","tag":"<base64url>"}
 *
 * `$enc` is the format version; `key` the id of the data key (opaque, names no patient); `iv` 12
 * random bytes; `ct` the ciphertext of the value's JSON text (UTF-8); `tag` the 16-byte GCM tag.
 * The associated data binds the ciphertext to its place: `casebook-enc:1:<key id>:<aad>`, where
 * the caller's `aad` names where the value is stored (an event's id), so a ciphertext copied into
 * another event, or under another key id, does not decrypt.
 *
 * Decrypting tells apart a key that was destroyed (the data was erased: {@link DataKeyDestroyed}),
 * a key the key store does not hold ({@link DataKeyUnknown}) and bytes that do not authenticate
 * (tampered, another place, another key: {@link UndecryptableData}).
 */
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { nonSecretRandomBytes } from '../../domain/ids.js';

/** A data key in the clear: its id (what envelopes name) and its 32 bytes. */
export interface DataKey {
  readonly id: string;
  readonly key: Buffer;
}

/** An encrypted JSON value as stored. */
export interface Encrypted {
  readonly $enc: 1;
  readonly key: string;
  readonly iv: string;
  readonly ct: string;
  readonly tag: string;
}

/** What the key store answers for a key id: the key, `destroyed` (erased), or undefined (never held). */
export type DataKeyLookup = DataKey | 'destroyed' | undefined;

/** The envelope names a data key that was destroyed: the value was erased, on purpose. */
export class DataKeyDestroyed extends Error {
  constructor(readonly keyId: string) {
    super(`data key ${keyId} was destroyed: the value it encrypted is erased`);
    this.name = 'DataKeyDestroyed';
  }
}

/** The envelope names a data key the key store does not hold (a log restored without its key store). */
export class DataKeyUnknown extends Error {
  constructor(readonly keyId: string) {
    super(`data key ${keyId} is not in the key store`);
    this.name = 'DataKeyUnknown';
  }
}

/**
 * The envelope does not authenticate: its bytes were altered, it was moved to another place (the
 * associated data differs), or it is decrypted with another key. Never a sign of erasure.
 */
export class UndecryptableData extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UndecryptableData';
  }
}

const IV_BYTES = 12;
const TAG_BYTES = 16;
const ENVELOPE_KEYS = ['$enc', 'ct', 'iv', 'key', 'tag'];

const associatedData = (keyId: string, aad: string): Buffer =>
  Buffer.from(`casebook-enc:1:${keyId}:${aad}`, 'utf8');

/**
 * Whether `value` is an envelope: an object with exactly the fields `$enc` (1), `key`, `iv`, `ct`
 * and `tag`, all strings but `$enc`. A FHIR resource never has a `$enc` field.
 */
export const isEncrypted = (value: unknown): value is Encrypted => {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const v = value as Record<string, unknown>;
  if (v.$enc !== 1) return false;
  const keys = Object.keys(v).sort();
  return (
    keys.length === ENVELOPE_KEYS.length &&
    keys.every((k, i) => k === ENVELOPE_KEYS[i]) &&
    typeof v.key === 'string' &&
    typeof v.iv === 'string' &&
    typeof v.ct === 'string' &&
    typeof v.tag === 'string'
  );
};

/**
 * Encrypts `value`'s JSON text under `dataKey`, bound to `aad` (where it will be stored: an event id).
 * @throws {TypeError} when `value` has no JSON text (undefined, a function).
 */
export const encryptJson = (value: unknown, dataKey: DataKey, aad: string): Encrypted => {
  const text = JSON.stringify(value) as string | undefined;
  if (text === undefined) throw new TypeError('only a JSON value can be encrypted');
  const iv = nonSecretRandomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', dataKey.key, iv);
  cipher.setAAD(associatedData(dataKey.id, aad));
  const ct = Buffer.concat([cipher.update(text, 'utf8'), cipher.final()]);
  return {
    $enc: 1,
    key: dataKey.id,
    iv: iv.toString('base64url'),
    ct: ct.toString('base64url'),
    tag: cipher.getAuthTag().toString('base64url'),
  };
};

/**
 * The JSON value in `envelope`, decrypted with what the key store answered for `envelope.key`.
 * @param dataKey the key store's answer for the envelope's key id (a keyring's lookup).
 * @param aad the place the envelope was encrypted for (the same string as at encryption).
 * @throws {DataKeyDestroyed} when the key was destroyed (the value is erased).
 * @throws {DataKeyUnknown} when the key store does not hold the key.
 * @throws {UndecryptableData} when the envelope does not authenticate with this key and place
 *   (altered bytes, another `aad`, a key of another id), or is malformed.
 */
export const decryptJson = (envelope: Encrypted, dataKey: DataKeyLookup, aad: string): unknown => {
  if (dataKey === 'destroyed') throw new DataKeyDestroyed(envelope.key);
  if (dataKey === undefined) throw new DataKeyUnknown(envelope.key);
  if (dataKey.id !== envelope.key)
    throw new UndecryptableData(`the envelope names data key ${envelope.key}, not ${dataKey.id}`);
  const iv = Buffer.from(envelope.iv, 'base64url');
  const tag = Buffer.from(envelope.tag, 'base64url');
  if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES)
    throw new UndecryptableData('the envelope is malformed (its iv or tag has the wrong length)');
  let text: string;
  try {
    const decipher = createDecipheriv('aes-256-gcm', dataKey.key, iv);
    decipher.setAAD(associatedData(envelope.key, aad));
    decipher.setAuthTag(tag);
    text = Buffer.concat([decipher.update(Buffer.from(envelope.ct, 'base64url')), decipher.final()]).toString(
      'utf8',
    );
  } catch {
    throw new UndecryptableData(
      `the envelope under data key ${envelope.key} does not authenticate: altered, moved from another place, or another key`,
    );
  }
  return JSON.parse(text);
};
