/**
 * Reading the audit trail (docs/interface.md §4.3; issue 14): `GET {fhir_base_url}/AuditEvent`
 * searchable by `patient`, `entity`, `agent`, `date` (ge/gt/le/lt/eq), `action` and `outcome`,
 * newest first (in the order they were recorded), paged with a keyset cursor; `GET /AuditEvent/{id}`. Only API clients whose scopes
 * cover AuditEvent may read them (e.g. `system/AuditEvent.rs`); no session can, whatever its scopes.
 */

import { type Sql, timestampText } from '../db/sql.js';
import { DomainError } from '../domain/decider.js';
import { mayAtAll, type Principal } from '../fhir/access.js';
import { type AuditRecord, toAuditEvent } from '../fhir/audit-event.js';
import { resourceIdIn } from '../fhir/references.js';
import type { Permission } from '../fhir/scopes.js';
import { countOf, searchDateRange } from '../fhir/search.js';
import { ReadModelUnavailable } from '../projections/runner/index.js';

/** `_count` when none is given, and its maximum. */
export const DEFAULT_AUDIT_COUNT = 20;
export const MAX_AUDIT_COUNT = 1000;

type Params = Record<string, string | string[] | undefined>;

const forbidden = (principal: Principal) =>
  new DomainError(
    'forbidden',
    'ScopeNotGranted',
    principal.kind === 'session'
      ? 'AuditEvents are for API clients with AuditEvent scopes (e.g. system/AuditEvent.rs), not for sessions'
      : "the client's scopes do not allow reading AuditEvent (e.g. system/AuditEvent.rs)",
    undefined,
    { issueCode: 'forbidden' },
  );

/** Refuses a caller who may not read the audit trail. @throws {DomainError} 403. */
export const authorizeAudit = (principal: Principal, permission: Permission): void => {
  if (principal.kind !== 'client' || !mayAtAll(principal, permission, 'AuditEvent' as never))
    throw forbidden(principal);
};

const invalid = (name: string, message: string) =>
  new DomainError('invalid', 'InvalidSearchParameter', message, name);

const values = (params: Params, name: string): string[] => {
  const raw = params[name];
  return (Array.isArray(raw) ? raw : raw === undefined ? [] : [raw]).filter((v) => v !== '');
};

/** `Patient/12` or `12` → 12. */
const patientIdOf = (text: string): number => {
  const m = /^(?:Patient\/)?(\d{1,10})$/.exec(text);
  if (!m) throw invalid('patient', `patient=${text} must be Patient/<id> or <id>`);
  // A larger id names no patient (docs/interface.md §8): it matches nothing.
  return resourceIdIn(m[1]!) ?? -1;
};

/** A date search value: an optional prefix, then the value ({@link searchDateRange}). */
const DATE = /^(eq|ge|gt|le|lt)?(.*)$/s;

/** Where a page ended: the read model's insertion sequence of its last AuditEvent. */
export interface AuditCursor {
  readonly seq: string;
}

/** The opaque `_cursor` of a page (no secrets, valid on any replica). */
export const encodeCursor = (cursor: AuditCursor): string =>
  Buffer.from(`a${cursor.seq}`).toString('base64url');

/** The largest `bigint` (the view's `seq`): a larger number in a cursor would overflow in SQL. */
const MAX_BIGINT = 2n ** 63n - 1n;

const decodeCursor = (text: string): AuditCursor => {
  const m = /^a(\d{1,19})$/.exec(Buffer.from(text, 'base64url').toString('utf8'));
  if (!m || BigInt(m[1]!) > MAX_BIGINT)
    throw invalid('_cursor', '_cursor is not a cursor of this search (follow the Bundle links)');
  return { seq: m[1]! };
};

export interface AuditPage {
  readonly auditEvents: readonly Record<string, unknown>[];
  /** Matching AuditEvents in all pages. */
  readonly total: number;
  /** Where the next page starts; undefined on the last page. */
  readonly next: AuditCursor | undefined;
  readonly count: number;
}

const KNOWN = new Set([
  'patient',
  'entity',
  'agent',
  'date',
  'action',
  'outcome',
  '_count',
  '_cursor',
  '_format',
  '_pretty',
]);

/**
 * Waits until the AuditEvent view (a deferred projection, docs/architecture.md "Audit trail") holds
 * every AuditEvent recorded so far: `current`, or why not.
 */
export type AuditViewWait = () => Promise<'current' | 'stopped' | 'behind'>;

const current = async (wait: AuditViewWait | undefined): Promise<void> => {
  const state = await wait?.();
  if (state === 'stopped')
    throw new ReadModelUnavailable(
      'audit-events',
      false,
      'the AuditEvent view is stopped or being rebuilt (see /readyz); the records are in the log',
    );
  if (state === 'behind')
    throw new ReadModelUnavailable(
      'audit-events',
      false,
      'the AuditEvent view has not caught up with the log within 5 s; retry',
    );
};

/**
 * One page of the tenant's AuditEvents matching `params`, newest first.
 * @param wait read-your-writes: the view is brought up to the log's head first.
 * @throws {DomainError} 403 for a caller without AuditEvent scopes or a session; 400 for unknown or
 *   malformed parameters.
 * @throws {ReadModelUnavailable} the view is stopped, or behind the log after `wait`'s bound.
 */
