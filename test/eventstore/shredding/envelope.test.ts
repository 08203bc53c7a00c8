/**
 * The envelope of an encrypted JSON value (docs/architecture.md "Erasure", Envelope): a round trip,
 * and every way a stored envelope can fail told apart — tampered, moved, another key, an erased key.
 */
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import {
  type DataKey,
  DataKeyDestroyed,
  DataKeyUnknown,
  decryptJson,
  type Encrypted,
  encryptJson,
  isEncrypted,
  UndecryptableData,
} from '../../../src/eventstore/shredding/envelope.js';

const dataKey = (id = 'k1'): DataKey => ({ id, key: randomBytes(32) });

const patient = {
  resourceType: 'Patient',
  name: [{ family: 'Müller', given: ['Anna'] }],
  birthDate: '1961-04-12',
  identifier: [{ system: 'urn:mrn', value: 'MRN-004711' }],
};

/** `envelope` with byte `at` of its ciphertext flipped. */
const flipped = (envelope: Encrypted, at = 0): Encrypted => {
  const ct = Buffer.from(envelope.ct, 'base64url');
  ct[at] = ct[at]! ^ 0x01;
  return { ...envelope, ct: ct.toString('base64url') };
};

describe('envelope (AES-256-GCM of a JSON value)', () => {
  it('decrypts what it encrypted, for every kind of JSON value', () => {
    const key = dataKey();
    for (const value of [patient, 'text', 0, true, null, [1, 'two', { three: 3 }]]) {
      const envelope = encryptJson(value, key, 'event-1');
      expect(isEncrypted(envelope)).to.equal(true);
      expect(decryptJson(envelope, key, 'event-1')).to.deep.equal(value);
    }
  });

  it('stores a compact object naming the key, with none of the plaintext', () => {
    const key = dataKey('key-abc');
    const envelope = encryptJson(patient, key, 'event-1');
    expect(Object.keys(envelope).sort()).to.deep.equal(['$enc', 'ct', 'iv', 'key', 'tag']);
    expect(envelope.$enc).to.equal(1);
    expect(envelope.key).to.equal('key-abc');
    expect(Buffer.from(envelope.iv, 'base64url')).to.have.length(12);
    expect(Buffer.from(envelope.tag, 'base64url')).to.have.length(16);
    const stored = JSON.stringify(envelope);
    for (const phi of ['Müller', 'Anna', '1961-04-12', 'MRN-004711']) expect(stored).not.to.include(phi);
    // A fresh IV each time: the same value never encrypts to the same bytes.
    expect(encryptJson(patient, key, 'event-1').ct).not.to.equal(envelope.ct);
  });

  it('refuses a flipped ciphertext byte, a flipped tag and a flipped IV as undecryptable', () => {
    const key = dataKey();
    const envelope = encryptJson(patient, key, 'event-1');
    expect(() => decryptJson(flipped(envelope), key, 'event-1')).to.throw(UndecryptableData);
    expect(() => decryptJson(flipped(envelope, 10), key, 'event-1')).to.throw(UndecryptableData);
    const tag = Buffer.from(envelope.tag, 'base64url');
    tag[0] = tag[0]! ^ 0x80;
    expect(() => decryptJson({ ...envelope, tag: tag.toString('base64url') }, key, 'event-1')).to.throw(
      UndecryptableData,
    );
    const iv = Buffer.from(envelope.iv, 'base64url');
    iv[11] = iv[11]! ^ 0x01;
    expect(() => decryptJson({ ...envelope, iv: iv.toString('base64url') }, key, 'event-1')).to.throw(
      UndecryptableData,
    );
  });

  it('refuses an envelope moved to another place (another associated data)', () => {
    const key = dataKey();
    const envelope = encryptJson(patient, key, 'event-1');
    expect(() => decryptJson(envelope, key, 'event-2')).to.throw(UndecryptableData, /does not authenticate/);
  });

  it('refuses another key of the same id, and a key of another id', () => {
    const envelope = encryptJson(patient, dataKey('k1'), 'event-1');
    expect(() => decryptJson(envelope, dataKey('k1'), 'event-1')).to.throw(UndecryptableData);
    expect(() => decryptJson(envelope, dataKey('k2'), 'event-1')).to.throw(
      UndecryptableData,
      /names data key k1/,
    );
    // Renaming the key in the envelope does not help: the key id is part of the associated data.
    const key2 = dataKey('k2');
    expect(() => decryptJson({ ...envelope, key: 'k2' }, key2, 'event-1')).to.throw(UndecryptableData);
  });

  it('tells an erased key and an unknown key apart from tampering', () => {
    const envelope = encryptJson(patient, dataKey('k1'), 'event-1');
    expect(() => decryptJson(envelope, 'destroyed', 'event-1'))
      .to.throw(DataKeyDestroyed)
      .with.property('keyId', 'k1');
    expect(() => decryptJson(envelope, undefined, 'event-1'))
      .to.throw(DataKeyUnknown)
      .with.property('keyId', 'k1');
    for (const error of [DataKeyDestroyed, DataKeyUnknown])
      expect(new error('k1')).not.to.be.instanceOf(UndecryptableData);
  });

  it('refuses a malformed envelope as undecryptable', () => {
    const key = dataKey();
    const envelope = encryptJson(patient, key, 'event-1');
    expect(() => decryptJson({ ...envelope, iv: 'AAAA' }, key, 'event-1')).to.throw(
      UndecryptableData,
      /malformed/,
    );
  });

  it('tells envelopes from other values', () => {
    const envelope = encryptJson(1, dataKey(), 'a');
    expect(isEncrypted(envelope)).to.equal(true);
    expect(isEncrypted(JSON.parse(JSON.stringify(envelope)))).to.equal(true);
    for (const value of [
      patient,
      null,
      'x',
      [envelope],
      { ...envelope, $enc: 2 },
      { ...envelope, extra: 1 },
      { ...envelope, ct: 1 },
      { $enc: 1, key: 'k', iv: 'i', ct: 'c' },
    ])
      expect(isEncrypted(value), JSON.stringify(value)).to.equal(false);
  });

  it('refuses to encrypt what has no JSON text', () => {
    expect(() => encryptJson(undefined, dataKey(), 'a')).to.throw(TypeError);
  });
});
