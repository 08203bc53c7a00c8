/**
 * The key store's records in one JSON file, for the embedded default (docs/architecture.md
 * "Erasure", Key store): `<DATA_DIR>/keys/keys.json`, apart from the PGlite cluster that holds the
 * log. The embedded default is one process (its data directory is locked to it), so changes are
 * serialised by a mutex in this process; each change writes the whole file atomically (a temporary
 * file, fsync, rename), so a crash leaves the file before or after the change, never between.
 *
 *     { "format": 1, "kek": "<KEK id>",
 *       "secrets": { "<tenant>": { "wrapped": "<base64>", "kek": "<KEK id>", "createdAt": "…" } },
 *       "keys": { "<tenant>:<subject hash>": { "id": "<key id>", "wrapped": "<base64>" | null,
 *                 "kek": "<KEK id>" | null, "createdAt": "…", "destroyedAt": null | "…" } } }
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
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
    if (!existsSync(path)) return new FileKeyRecords(path, emptyFile());
    let state: KeyFile;
    try {
      state = JSON.parse(readFileSync(path, 'utf8')) as KeyFile;
    } catch (error) {
      throw new Error(`the key store file ${path} cannot be read: ${(error as Error).message}`);
    }
    if (state?.format !== 1 || typeof state.keys !== 'object' || typeof state.secrets !== 'object')
      throw new Error(`the key store file ${path} is not a casebook key store (format 1)`);
    return new FileKeyRecords(path, state);
  }

  static #index(state: KeyFile): Map<string, string> {
    const index = new Map<string, string>();
    for (const [name, k] of Object.entries(state.keys)) index.set(`${name.split(':')[0]}\0${k.id}`, name);
    return index;
  }

  /**
   * Runs `change` on a copy of the state, one change at a time, writes the copy, and only then
   * makes it the state: a change whose write fails (or that throws) leaves nothing changed.
   */
  #commit<T>(change: (state: KeyFile) => Promise<T> | T): Promise<T> {
    const run = this.#queue.then(async () => {
      const next = structuredClone(this.#state);
      const result = await change(next);
      if (this.path) writeFileAtomic(this.path, `${JSON.stringify(next)}\n`, 0o600);
      this.#state = next;
      this.#byId = FileKeyRecords.#index(next);
      return result;
    });
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async claimKek(kekId: string): Promise<string> {
    if (this.#state.kek) return this.#state.kek;
    return this.#commit((state) => {
      state.kek ??= kekId;
      return state.kek;
    });
  }

  async secret(tenant: number): Promise<SecretRecord | undefined> {
    const s = this.#state.secrets[String(tenant)];
    return s ? { wrapped: Buffer.from(s.wrapped, 'base64'), kekId: s.kek } : undefined;
  }

  async insertSecret(tenant: number, record: SecretRecord): Promise<SecretRecord> {
    await this.#commit((state) => {
      if (state.kek !== record.kekId) throw rotatedAway(this.where, record.kekId);
      state.secrets[String(tenant)] ??= {
        wrapped: record.wrapped.toString('base64'),
        kek: record.kekId,
        createdAt: new Date().toISOString(),
      };
    });
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
    return this.#commit((state) => {
      if (state.kek !== record.kekId) throw rotatedAway(this.where, record.kekId!);
      state.keys[name] ??= {
        id: record.keyId,
        wrapped: record.wrapped!.toString('base64'),
        kek: record.kekId,
        createdAt: new Date().toISOString(),
        destroyedAt: null,
      };
      return keyRecord(state.keys[name]);
    });
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
