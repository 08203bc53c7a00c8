/**
 * Configuration from environment variables (README.md "Configuration"). Every variable is optional; the
 * defaults run the embedded PGlite store in ./data with all hosts on http://localhost:8080.
 */
import { z } from 'zod';
import { parseKek } from './eventstore/shredding/kek.js';
import { KEY_STORE_SCHEMA_PATTERN } from './eventstore/shredding/sql-key-store.js';
import { formatScope, parseScopeList, ScopeSyntaxError } from './fhir/scopes.js';

const list = z
  .string()
  .optional()
  .transform((v) =>
    (v ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );

const url = (fallback: string) =>
  z
    .string()
    .url()
    .optional()
    .transform((v) => (v ?? fallback).replace(/\/+$/, ''));

/**
 * The scopes a launched session asks for when LAUNCHER_SCOPES is not set: a clinician's, over what
 * the session user authored and the launched patient's compartment — never `system/`.
 */
export const DEFAULT_LAUNCHER_SCOPES = 'user/*.cruds patient/*.cruds';

/**
 * LAUNCHER_SCOPES as v2 scopes (docs/interface.md §4.6, §5.3).
 * @throws {Error} for a malformed scope, none at all, or a `system/` scope (a clinician's session
 *   is never tenant-wide).
 */
export const parseLauncherScopes = (value: string): string[] => {
  let scopes: ReturnType<typeof parseScopeList>['scopes'];
  try {
    scopes = parseScopeList(value).scopes;
  } catch (error) {
    if (error instanceof ScopeSyntaxError)
      throw new Error(`invalid configuration: LAUNCHER_SCOPES: ${error.message}`);
    throw error;
  }
  if (scopes.length === 0)
    throw new Error('invalid configuration: LAUNCHER_SCOPES must name at least one resource scope');
  const system = scopes.find((s) => s.context === 'system');
  if (system)
    throw new Error(
      `invalid configuration: LAUNCHER_SCOPES: ${formatScope(system)} is a system/ scope; a launched session is a clinician's (user/, patient/)`,
    );
  return scopes.map(formatScope);
};

const schema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().default('0.0.0.0'),
  DATA_DIR: z.string().default('./data'),
  DATABASE_URL: z.string().optional(),
  KURRENTDB_URL: z.string().optional(),
  PUBLIC_AUTH_URL: z.string().optional(),
  PUBLIC_APP_URL: z.string().optional(),
  PUBLIC_FHIR_URL: z.string().optional(),
  PUBLIC_SDC_URL: z.string().optional(),
  PUBLIC_LAUNCH_URL: z.string().optional(),
  CASEBOOK_SEED: z.string().optional(),
  ALLOWED_REDIRECT_ORIGINS: list,
  CORS_ORIGINS: list,
  METRICS_TOKEN: z.string().optional(),
  TRUST_PROXY_HOPS: z.coerce.number().int().min(0).max(16).default(0),
  AUDIT_READS: z.enum(['true', 'false', '']).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  EXPORT_SINK: z.string().optional(),
  EXPORT_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(4),
  EXPORT_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(10_000),
  EXPORT_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100_000).default(50),
  EXPORT_GIVE_UP_AFTER: z.string().default('24h'),
  EXPORT_RETRY_BASE_MS: z.coerce.number().int().min(1).max(3_600_000).default(1000),
  EXPORT_RETRY_MAX_MS: z.coerce.number().int().min(1).max(86_400_000).default(300_000),
  EXPORT_PENDING_WARN_AFTER: z.string().default('15m'),
  EXPORT_BACKLOG: z.string().optional(),
  SUBSCRIPTION_ALLOWED_ORIGINS: list,
  SUBSCRIPTION_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(4),
  SUBSCRIPTION_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(10_000),
  SUBSCRIPTION_RETRY_BASE_MS: z.coerce.number().int().min(1).max(3_600_000).default(1000),
  SUBSCRIPTION_RETRY_MAX_MS: z.coerce.number().int().min(1).max(86_400_000).default(60_000),
  SUBSCRIPTION_ERROR_AFTER: z.string().default('10m'),
  SUBSCRIPTION_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(1000),
  LAUNCHER_CLIENT_ID: z.string().optional(),
  LAUNCHER_CLIENT_SECRET: z.string().optional(),
  LAUNCHER_SHARED_SECRET: list,
  LAUNCHER_ALLOW_UNSIGNED: z.enum(['true', 'false', '']).optional(),
  LAUNCHER_UPDATE_DEMOGRAPHICS: z.enum(['true', 'false', '']).optional(),
  LAUNCHER_PATIENT_SYSTEM: z.string().default('urn:casebook:hospital:patient'),
  LAUNCHER_ENCOUNTER_SYSTEM: z.string().default('urn:casebook:hospital:encounter'),
  LAUNCHER_STAFF_SYSTEM: z.string().default('urn:casebook:hospital:staff'),
  LAUNCHER_TASK_SYSTEM: z.string().default('urn:casebook:hospital:encounter-task'),
  LAUNCHER_SCOPES: z.string().default(DEFAULT_LAUNCHER_SCOPES),
  CASEBOOK_KEK: z.string().optional(),
  CASEBOOK_KEK_FILE: z.string().optional(),
  KEY_STORE_URL: z.string().optional(),
  KEY_STORE_SCHEMA: z
    .string()
    .regex(KEY_STORE_SCHEMA_PATTERN, 'must be a schema name of lower case letters, digits and _')
    .optional(),
});

