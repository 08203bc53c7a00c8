/**
 * The key store's records in files, for the embedded default (docs/architecture.md "Erasure", Key
 * store): `<DATA_DIR>/keys/keys.json`, apart from the PGlite cluster that holds the log. The
 * embedded default is one process (its data directory is locked to it), so changes are serialised
 * by a mutex in this process.
 *
 * A new key or secret is one line appended (and fsynced) to the journal `keys.json.journal`: a
 * cost that does not grow with the number of keys; the keys of concurrent requests go in one
 * write and one fsync, off the event loop. A destruction or a rotation rewrites the
 * snapshot `keys.json` whole, atomically (a temporary file, fsync, rename), and then empties the
 * journal, so no copy of a destroyed key's wrapped bytes is left in either file. Opening replays
 * the journal over the snapshot — an entry only where the snapshot has none, so a key destroyed
 * after it was journalled stays destroyed — and compacts; a torn last line (a crash mid-append) is
 * dropped. The snapshot:
 *
 *     { "format": 1, "kek": "<KEK id>",
 *       "secrets": { "<tenant>": { "wrapped": "<base64>", "kek": "<KEK id>", "createdAt": "…" } },
 *       "keys": { "<tenant>:<subject hash>": { "id": "<key id>", "wrapped": "<base64>" | null,
 *                 "kek": "<KEK id>" | null, "createdAt": "…", "destroyedAt": null | "…" } } }
 */
