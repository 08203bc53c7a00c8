/**
 * What an event store keeps of an event's data (docs/architecture.md "Erasure"): the data of an
 * event that holds a patient's PHI is stored encrypted under that patient's data key (AES-256-GCM,
 * bound to the event id: {@link encryptJson}); everything else as it is. Reads decrypt; an event
 * whose key was destroyed reads as erased (`data` null, `erased` true), never as an error. Keys
 * are looked up once per batch (a {@link Keyring} per append and per page read), never per event.
 */
import type { DecodeTypes, NewEvent, RecordedEvent } from '../port.js';
import { DataKeyDestroyed, type DataKeyLookup, decryptJson, encryptJson, isEncrypted } from './envelope.js';
import { Keyring, type KeyStore } from './key-store.js';

/**
 * Whose data key encrypts an event's data: a subject (`Patient/<id>`) or undefined to store it as
 * it is. Pure; given the event as appended, in plaintext (src/fhir/phi.ts `phiSubjectOf`).
 */
export type SubjectOf = (type: string, data: unknown) => string | undefined;

/**
 * Whether an event of `type` creates its subject (its key cannot exist yet): a hint that saves the
 * key store a lookup (src/fhir/phi.ts `createsPhiSubject`).
 */
export type CreatesSubject = (type: string) => boolean;

/** Thrown when an event about an erased patient is appended: its key is gone, nothing is written. */
export class SubjectErased extends Error {
  override readonly name = 'SubjectErased';
  constructor(readonly subject: string) {
    super(`${subject} was erased: nothing more is recorded about it`);
  }
}

/** How an event store encodes what it stores and decodes what it reads. */
export interface EventCodec {
  /**
   * The data to store for each event, in order: an envelope ({@link isEncrypted}) or the data as
   * it is. One keyring for the whole call.
   * @throws {SubjectErased} when an event's subject was erased.
   */
  encode(events: readonly NewEvent[]): Promise<unknown[]>;
  /**
   * The events with their data decrypted (one keyring for the whole call); an event whose key was
   * destroyed comes back erased. Events without envelopes come back as they are.
   * @throws {DataKeyUnknown} when the key store does not hold an envelope's key (a log restored
   *   without its key store, the wrong key store): an error, never read as erased.
   * @throws {UndecryptableData} when an envelope does not authenticate (tampered, moved).
   */
  decode<E extends RecordedEvent>(events: readonly E[]): Promise<E[]>;
  /**
   * A decode whose calls share one keyring, for a subscription that decodes its events one at a
   * time: a key is looked up once per decoder, not once per event. The caller makes a new one
   * often enough (every few hundred events, every second) to see keys destroyed meanwhile.
   */
  decoder(): <E extends RecordedEvent>(events: readonly E[]) => Promise<E[]>;
}

/** `events` with their data decrypted through `keyring` (erased where its key was destroyed). */
const decodeWith = async <E extends RecordedEvent>(keyring: Keyring, events: readonly E[]): Promise<E[]> => {
  if (!events.some((e) => isEncrypted(e.data))) return [...events];
  return Promise.all(
    events.map(async (event) => {
      if (!isEncrypted(event.data)) return event;
      const tenant = event.metadata.tenantId;
      const key: DataKeyLookup = tenant === null ? undefined : await keyring.byId(tenant, event.data.key);
      if (key === 'destroyed') return { ...event, data: null, erased: true as const };
      return { ...event, data: decryptJson(event.data, key, event.id) };
    }),
  );
};

/**
 * The crypto-shredding codec over `keys` (docs/architecture.md "Erasure"). The associated data of
 * each envelope is the event's id, so an envelope copied onto another event does not decrypt.
 * Events without a tenant are never encrypted (their data keys are per tenant).
 * @param createsSubject which events create their subject (a new patient): its key is inserted
 *   without a lookup first.
 */
export const shreddingCodec = (
  keys: KeyStore,
  subjectOf: SubjectOf,
  createsSubject: CreatesSubject = () => false,
): EventCodec => ({
  async encode(events) {
    const keyring = new Keyring(keys);
    const subjects = events.map((event) =>
      event.metadata.tenantId === null ? undefined : subjectOf(event.type, event.data ?? null),
    );
    // A subject one of the events creates (whichever comes first) needs no lookup of its key.
    const created = new Set(subjects.filter((subject, i) => subject && createsSubject(events[i]!.type)));
    return Promise.all(
      events.map(async (event, i) => {
        const data = event.data ?? null;
        const tenant = event.metadata.tenantId;
        const subject = subjects[i];
        if (subject === undefined || tenant === null) return data;
        try {
          const key = await keyring.forSubject(tenant, subject, { fresh: created.has(subject) });
          return encryptJson(data, key, event.id);
        } catch (error) {
          if (error instanceof DataKeyDestroyed) throw new SubjectErased(subject);
          throw error;
        }
      }),
    );
  },
  decode(events) {
    return decodeWith(new Keyring(keys), events);
  },
  decoder() {
    const keyring = new Keyring(keys);
    return (events) => decodeWith(keyring, events);
  },
});

/**
 * `events` decoded by `codec` where `decodeTypes` says so (all of them without it), the others as
 * stored (the port's {@link DecodeTypes}); in their order.
 */
export const decodeSome = async <E extends RecordedEvent>(
  codec: EventCodec,
  events: readonly E[],
  decodeTypes: DecodeTypes | undefined,
): Promise<E[]> => {
  if (!decodeTypes) return codec.decode(events);
  const chosen = events.filter((e) => decodeTypes(e.type));
  if (chosen.length === 0) return [...events];
  const decoded = await codec.decode(chosen);
  let next = 0;
  return events.map((e) => (decodeTypes(e.type) ? decoded[next++]! : e));
};