export interface Config {
  readonly port: number;
  readonly host: string;
  /** PGlite data directory; `memory://` keeps everything in memory. */
  readonly dataDir: string;
  readonly databaseUrl: string | undefined;
  readonly kurrentDbUrl: string | undefined;
  /** Public base URLs, without trailing slash (spec {auth_url}, {app_url}, {fhir_base_url}, {sdk_backend_address}). */
  readonly authUrl: string;
  readonly appUrl: string;
  readonly fhirUrl: string;
  readonly sdcUrl: string;
  readonly launchUrl: string;
  readonly seedFile: string | undefined;
  /** Origins every tenant may redirect to, besides the app host and its own origins. */
  readonly allowedRedirectOrigins: readonly string[];
  readonly corsOrigins: readonly string[];
  readonly logLevel: string;
  /** When set, /metrics answers only `Authorization: Bearer <metricsToken>`. */
  readonly metricsToken: string | undefined;
  /**
   * Reverse proxies in front of casebook whose `X-Forwarded-For` is believed (TRUST_PROXY_HOPS,
   * default 0): the client address of a request (its AuditEvent agent's `networkString`, the credential
   * throttle's key) is the entry that many hops from the right of that header, else the socket's
   * peer. With 0 the header is ignored: a client cannot write its own address into the audit trail.
   */
  readonly trustProxyHops: number;
  /**
   * Record an AuditEvent for every read (default true). Off only to measure what auditing costs;
   * writes, denials and every other access are recorded regardless.
   */
  readonly auditReads: boolean;
  /**
   * Where report text goes (README.md "Configuration"): `http(s)://…` (POST text/plain), `mllp://host:port`
   * (HL7 v2 ORU^R01), `file:///absolute/dir`; undefined = no export.
   */
  readonly exportSink: string | undefined;
  /** Delivery of reports (README.md "Report export"): limits, timeouts and the backlog choice. */
  readonly export: {
    /** Deliveries in flight at most, per sink. */
    readonly concurrency: number;
    /** Bound of one delivery attempt, milliseconds. */
    readonly timeoutMs: number;
    /** Attempts before a report version is abandoned. */
    readonly maxAttempts: number;
    /** Milliseconds after queueing (or a requeue) after which a report version is abandoned. */
    readonly giveUpAfterMs: number;
    /** Ceiling of the first retry delay and cap of the ceilings, milliseconds (full jitter below them). */
    readonly retryBaseMs: number;
    readonly retryMaxMs: number;
    /** A report pending longer than this (ms) is a /readyz warning. */
    readonly pendingWarnAfterMs: number;
    /** EXPORT_BACKLOG: what to do with reports older than the sink configuration; undefined = hold them. */
    readonly backlog: { readonly choice: 'all' | 'skip' | 'since'; readonly since?: string } | undefined;
  };
  /** FHIR R5 Subscriptions (issue 37; docs/architecture.md "Subscriptions"): destinations and delivery. */
  readonly subscriptions: {
    /** Origins every tenant's Subscription endpoints may use (SUBSCRIPTION_ALLOWED_ORIGINS), besides the tenant's own. */
    readonly allowedOrigins: readonly string[];
    /** Subscriptions delivered to at once at most (one request in flight per subscription). */
    readonly concurrency: number;
    /** Bound of one delivery request, milliseconds (a Subscription's `timeout` may shorten it). */
    readonly timeoutMs: number;
    /** Ceiling of the first retry delay and cap of the ceilings, milliseconds (full jitter below them). */
    readonly retryBaseMs: number;
    readonly retryMaxMs: number;
    /** Milliseconds of failing deliveries after which the status becomes `error` (retries go on). */
    readonly errorAfterMs: number;
    /** How often the log and the due deliveries are looked at without a wake, milliseconds. */
    readonly pollMs: number;
  };
  /** The hospital launcher (docs/interface.md §1.6, §4.6): its client credentials and identifier systems. */
  readonly launcher: {
    readonly clientId: string | undefined;
    readonly clientSecret: string | undefined;
    readonly patientSystem: string;
    readonly encounterSystem: string;
    readonly staffSystem: string;
    readonly taskSystem: string;
    /**
     * Secrets a launch link may be signed with (LAUNCHER_SHARED_SECRET, comma-separated: the
     * first signs, any verifies, so keys rotate without downtime; docs/interface.md §4.6).
     */
    readonly sharedSecrets: readonly string[];
    /** Accept unsigned launch links (only when listening on a loopback address). */
    readonly allowUnsigned: boolean;
    /** Write a launch's date of birth or sex over a Patient's disagreeing ones. */
    readonly updateDemographics: boolean;
    /**
     * The scopes a launched session asks for (LAUNCHER_SCOPES, v2 syntax, never `system/`): the
     * session gets them downscoped to the tenant's allowed scopes (docs/interface.md §4.6).
     */
    readonly scopes: readonly string[];
  };
  /**
   * Crypto-shredding (docs/architecture.md "Erasure"): the KEK's source and where the key store
   * lives. `kek` is the base64 text of CASEBOOK_KEK, checked to be 32 bytes; never log it.
   */
  readonly keys: {
    readonly kek: string | undefined;
    readonly kekFile: string | undefined;
    /** KEY_STORE_URL: a PostgreSQL database of the key store's own; else DATABASE_URL's, else a file in DATA_DIR. */
    readonly storeUrl: string | undefined;
    /**
     * KEY_STORE_SCHEMA: the key store's schema in that database; unset, `casebook_keys` beside an
     * event store in `public`, else `<its schema>_keys`.
     */
    readonly storeSchema: string | undefined;
  };
}

