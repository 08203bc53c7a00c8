/**
 * The key store's records in PostgreSQL or PGlite (docs/architecture.md "Erasure", Key store):
 * three tables in a schema of their own (default `casebook_keys`; KEY_STORE_SCHEMA), made by the
 * migrations in ./sql/ with that schema as the current one, whatever the connection's search path;
 * every statement names the schema. The database may be the event log's (DATABASE_URL) or another
 * one (KEY_STORE_URL).
 */
import { Batcher } from '../../db/batcher.js';
import { migrate, migrationsIn } from '../../db/migrations.js';
import { quoteIdentifier, type Sql, withSearchPath } from '../../db/sql.js';
import type { KeyRecord, KeyRecords, RewrapItem, SecretRecord } from './key-store.js';
import { dataKeyContext, notUnderOldKek, rotatedAway, secretContext } from './key-store.js';

/** The key store's schema when KEY_STORE_SCHEMA is not set. */
export const DEFAULT_KEY_STORE_SCHEMA = 'casebook_keys';

/**
 * The key store's schema when KEY_STORE_SCHEMA is not set: `casebook_keys` beside an event store
 * in `public`, else `<its schema>_keys` — so that installations sharing one database in schemas of
 * their own (tests, benches, tenants of a hosting) never share data keys.
 */
export const defaultKeyStoreSchema = async (sql: Sql): Promise<string> => {
  const [row] = await sql.query<{ schema: string | null }>(`SELECT current_schema() AS schema`);
  const current = row?.schema ?? 'public';
  return current === 'public' ? DEFAULT_KEY_STORE_SCHEMA : `${current.slice(0, 58)}_keys`;
};

/** A schema name KEY_STORE_SCHEMA accepts: lower case, digits, underscores, at most 63 characters. */
export const KEY_STORE_SCHEMA_PATTERN = /^[a-z_][a-z0-9_]{0,62}$/;

/** Records re-wrapped per statement by a rotation. */
const REWRAP_PAGE = 500;

type KeyRow = {
  key_id: string;
  wrapped: Uint8Array | null;
  kek_id: string | null;
  destroyed_at: Date | string | null;
};

const bytes = (value: Uint8Array): Buffer => Buffer.from(value.buffer, value.byteOffset, value.byteLength);

/** A subject's key asked for, in a batch of lookups. */
interface SubjectItem {
  readonly tenant: number;
  readonly subjectHash: string;
}

/** A key asked for by its id (a stored event's envelope names it), in a batch of lookups. */
interface KeyIdItem {
  readonly tenant: number;
  readonly keyId: string;
}

/** A new key to keep, in a batch of inserts (all of a batch under one KEK). */
interface InsertItem extends SubjectItem {
  readonly record: KeyRecord;
}

const keyRecord = (row: KeyRow): KeyRecord => ({
  keyId: row.key_id,
  wrapped: row.wrapped ? bytes(row.wrapped) : null,
  kekId: row.kek_id,
  destroyedAt: row.destroyed_at === null ? null : new Date(row.destroyed_at).toISOString(),
});

/** Whether `error` is PostgreSQL's unique violation or duplicate schema (a concurrent CREATE SCHEMA). */
const alreadyMade = (error: unknown): boolean => {
  const code = (error as { code?: unknown }).code;
  return code === '23505' || code === '42P06';
};