export const searchAuditEvents = async (
  sql: Sql,
  principal: Principal,
  params: Params,
  wait?: AuditViewWait,
): Promise<AuditPage> => {
  authorizeAudit(principal, 's');
  await current(wait);
  for (const name of Object.keys(params))
    if (!KNOWN.has(name))
      throw new DomainError(
        'invalid',
        'UnsupportedSearchParameter',
        `search parameter ${name} is not supported on AuditEvent (supported: patient, entity, agent, date, action, outcome, _count)`,
        name,
        { issueCode: 'not-supported' },
      );
  const args: unknown[] = [principal.tenantId];
  const arg = (value: unknown) => {
    args.push(value);
    return `$${args.length}`;
  };
  const where = ['tenant_id = $1'];
  const alternatives = (name: string) => values(params, name).map((v) => v.split(',').filter(Boolean));
  for (const list of alternatives('patient')) where.push(`patients && ${arg(list.map(patientIdOf))}::int[]`);
  for (const list of alternatives('entity')) where.push(`entities && ${arg(list)}::text[]`);
  for (const list of alternatives('agent')) where.push(`agents && ${arg(list)}::text[]`);
  for (const list of alternatives('action')) {
    if (list.some((a) => !/^[CRUDE]$/.test(a))) throw invalid('action', 'action must be C, R, U, D or E');
    where.push(`action = ANY(${arg(list)}::text[])`);
  }
  for (const list of alternatives('outcome')) {
    const codes = list.map((o) => o.slice(o.indexOf('|') + 1));
    if (codes.some((c) => !/^(0|4|8|12)$/.test(c))) throw invalid('outcome', 'outcome must be 0, 4, 8 or 12');
    where.push(`outcome = ANY(${arg(codes)}::text[])`);
  }
  for (const text of values(params, 'date')) {
    const m = DATE.exec(text)!;
    const range = searchDateRange(m[2]!);
    if (!range)
      throw invalid(
        'date',
        `date=${text} must be a FHIR date or instant (a real calendar date) with an optional ge/gt/le/lt/eq prefix`,
      );
    // Bounds as PostgreSQL reads them: a range may start in 1 BC or end in year 10000.
    const [start, end] = [timestampText(range.start), timestampText(range.end)];
    switch (m[1] ?? 'eq') {
      case 'ge':
        where.push(`recorded >= ${arg(start)}`);
        break;
      case 'gt':
        where.push(`recorded >= ${arg(end)}`);
        break;
      case 'le':
        where.push(`recorded < ${arg(end)}`);
        break;
      case 'lt':
        where.push(`recorded < ${arg(start)}`);
        break;
      default:
        where.push(`recorded >= ${arg(start)} AND recorded < ${arg(end)}`);
    }
  }
  const countText = values(params, '_count')[0];
  const count = countText === undefined ? DEFAULT_AUDIT_COUNT : countOf(countText);
  if (count === undefined) throw invalid('_count', '_count must be a non-negative integer');
  const size = Math.min(count, MAX_AUDIT_COUNT);
  const filter = where.join(' AND ');
  const filterArgs = [...args];
  const cursorText = values(params, '_cursor')[0];
  const page = cursorText ? `AND seq < ${arg(decodeCursor(cursorText).seq)}::bigint` : '';
  // `seq` as text under another name: ORDER BY a bare `seq` would order the text output column
  // ("99" after "100" descending), not the view's numbers, and pages would skip records.
  const rows = await sql.query<{ seq_text: string; content: Record<string, unknown> }>(
    `SELECT seq::text AS seq_text, content FROM rm_audit_events WHERE ${filter} ${page}
      ORDER BY seq DESC LIMIT ${arg(size + 1)}`,
    args,
  );
  const [counted] = await sql.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM rm_audit_events WHERE ${filter}`,
    filterArgs,
  );
  const shown = rows.slice(0, size);
  const last = shown.at(-1);
  return {
    auditEvents: shown.map((r) => shownAuditEvent(r.content)),
    total: Number(counted?.n ?? 0),
    count: size,
    next: rows.length > size && last ? { seq: last.seq_text } : undefined,
  };
};

/**
 * One AuditEvent of the tenant by id.
 * @throws {DomainError} 403 as {@link searchAuditEvents}; 404 unknown or another tenant's.
 * @throws {ReadModelUnavailable} the view is stopped, or behind the log after `wait`'s bound.
 */
export const readAuditEvent = async (
  sql: Sql,
  principal: Principal,
  id: string,
  wait?: AuditViewWait,
): Promise<Record<string, unknown>> => {
  authorizeAudit(principal, 'r');
  await current(wait);
  const rows = /^[0-9a-f-]{36}$/.test(id)
    ? await sql.query<{ content: Record<string, unknown> }>(
        `SELECT content FROM rm_audit_events WHERE id = $1::uuid AND tenant_id = $2`,
        [id, principal.tenantId],
      )
    : [];
  if (!rows[0])
    throw new DomainError('not_found', 'ResourceNotFound', `AuditEvent/${id} is not known`, undefined, {
      issueCode: 'not-found',
    });
  return shownAuditEvent(rows[0].content);
};

/** The AuditEvent of a row's content: rendered from its record, or as stored by an older log. */
const shownAuditEvent = (content: Record<string, unknown>): Record<string, unknown> =>
  content.resourceType === 'AuditEvent' ? content : toAuditEvent(content as unknown as AuditRecord);