/** The launcher's shared secrets must be at least this long (characters). */
export const MIN_SHARED_SECRET_LENGTH = 32;

/**
 * A duration such as `24h`, `15m`, `30s`, `1500ms` or `2d` (a bare number is seconds), in milliseconds.
 * @throws {Error} naming `name` when it is not one.
 */
export const parseDuration = (value: string, name: string): number => {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(value);
  if (!m)
    throw new Error(`invalid configuration: ${name} must be a duration such as 24h, 15m, 30s or 1500ms`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? 's') as 'ms'];
  return Math.round(Number(m[1]) * unit);
};

/**
 * A backlog choice: `all`, `skip` or `since:<ISO 8601 instant>` (EXPORT_BACKLOG, `casebook export`).
 * @throws {Error} for anything else.
 */
export const parseBacklogChoice = (
  value: string,
  name = 'EXPORT_BACKLOG',
): { choice: 'all' | 'skip' | 'since'; since?: string } => {
  if (value === 'all' || value === 'skip') return { choice: value };
  const m = /^since:(.+)$/.exec(value);
  const instant = m ? new Date(m[1]!) : undefined;
  if (!m || !instant || Number.isNaN(instant.getTime()) || !/^\d{4}-\d{2}-\d{2}/.test(m[1]!))
    throw new Error(`invalid configuration: ${name} must be all, skip or since:<ISO 8601 instant>`);
  return { choice: 'since', since: instant.toISOString() };
};

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * Reads the configuration.
 * @throws {Error} listing every invalid variable.
 */
