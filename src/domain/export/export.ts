/**
 * The report export of one QuestionnaireResponse (issue 6, issue 15; docs/architecture.md "Report
 * export"): what happened to each completed version on its way to the hospital system. Stream
 * `export-QuestionnaireResponse-<id>`.
 *
 * A version is rendered once (ReportExportQueued holds the text, its SHA-256 and its key); every
 * attempt sends exactly those bytes, ReportExported records the hash. Delivery is at least once,
 * with a stable key per version: after a crash between the sink's acceptance and ReportExported,
 * the same key and bytes go again, and receivers deduplicate by key. Retrying ends in
 * ReportExportAbandoned; ReportExportRequeued starts it again.
 */
import { type Decider, DomainError, type Event } from '../decider.js';

export const REPORT_EXPORT_QUEUED = 'ReportExportQueued';
export const REPORT_EXPORTED = 'ReportExported';
export const REPORT_EXPORT_FAILED = 'ReportExportFailed';
export const REPORT_EXPORT_ABANDONED = 'ReportExportAbandoned';
export const REPORT_EXPORT_REQUEUED = 'ReportExportRequeued';

/** A hospital identifier sent with a report (system and value). */
export interface ExportIdentifier {
  readonly system: string;
  readonly value: string;
}

/** Data of a ReportExportQueued event: the report exactly as every attempt sends it. */
export interface ReportExportQueuedData {
  readonly responseId: number;
  readonly version: number;
  /** `<installation>:qr-<id>-v<version>`: unique across installations, stable across attempts. */
  readonly key: string;
  readonly installationId: string;
  /** The plain-text narrative (UTF-8 on the wire). */
  readonly text: string;
  /** Hex SHA-256 of the UTF-8 bytes of `text`, and their number. */
  readonly sha256: string;
  readonly byteLength: number;
  /**
   * The Patient the report is about: whose data key encrypts this event (docs/architecture.md
   * "Erasure"). Absent on events queued before it was recorded, and for a report about nobody.
   */
  readonly patientId?: number;
  readonly patientIdentifier?: ExportIdentifier;
  readonly encounterIdentifier?: ExportIdentifier;
  /** QuestionnaireResponse.authored, when given. */
  readonly authored?: string;
  /**
   * What the version is to the receiver (issue 32): `final` (completed), `corrected` (amended: a
   * correction of what was sent before, never a second original) or `retracted` (entered in
   * error). Absent on events queued before: read as {@link legacyExportStatus}.
   */
  readonly status?: ExportStatus;
  readonly at: string;
}

/** What an exported version is to the receiver (HL7 v2 result status F / C / W). */
export type ExportStatus = 'final' | 'corrected' | 'retracted';

/** The export status of a QuestionnaireResponse status (amended → corrected, entered-in-error → retracted). */
export const exportStatusOf = (responseStatus: unknown): ExportStatus =>
  responseStatus === 'amended' ? 'corrected' : responseStatus === 'entered-in-error' ? 'retracted' : 'final';

/**
 * The status of a version queued before the status was recorded: what its HL7 message said then
 * (a later version was sent as `C`), so every attempt still sends the same bytes.
 */
export const legacyExportStatus = (version: number): ExportStatus => (version > 1 ? 'corrected' : 'final');

/** Data of a ReportExported event. */
export interface ReportExportedData {
  readonly responseId: number;
  readonly version: number;
  /** Where it went: scheme and host only, never credentials or paths. */
  readonly sink: string;
  /** Which delivery attempt succeeded (1-based). */
  readonly attempt: number;
  /** The key and SHA-256 of what was sent (absent on events from before issue 15). */
  readonly key?: string;
  readonly sha256?: string;
  readonly at: string;
}

/** Data of a ReportExportFailed event. */
export interface ReportExportFailedData {
  readonly responseId: number;
  readonly version: number;
  /** The failed attempt (1-based). */
  readonly attempt: number;
  /** A sanitised reason only: never patient data, paths or control characters. */
  readonly error: string;
  readonly nextAttemptAt: string;
  readonly at: string;
}

/** Data of a ReportExportAbandoned event: retrying has ended. */
export interface ReportExportAbandonedData {
  readonly responseId: number;
  readonly version: number;
  /** The last attempt made. */
  readonly attempt: number;
  /** Why it ended (the limit reached and the last error), sanitised. */
  readonly reason: string;
  readonly at: string;
}

/** Data of a ReportExportRequeued event (`casebook export retry`). */
export interface ReportExportRequeuedData {
  readonly responseId: number;
  readonly version: number;
  /** Who asked (the CLI user or `cli`). */
  readonly by: string;
  readonly at: string;
}

