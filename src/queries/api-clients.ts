/**
 * The API-client directory (docs/architecture.md "Security"): the rows of `rm_api_clients` that
 * every authenticated request needs (its secret hash, tenant, scopes and projects), read once and
 * kept for at most {@link TTL_MS}. Concurrent lookups of one client share one query.
 *
 * A change of a client appended through this process (registration, secret rotation, scope change)
 * drops the cache at once ({@link ApiClientDirectory.noteAppended}); a change made by another
 * replica is seen within {@link TTL_MS}. Unknown ids are not cached, so a client registered
 * elsewhere is usable at once.
 */
import type { Sql } from '../db/sql.js';

/** How long a row is trusted, milliseconds. */
const TTL_MS = 1000;
/** Most rows kept; beyond, the cache starts over. */
const MAX_ENTRIES = 10_000;
/** Event types that change a row of `rm_api_clients` (the api_clients projection's). */
const CLIENT_EVENT = /^ApiClient/;

/** One row of `rm_api_clients`. */
export interface ApiClientRow {
  readonly clientId: string;
  readonly tenantId: number;
  /** scrypt hash of the secret (commands/secrets.ts). */
  readonly secretHash: string;
  readonly scopes: readonly string[];
  readonly projects: readonly string[];
}

interface Entry {
  readonly at: number;
  readonly row: Promise<ApiClientRow | undefined>;
}

export class ApiClientDirectory {
  private readonly entries = new Map<string, Entry>();
  private generation = 0;

  constructor(
    private readonly sql: Sql,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The client `clientId`, at most {@link TTL_MS} old.
   * @returns undefined when no such client exists.
   * @throws what the query throws (database unreachable).
   */
  find(clientId: string): Promise<ApiClientRow | undefined> {
    const now = this.now();
    const entry = this.entries.get(clientId);
    if (entry && now - entry.at < TTL_MS) return entry.row;
    const generation = this.generation;
    const row = this.load(clientId);
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
    this.entries.set(clientId, { at: now, row });
    // Neither a failure nor "unknown" is remembered; nor a row read before a change was noted.
    row.then(
      (found) => {
        if (found === undefined || generation !== this.generation) this.forget(clientId, row);
      },
      () => this.forget(clientId, row),
    );
    return row;
  }

  /** Drops every cached row when `types` (of events just appended) include an API-client change. */
  noteAppended(types: readonly string[]): void {
    if (types.some((t) => CLIENT_EVENT.test(t))) {
      this.generation++;
      this.entries.clear();
    }
  }

  private forget(clientId: string, row: Promise<ApiClientRow | undefined>): void {
    if (this.entries.get(clientId)?.row === row) this.entries.delete(clientId);
  }

  private async load(clientId: string): Promise<ApiClientRow | undefined> {
    const [row] = await this.sql.query<{
      client_id: string;
      tenant_id: number | string;
      secret_hash: string;
      scopes: string[];
      projects: string[];
    }>(
      `SELECT client_id, tenant_id, secret_hash, scopes, projects FROM rm_api_clients WHERE client_id = $1`,
      [clientId],
    );
    if (!row) return undefined;
    return {
      clientId: row.client_id,
      tenantId: Number(row.tenant_id),
      secretHash: row.secret_hash,
      scopes: row.scopes,
      projects: row.projects,
    };
  }
}