export const loadConfig = (env: NodeJS.ProcessEnv = process.env): Config => {
  const parsed = schema.safeParse(env);
  if (!parsed.success)
    throw new Error(
      `invalid configuration: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  const e = parsed.data;
  const base = `http://localhost:${e.PORT}`;
  const pick = (value: string | undefined, fallback: string, name: string) => {
    const result = url(fallback).safeParse(value);
    if (!result.success) throw new Error(`invalid configuration: ${name} must be an absolute URL`);
    return result.data;
  };
  const fhirUrl = pick(e.PUBLIC_FHIR_URL, `${base}/fhir/r5`, 'PUBLIC_FHIR_URL');
  const weak = e.LAUNCHER_SHARED_SECRET.findIndex((s) => s.length < MIN_SHARED_SECRET_LENGTH);
  if (weak >= 0)
    throw new Error(
      `invalid configuration: LAUNCHER_SHARED_SECRET: secret ${weak + 1} is shorter than ${MIN_SHARED_SECRET_LENGTH} characters`,
    );
  const allowUnsigned = e.LAUNCHER_ALLOW_UNSIGNED === 'true';
  if (allowUnsigned && !LOOPBACK.has(e.HOST))
    throw new Error(
      `invalid configuration: LAUNCHER_ALLOW_UNSIGNED=true is only accepted when casebook listens on a loopback address (HOST=127.0.0.1), not on ${e.HOST}`,
    );
  // Every read must leave an AuditEvent (docs/architecture.md "Audit trail"): switching that off
  // is for measuring on one machine, never for a server others can reach.
  if (e.AUDIT_READS === 'false' && !LOOPBACK.has(e.HOST))
    throw new Error(
      `invalid configuration: AUDIT_READS=false is only accepted when casebook listens on a loopback address (HOST=127.0.0.1), not on ${e.HOST}`,
    );
  // Refused here, naming the variable and never its value (src/eventstore/shredding/kek.ts).
  if (e.CASEBOOK_KEK) parseKek(e.CASEBOOK_KEK, 'CASEBOOK_KEK');
  return {
    port: e.PORT,
    host: e.HOST,
    dataDir: e.DATA_DIR,
    databaseUrl: e.DATABASE_URL || undefined,
    kurrentDbUrl: e.KURRENTDB_URL || undefined,
    authUrl: pick(e.PUBLIC_AUTH_URL, `${base}/auth`, 'PUBLIC_AUTH_URL'),
    appUrl: pick(e.PUBLIC_APP_URL, `${base}/app`, 'PUBLIC_APP_URL'),
    fhirUrl,
    sdcUrl: pick(e.PUBLIC_SDC_URL, fhirUrl, 'PUBLIC_SDC_URL'),
    launchUrl: pick(e.PUBLIC_LAUNCH_URL, `${base}/launch`, 'PUBLIC_LAUNCH_URL'),
    seedFile: e.CASEBOOK_SEED || undefined,
    allowedRedirectOrigins: e.ALLOWED_REDIRECT_ORIGINS.map((o) => new URL(o).origin),
    corsOrigins: e.CORS_ORIGINS,
    logLevel: e.LOG_LEVEL,
    metricsToken: e.METRICS_TOKEN || undefined,
    trustProxyHops: e.TRUST_PROXY_HOPS,
    auditReads: e.AUDIT_READS !== 'false',
    exportSink: e.EXPORT_SINK || undefined,
    export: {
      concurrency: e.EXPORT_CONCURRENCY,
      timeoutMs: e.EXPORT_TIMEOUT_MS,
      maxAttempts: e.EXPORT_MAX_ATTEMPTS,
      giveUpAfterMs: parseDuration(e.EXPORT_GIVE_UP_AFTER, 'EXPORT_GIVE_UP_AFTER'),
      retryBaseMs: e.EXPORT_RETRY_BASE_MS,
      retryMaxMs: e.EXPORT_RETRY_MAX_MS,
      pendingWarnAfterMs: parseDuration(e.EXPORT_PENDING_WARN_AFTER, 'EXPORT_PENDING_WARN_AFTER'),
      backlog: e.EXPORT_BACKLOG ? parseBacklogChoice(e.EXPORT_BACKLOG) : undefined,
    },
    subscriptions: {
      allowedOrigins: e.SUBSCRIPTION_ALLOWED_ORIGINS.map((o) => new URL(o).origin),
      concurrency: e.SUBSCRIPTION_CONCURRENCY,
      timeoutMs: e.SUBSCRIPTION_TIMEOUT_MS,
      retryBaseMs: e.SUBSCRIPTION_RETRY_BASE_MS,
      retryMaxMs: e.SUBSCRIPTION_RETRY_MAX_MS,
      errorAfterMs: parseDuration(e.SUBSCRIPTION_ERROR_AFTER, 'SUBSCRIPTION_ERROR_AFTER'),
      pollMs: e.SUBSCRIPTION_POLL_MS,
    },
    launcher: {
      clientId: e.LAUNCHER_CLIENT_ID || undefined,
      clientSecret: e.LAUNCHER_CLIENT_SECRET || undefined,
      patientSystem: e.LAUNCHER_PATIENT_SYSTEM,
      encounterSystem: e.LAUNCHER_ENCOUNTER_SYSTEM,
      staffSystem: e.LAUNCHER_STAFF_SYSTEM,
      taskSystem: e.LAUNCHER_TASK_SYSTEM,
      sharedSecrets: e.LAUNCHER_SHARED_SECRET,
      allowUnsigned,
      updateDemographics: e.LAUNCHER_UPDATE_DEMOGRAPHICS === 'true',
      scopes: parseLauncherScopes(e.LAUNCHER_SCOPES),
    },
    keys: {
      kek: e.CASEBOOK_KEK || undefined,
      kekFile: e.CASEBOOK_KEK_FILE || undefined,
      storeUrl: e.KEY_STORE_URL || undefined,
      storeSchema: e.KEY_STORE_SCHEMA,
    },
  };
};