/** {@link KeyRecords} in SQL tables of their own schema. */
export class SqlKeyRecords implements KeyRecords {
  readonly where: string;
  readonly #t: { kek: string; secrets: string; keys: string };
  private constructor(
    private readonly sql: Sql,
    readonly schema: string,
    private readonly owned: boolean,
    private readonly asyncInserts: boolean,
  ) {
    const s = quoteIdentifier(schema);
    this.#t = { kek: `${s}.kek`, secrets: `${s}.identifier_secrets`, keys: `${s}.data_keys` };
    this.where = `schema ${schema}`;
    // Concurrent requests' lookups and new keys go together, one statement per batch
    // (src/db/batcher.ts): a POST of a new patient does not cost the key store a commit of its own.
    this.#lookups = new Batcher((items) =>
      this.#lookup(
        'subject_hash',
        items.map((i) => ({ tenant: i.tenant, value: i.subjectHash })),
      ),
    );
    this.#byId = new Batcher((items) =>
      this.#lookup(
        'key_id',
        items.map((i) => ({ tenant: i.tenant, value: i.keyId })),
      ),
    );
    this.#inserts = new Batcher(
      (items) => this.#insert(items),
      undefined,
      undefined,
      undefined,
      (batch, item) => batch[0]!.record.kekId === item.record.kekId,
    );
  }

  readonly #lookups: Batcher<SubjectItem, KeyRecord | undefined>;
  readonly #byId: Batcher<KeyIdItem, KeyRecord | undefined>;
  readonly #inserts: Batcher<InsertItem, KeyRecord | undefined>;

  /**
   * The keys of `items` (undefined: none in that tenant), found by `column` (the subject's hash, or
   * the key id: each unique in a tenant), in one statement. LATERAL: one index probe per item,
   * whatever the planner thinks of unnest's rows.
   */
  async #lookup(
    column: 'subject_hash' | 'key_id',
    items: readonly { readonly tenant: number; readonly value: string }[],
  ): Promise<(KeyRecord | undefined)[]> {
    const rows = await this.sql.query<KeyRow & { i: string }>(
      `SELECT w.i::text AS i, k.key_id, k.wrapped, k.kek_id, k.destroyed_at
         FROM unnest($1::int[], $2::text[]) WITH ORDINALITY AS w(tenant_id, value, i)
         CROSS JOIN LATERAL (SELECT * FROM ${this.#t.keys}
                              WHERE tenant_id = w.tenant_id AND ${column} = w.value) k`,
      [items.map((i) => i.tenant), items.map((i) => i.value)],
    );
    const found: (KeyRecord | undefined)[] = items.map(() => undefined);
    for (const row of rows) found[Number(row.i) - 1] = keyRecord(row);
    return found;
  }

  /**
   * Inserts the keys of `items` (one KEK) where their subjects have none, in one statement, only
   * while the store is under that KEK (a rotation holds the kek row until it commits).
   * @returns each item's inserted record; undefined where a key was kept already (or the store rotated).
   */
  async #insert(items: readonly InsertItem[]): Promise<(KeyRecord | undefined)[]> {
    const rows = await this.sql.query<KeyRow>(
      // Hex text, not bytea[]: an array of byte strings is sent alike by node-postgres and PGlite.
      `WITH durability AS (SELECT set_config('synchronous_commit',
         CASE WHEN $6::boolean THEN 'off' ELSE current_setting('synchronous_commit') END, true)),
       current_kek AS (SELECT 1 FROM ${this.#t.kek} WHERE kek_id = $5 FOR SHARE),
       w AS (SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::text[])
                      WITH ORDINALITY AS w(tenant_id, subject_hash, key_id, wrapped, i))
       INSERT INTO ${this.#t.keys} (tenant_id, subject_hash, key_id, wrapped, kek_id)
       SELECT w.tenant_id, w.subject_hash, w.key_id, decode(w.wrapped, 'hex'), $5 FROM w, current_kek, durability
       ORDER BY w.i
       ON CONFLICT (tenant_id, subject_hash) DO NOTHING
       RETURNING key_id, wrapped, kek_id, destroyed_at`,
      [
        items.map((i) => i.tenant),
        items.map((i) => i.subjectHash),
        items.map((i) => i.record.keyId),
        items.map((i) => i.record.wrapped!.toString('hex')),
        items[0]!.record.kekId,
        // Until this statement's transaction ends (set_config's is_local), its commit included.
        this.asyncInserts,
      ],
    );
    // Key ids are random and unique: each row inserted is its item's.
    const inserted = new Map(rows.map((row) => [row.key_id, keyRecord(row)]));
    return items.map((i) => inserted.get(i.record.keyId));
  }

  /**
   * Makes the schema and brings its tables to the last migration.
   * @param schema the key store's schema (default `casebook_keys`).
   * @param owned whether {@link close} closes `sql` (a KEY_STORE_URL pool of its own).
   * @param asyncInserts new keys commit without waiting for their WAL flush (`synchronous_commit`
   *   off for that statement): only where every event encrypted under a key is appended later,
   *   with a synchronous commit, to the same PostgreSQL cluster — the SQL event store on this
   *   `sql`. Its commit flushes the WAL up to itself, the key's insert included; a crash before it
   *   loses at most keys no event uses. Never for KEY_STORE_URL or a KurrentDB log.
   * @throws {Error} for a schema name outside {@link KEY_STORE_SCHEMA_PATTERN}; the database's errors.
   */
  static async open(
    sql: Sql,
    options: { schema?: string; owned?: boolean; asyncInserts?: boolean } = {},
  ): Promise<SqlKeyRecords> {
    const schema = options.schema ?? (await defaultKeyStoreSchema(sql));
    if (!KEY_STORE_SCHEMA_PATTERN.test(schema))
      throw new Error(
        `invalid key store schema name ${JSON.stringify(schema)}: lower case letters, digits and _`,
      );
    try {
      await sql.exec(`CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(schema)}`);
    } catch (error) {
      if (!alreadyMade(error)) throw error;
    }
    // The versions table and the tables go into the key store's schema: it is the current one.
    await migrate(
      withSearchPath(sql, quoteIdentifier(schema)),
      'key-store',
      migrationsIn(new URL('./sql/', import.meta.url)),
    );
    return new SqlKeyRecords(sql, schema, options.owned ?? false, options.asyncInserts ?? false);
  }

  async claimKek(kekId: string): Promise<string> {
    await this.sql.query(`INSERT INTO ${this.#t.kek} (kek_id) VALUES ($1) ON CONFLICT DO NOTHING`, [kekId]);
    const [row] = await this.sql.query<{ kek_id: string }>(`SELECT kek_id FROM ${this.#t.kek}`);
    return row!.kek_id;
  }

  async secret(tenant: number): Promise<SecretRecord | undefined> {
    const [row] = await this.sql.query<{ wrapped: Uint8Array; kek_id: string }>(
      `SELECT wrapped, kek_id FROM ${this.#t.secrets} WHERE tenant_id = $1`,
      [tenant],
    );
    return row ? { wrapped: bytes(row.wrapped), kekId: row.kek_id } : undefined;
  }

  async insertSecret(tenant: number, record: SecretRecord): Promise<SecretRecord> {
    // Only while the store is still under this KEK (a rotation holds the kek row until it commits).
    await this.sql.query(
      `WITH current_kek AS (SELECT 1 FROM ${this.#t.kek} WHERE kek_id = $3 FOR SHARE)
       INSERT INTO ${this.#t.secrets} (tenant_id, wrapped, kek_id) SELECT $1, $2, $3 FROM current_kek
       ON CONFLICT (tenant_id) DO NOTHING`,
      [tenant, record.wrapped, record.kekId],
    );
    const kept = await this.secret(tenant);
    if (!kept) throw rotatedAway(this.where, record.kekId);
    return kept;
  }

  keyBySubject(tenant: number, subjectHash: string): Promise<KeyRecord | undefined> {
    return this.#lookups.submit({ tenant, subjectHash });
  }

  /** Concurrent callers' lookups go in one statement (src/db/batcher.ts), as {@link keyBySubject}'s. */
  keyById(tenant: number, keyId: string): Promise<KeyRecord | undefined> {
    return this.#byId.submit({ tenant, keyId });
  }

  async insertKey(tenant: number, subjectHash: string, record: KeyRecord): Promise<KeyRecord> {
    // Concurrent inserts for one subject: the first commits, the others do nothing and read it.
    // The row inserted comes back with the insert (one round trip for a batch of new subjects).
    const inserted = await this.#inserts.submit({ tenant, subjectHash, record });
    if (inserted) return inserted;
    const kept = await this.keyBySubject(tenant, subjectHash);
    if (!kept) throw rotatedAway(this.where, record.kekId!);
    return kept;
  }

  async destroy(
    tenant: number,
    subjectHash: string,
    tombstoneKeyId: string,
  ): Promise<{ record: KeyRecord; destroyed: boolean }> {
    return this.sql.transaction(async (tx) => {
      const [before] = await tx.query<{ live: boolean }>(
        `SELECT wrapped IS NOT NULL AS live FROM ${this.#t.keys} WHERE tenant_id = $1 AND subject_hash = $2 FOR UPDATE`,
        [tenant, subjectHash],
      );
      const [row] = await tx.query<KeyRow>(
        `INSERT INTO ${this.#t.keys} AS k (tenant_id, subject_hash, key_id, wrapped, kek_id, destroyed_at)
         VALUES ($1, $2, $3, NULL, NULL, now())
         ON CONFLICT (tenant_id, subject_hash) DO UPDATE
           SET wrapped = NULL, kek_id = NULL, destroyed_at = coalesce(k.destroyed_at, now())
         RETURNING key_id, wrapped, kek_id, destroyed_at`,
        [tenant, subjectHash, tombstoneKeyId],
      );
      return { record: keyRecord(row!), destroyed: before?.live ?? false };
    });
  }

  async rewrapAll(
    oldKekId: string,
    newKekId: string,
    rewrap: (item: RewrapItem) => Promise<Buffer>,
  ): Promise<number> {
    return this.sql.transaction(async (tx) => {
      // Held until commit: inserts under the old KEK wait, then find the store rotated.
      const [current] = await tx.query<{ kek_id: string }>(`SELECT kek_id FROM ${this.#t.kek} FOR UPDATE`);
      if (current?.kek_id !== oldKekId)
        throw notUnderOldKek(this.where, current?.kek_id ?? undefined, oldKekId);
      let count = 0;
      const secrets = await tx.query<{ tenant_id: number; wrapped: Uint8Array }>(
        `SELECT tenant_id, wrapped FROM ${this.#t.secrets} FOR UPDATE`,
      );
      for (const s of secrets) {
        const wrapped = await rewrap({ context: secretContext(s.tenant_id), wrapped: bytes(s.wrapped) });
        await tx.query(`UPDATE ${this.#t.secrets} SET wrapped = $2, kek_id = $3 WHERE tenant_id = $1`, [
          s.tenant_id,
          wrapped,
          newKekId,
        ]);
        count++;
      }
      let after = '';
      for (;;) {
        const page = await tx.query<{ tenant_id: number; key_id: string; wrapped: Uint8Array }>(
          `SELECT tenant_id, key_id, wrapped FROM ${this.#t.keys}
            WHERE wrapped IS NOT NULL AND key_id > $1 ORDER BY key_id LIMIT ${REWRAP_PAGE} FOR UPDATE`,
          [after],
        );
        if (page.length === 0) break;
        const ids: string[] = [];
        const wrapped: string[] = [];
        for (const k of page) {
          ids.push(k.key_id);
          const rewrapped = await rewrap({
            context: dataKeyContext(k.tenant_id, k.key_id),
            wrapped: bytes(k.wrapped),
          });
          wrapped.push(rewrapped.toString('hex'));
        }
        await tx.query(
          // Hex text, not bytea[]: an array of byte strings is sent alike by node-postgres and PGlite.
          `UPDATE ${this.#t.keys} AS k SET wrapped = decode(n.wrapped, 'hex'), kek_id = $3
             FROM unnest($1::text[], $2::text[]) AS n(key_id, wrapped) WHERE k.key_id = n.key_id`,
          [ids, wrapped, newKekId],
        );
        count += page.length;
        after = page.at(-1)!.key_id;
      }
      await tx.query(`UPDATE ${this.#t.kek} SET kek_id = $1, recorded_at = now()`, [newKekId]);
      return count;
    });
  }

  async close(): Promise<void> {
    if (this.owned) await this.sql.close();
  }
}