export type ExportEvent =
  | Event<typeof REPORT_EXPORT_QUEUED, ReportExportQueuedData>
  | Event<typeof REPORT_EXPORTED, ReportExportedData>
  | Event<typeof REPORT_EXPORT_FAILED, ReportExportFailedData>
  | Event<typeof REPORT_EXPORT_ABANDONED, ReportExportAbandonedData>
  | Event<typeof REPORT_EXPORT_REQUEUED, ReportExportRequeuedData>;

/** Stream of the exporter's events about one response. */
export const exportStream = (responseId: number): string => `export-QuestionnaireResponse-${responseId}`;

/** The idempotency key of a report version: unique for all time across installations. */
export const exportKey = (installationId: string, responseId: number, version: number): string =>
  `${installationId}:qr-${responseId}-v${version}`;

export type ExportCommand =
  | { readonly type: 'QueueExport'; readonly data: ReportExportQueuedData }
  | { readonly type: 'RecordDelivery'; readonly data: ReportExportedData }
  | {
      readonly type: 'RecordFailure';
      readonly data: ReportExportFailedData;
      /** Set when this failure ends retrying: the ReportExportAbandoned reason. */
      readonly abandon?: string;
    }
  | { readonly type: 'RequeueExport'; readonly data: { responseId: number; by: string; at: string } };

/** One version's export state. */
export interface VersionExport {
  readonly attempts: number;
  readonly status: 'queued' | 'delivered' | 'abandoned' | 'unqueued';
}

/** The export stream's state: per version. */
export type ExportState = { readonly versions: ReadonlyMap<number, VersionExport> };

const versionOf = (state: ExportState, version: number): VersionExport =>
  state.versions.get(version) ?? { attempts: 0, status: 'unqueued' };

/**
 * Records queueing, delivery outcomes and requeues. An outcome of an attempt already recorded
 * decides nothing (two exporters, a retried append).
 * @throws {DomainError} `ExportNotAbandoned` (409) when a requeue finds no abandoned version.
 */
export const exportDecider: Decider<ExportCommand, ExportState, ExportEvent> = {
  initialState: { versions: new Map() },
  evolve: (state, event) => {
    const versions = new Map(state.versions);
    const current = versionOf(state, event.data.version);
    switch (event.type) {
      case REPORT_EXPORT_QUEUED:
        versions.set(event.data.version, { ...current, status: 'queued' });
        break;
      case REPORT_EXPORTED:
        versions.set(event.data.version, {
          attempts: Math.max(current.attempts, event.data.attempt),
          status: 'delivered',
        });
        break;
      case REPORT_EXPORT_FAILED:
        versions.set(event.data.version, {
          ...current,
          attempts: Math.max(current.attempts, event.data.attempt),
        });
        break;
      case REPORT_EXPORT_ABANDONED:
        versions.set(event.data.version, { ...current, status: 'abandoned' });
        break;
      case REPORT_EXPORT_REQUEUED:
        versions.set(event.data.version, { ...current, status: 'queued' });
        break;
      default: {
        const _exhaustive: never = event;
        return state;
      }
    }
    return { versions };
  },
  decide: (command, state) => {
    switch (command.type) {
      case 'QueueExport':
        return versionOf(state, command.data.version).status === 'unqueued'
          ? [{ type: REPORT_EXPORT_QUEUED, data: command.data }]
          : [];
      case 'RecordDelivery': {
        const current = versionOf(state, command.data.version);
        if (current.attempts >= command.data.attempt || current.status === 'delivered') return [];
        return [{ type: REPORT_EXPORTED, data: command.data }];
      }
      case 'RecordFailure': {
        const current = versionOf(state, command.data.version);
        if (current.attempts >= command.data.attempt || current.status !== 'queued') return [];
        const failed: ExportEvent = { type: REPORT_EXPORT_FAILED, data: command.data };
        if (command.abandon === undefined) return [failed];
        const { responseId, version, attempt, at } = command.data;
        return [
          failed,
          {
            type: REPORT_EXPORT_ABANDONED,
            data: { responseId, version, attempt, reason: command.abandon, at },
          },
        ];
      }
      case 'RequeueExport': {
        const abandoned = [...state.versions].filter(([, v]) => v.status === 'abandoned').map(([n]) => n);
        if (abandoned.length === 0)
          throw new DomainError(
            'conflict',
            'ExportNotAbandoned',
            `QuestionnaireResponse/${command.data.responseId} has no abandoned export to retry`,
          );
        return abandoned.map((version) => ({
          type: REPORT_EXPORT_REQUEUED,
          data: { ...command.data, version },
        }));
      }
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};