import { existsSync, mkdirSync, readFileSync, truncateSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { writeFileAtomic } from './durable-file.js';
import type { KeyRecord, KeyRecords, RewrapItem, SecretRecord } from './key-store.js';
import { dataKeyContext, notUnderOldKek, rotatedAway, secretContext } from './key-store.js';

/** The key store file of a data directory. */
export const keyStoreFile = (dataDir: string): string => resolve(join(dataDir, 'keys', 'keys.json'));

interface StoredSecret {
  wrapped: string;
  kek: string;
  createdAt: string;
}

interface StoredKey {
  id: string;
  wrapped: string | null;
  kek: string | null;
  createdAt: string;
  destroyedAt: string | null;
}

interface KeyFile {
  format: 1;
  kek: string | null;
  secrets: Record<string, StoredSecret>;
  keys: Record<string, StoredKey>;
}

const emptyFile = (): KeyFile => ({ format: 1, kek: null, secrets: {}, keys: {} });

/** One journal line: what a change added (never a destruction: that rewrites the snapshot). */
type JournalEntry =
  | { readonly kek: string }
  | { readonly secret: string; readonly value: StoredSecret }
  | { readonly key: string; readonly value: StoredKey };

/** Applies a journal entry where the state has nothing yet (a later destruction or KEK wins). */
const replay = (state: KeyFile, e: JournalEntry): void => {
  if ('kek' in e) state.kek ??= e.kek;
  else if ('secret' in e) state.secrets[e.secret] ??= e.value;
  else state.keys[e.key] ??= e.value;
};

/** The journal beside a snapshot. */
const journalOf = (path: string): string => `${path}.journal`;

const keyRecord = (k: StoredKey): KeyRecord => ({
  keyId: k.id,
  wrapped: k.wrapped === null ? null : Buffer.from(k.wrapped, 'base64'),
  kekId: k.kek,
  destroyedAt: k.destroyedAt,
});

/** The entry of a (tenant, subject hash) in `keys`. */
const entry = (tenant: number, subjectHash: string) => `${tenant}:${subjectHash}`;

/** {@link KeyRecords} in one JSON file (or in memory only, for `DATA_DIR=memory://`). */
export class FileKeyRecords implements KeyRecords {
  readonly where: string;
  #state: KeyFile;
  /** `<tenant>\0<key id>` → its entry in `keys`. */
  #byId = new Map<string, string>();
  #queue: Promise<unknown> = Promise.resolve();
  /** Entries waiting for the next journal write ({@link FileKeyRecords.#append}). */
  readonly #pending: {
    entry: JournalEntry;
    check?: (state: KeyFile) => void;
    resolve: () => void;
    reject: (error: unknown) => void;
  }[] = [];

  private constructor(
    private readonly path: string | undefined,
    state: KeyFile,
  ) {
    this.where = path ?? 'memory';
    this.#state = state;
    this.#byId = FileKeyRecords.#index(state);
  }

  /**
   * The records in `path` (made with its directory, mode 0700, on the first change), or in memory
   * only when `path` is undefined.
   * @throws {Error} when the file exists but is not a key store file: it is never overwritten.
   */
  static open(path: string | undefined): FileKeyRecords {
    if (!path) return new FileKeyRecords(undefined, emptyFile());
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    let state = emptyFile();
    if (existsSync(path)) {
      try {
        state = JSON.parse(readFileSync(path, 'utf8')) as KeyFile;
      } catch (error) {
        throw new Error(`the key store file ${path} cannot be read: ${(error as Error).message}`);
      }
      if (state?.format !== 1 || typeof state.keys !== 'object' || typeof state.secrets !== 'object')
        throw new Error(`the key store file ${path} is not a casebook key store (format 1)`);
    }
    const journal = journalOf(path);
    if (existsSync(journal)) {
      const lines = readFileSync(journal, 'utf8').split('\n');
      for (const [i, line] of lines.entries()) {
        if (line.trim() === '') continue;
        try {
          replay(state, JSON.parse(line) as JournalEntry);
        } catch (error) {
          // Only the last line can be torn (a crash while it was appended): that change never was.
          if (i < lines.length - 2 || lines.slice(i + 1).some((l) => l.trim() !== ''))
            throw new Error(`the key store journal ${journal} cannot be read: ${(error as Error).message}`);
        }
      }
      // Compacted: the snapshot takes what the journal held.
      writeFileAtomic(path, `${JSON.stringify(state)}\n`, 0o600);
      truncateSync(journal, 0);
    }
    return new FileKeyRecords(path, state);
  }

  static #index(state: KeyFile): Map<string, string> {
    const index = new Map<string, string>();
    for (const [name, k] of Object.entries(state.keys)) index.set(`${name.split(':')[0]}\0${k.id}`, name);
    return index;
  }

  /**
   * Records `entry` (a new KEK id, secret or key): a line appended to the journal and fsynced,
   * then applied to the state. Entries recorded while a journal write is in flight go together in
   * the next one (one write and one fsync for a batch, off the event loop: a group commit, as
   * src/db/batcher.ts does for the database). A failed write changes nothing; `check` (run at the
   * entry's turn, after every earlier change) refuses an entry alone.
   */
  #append(entry: JournalEntry, check?: (state: KeyFile) => void): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#pending.push({ entry, ...(check ? { check } : {}), resolve, reject });
      if (this.#pending.length > 1) return; // a flush is scheduled already and takes it along
      const run = this.#queue.then(() => this.#flush());
      this.#queue = run.catch(() => undefined);
    });
  }

  /** Writes the pending entries to the journal (one append, one fsync), then applies them. */
  async #flush(): Promise<void> {
    const batch = this.#pending.splice(0);
    const accepted = batch.filter((w) => {
      try {
        w.check?.(this.#state);
        return true;
      } catch (error) {
        w.reject(error);
        return false;
      }
    });
    if (accepted.length === 0) return;
    if (this.path) {
      try {
        const journal = await open(journalOf(this.path), 'a', 0o600);
        try {
          await journal.appendFile(accepted.map((w) => `${JSON.stringify(w.entry)}\n`).join(''));
          await journal.sync();
        } finally {
          await journal.close();
        }
      } catch (error) {
        for (const w of accepted) w.reject(error);
        return;
      }
    }
    for (const { entry, resolve } of accepted) {
      replay(this.#state, entry);
      if ('key' in entry) this.#byId.set(`${entry.key.split(':')[0]}\0${entry.value.id}`, entry.key);
      resolve();
    }
  }

  /**
   * Runs `change` on a copy of the state, one change at a time, writes the copy as the snapshot,
   * empties the journal (its lines are in the snapshot), and only then makes it the state: a change
   * whose write fails (or that throws) leaves nothing changed. For destructions and rotations.
   */
  #commit<T>(change: (state: KeyFile) => Promise<T> | T): Promise<T> {
    const run = this.#queue.then(async () => {
      const next = structuredClone(this.#state);
      const result = await change(next);
      if (this.path) {
        writeFileAtomic(this.path, `${JSON.stringify(next)}\n`, 0o600);
        if (existsSync(journalOf(this.path))) truncateSync(journalOf(this.path), 0);
      }
      this.#state = next;
      this.#byId = FileKeyRecords.#index(next);
      return result;
    });
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async claimKek(kekId: string): Promise<string> {
    if (!this.#state.kek) await this.#append({ kek: kekId });
    return this.#state.kek!;
  }

  async secret(tenant: number): Promise<SecretRecord | undefined> {
    const s = this.#state.secrets[String(tenant)];
    return s ? { wrapped: Buffer.from(s.wrapped, 'base64'), kekId: s.kek } : undefined;
  }

  async insertSecret(tenant: number, record: SecretRecord): Promise<SecretRecord> {
    if (!this.#state.secrets[String(tenant)])
      await this.#append(
        {
          secret: String(tenant),
          value: {
            wrapped: record.wrapped.toString('base64'),
            kek: record.kekId,
            createdAt: new Date().toISOString(),
          },
        },
        (state) => {
          if (state.kek !== record.kekId) throw rotatedAway(this.where, record.kekId);
        },
      );
    return (await this.secret(tenant))!;
  }

  async keyBySubject(tenant: number, subjectHash: string): Promise<KeyRecord | undefined> {
    const k = this.#state.keys[entry(tenant, subjectHash)];
    return k ? keyRecord(k) : undefined;
  }

  async keyById(tenant: number, keyId: string): Promise<KeyRecord | undefined> {
    const name = this.#byId.get(`${tenant}\0${keyId}`);
    const k = name ? this.#state.keys[name] : undefined;
    return k ? keyRecord(k) : undefined;
  }

  async insertKey(tenant: number, subjectHash: string, record: KeyRecord): Promise<KeyRecord> {
    const name = entry(tenant, subjectHash);
    if (!this.#state.keys[name])
      await this.#append(
        {
          key: name,
          value: {
            id: record.keyId,
            wrapped: record.wrapped!.toString('base64'),
            kek: record.kekId,
            createdAt: new Date().toISOString(),
            destroyedAt: null,
          },
        },
        (state) => {
          if (state.kek !== record.kekId) throw rotatedAway(this.where, record.kekId!);
        },
      );
    return keyRecord(this.#state.keys[name]!);
  }

  async destroy(
    tenant: number,
    subjectHash: string,
    tombstoneKeyId: string,
  ): Promise<{ record: KeyRecord; destroyed: boolean }> {
    const name = entry(tenant, subjectHash);
    return this.#commit((state) => {
      const now = new Date().toISOString();
      const k = state.keys[name];
      if (!k) {
        state.keys[name] = { id: tombstoneKeyId, wrapped: null, kek: null, createdAt: now, destroyedAt: now };
        return { record: keyRecord(state.keys[name]), destroyed: false };
      }
      const destroyed = k.wrapped !== null;
      k.wrapped = null;
      k.kek = null;
      k.destroyedAt ??= now;
      return { record: keyRecord(k), destroyed };
    });
  }

  async rewrapAll(
    oldKekId: string,
    newKekId: string,
    rewrap: (item: RewrapItem) => Promise<Buffer>,
  ): Promise<number> {
    return this.#commit(async (state) => {
      if (state.kek !== oldKekId) throw notUnderOldKek(this.where, state.kek ?? undefined, oldKekId);
      let count = 0;
      for (const [tenant, s] of Object.entries(state.secrets)) {
        const wrapped = await rewrap({
          context: secretContext(Number(tenant)),
          wrapped: Buffer.from(s.wrapped, 'base64'),
        });
        s.wrapped = wrapped.toString('base64');
        s.kek = newKekId;
        count++;
      }
      for (const [name, k] of Object.entries(state.keys)) {
        if (k.wrapped === null) continue;
        const tenant = Number(name.split(':')[0]);
        const wrapped = await rewrap({
          context: dataKeyContext(tenant, k.id),
          wrapped: Buffer.from(k.wrapped, 'base64'),
        });
        k.wrapped = wrapped.toString('base64');
        k.kek = newKekId;
        count++;
      }
      state.kek = newKekId;
      return count;
    });
  }

  async close(): Promise<void> {
    await this.#queue;
  }
}
