/**
 * The report export of one QuestionnaireResponse (issue 6; docs/architecture.md "Report export"):
 * what happened to each completed version on its way to the hospital system. Stream
 * `export-QuestionnaireResponse-<id>`.
 */
import type { Decider, Event } from '../decider.js';

export const REPORT_EXPORTED = 'ReportExported';
export const REPORT_EXPORT_FAILED = 'ReportExportFailed';

/** Data of a ReportExported event. */
export interface ReportExportedData {
  readonly responseId: number;
  readonly version: number;
  /** Where it went: scheme and host only, never credentials or paths. */
  readonly sink: string;
  /** Which delivery attempt succeeded (1-based). */
  readonly attempt: number;
  readonly at: string;
}

/** Data of a ReportExportFailed event. */
export interface ReportExportFailedData {
  readonly responseId: number;
  readonly version: number;
  /** The failed attempt (1-based). */
  readonly attempt: number;
  /** The error message only: never patient data. */
  readonly error: string;
  readonly nextAttemptAt: string;
  readonly at: string;
}

export type ExportEvent =
  | Event<typeof REPORT_EXPORTED, ReportExportedData>
  | Event<typeof REPORT_EXPORT_FAILED, ReportExportFailedData>;

/** Stream of the exporter's events about one response. */
export const exportStream = (responseId: number): string => `export-QuestionnaireResponse-${responseId}`;

export type ExportCommand =
  | { readonly type: 'RecordDelivery'; readonly data: ReportExportedData }
  | { readonly type: 'RecordFailure'; readonly data: ReportExportFailedData };

/** The export stream's state: the attempts recorded per version. */
export type ExportState = { readonly attempts: ReadonlyMap<number, number> };

/** Records delivery outcomes; an outcome of an attempt already recorded decides nothing. */
export const exportDecider: Decider<ExportCommand, ExportState, ExportEvent> = {
  initialState: { attempts: new Map() },
  evolve: (state, event) => {
    const attempts = new Map(state.attempts);
    attempts.set(event.data.version, Math.max(attempts.get(event.data.version) ?? 0, event.data.attempt));
    return { attempts };
  },
  decide: (command, state) => {
    if ((state.attempts.get(command.data.version) ?? 0) >= command.data.attempt) return [];
    return command.type === 'RecordDelivery'
      ? [{ type: REPORT_EXPORTED, data: command.data }]
      : [{ type: REPORT_EXPORT_FAILED, data: command.data }];
  },
};
