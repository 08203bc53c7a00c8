/**
 * The export sink's configuration as the log knows it (issue 15 "Backlog control"). Stream
 * `export-sink`. When the exporter first runs against a sink (or a different one), it records
 * ExportSinkConfigured; report versions that were waiting, never queued, at that point are the
 * backlog: they are held until someone chooses (ExportBacklogDecided) to send all of them, those
 * since an instant, or none. New reports never wait for that choice.
 */
import type { Decider, Event } from '../decider.js';

export const EXPORT_SINK_CONFIGURED = 'ExportSinkConfigured';
export const EXPORT_BACKLOG_DECIDED = 'ExportBacklogDecided';
export const EXPORT_SINK_STREAM = 'export-sink';

export interface ExportSinkConfiguredData {
  /** Scheme and host of the sink (never credentials or paths). */
  readonly sink: string;
  readonly at: string;
}

/** `all`: send the backlog (after new reports); `skip`: send none; `since`: those authored since. */
export type BacklogChoice = 'all' | 'skip' | 'since';

export interface ExportBacklogDecidedData {
  readonly choice: BacklogChoice;
  /** With `since`: backlog reports recorded at or after this instant are sent, older ones skipped. */
  readonly since?: string;
  /** Where the choice came from: `EXPORT_BACKLOG`, or the `casebook export` flag. */
  readonly source: string;
  readonly at: string;
}

export type ExportSinkEvent =
  | Event<typeof EXPORT_SINK_CONFIGURED, ExportSinkConfiguredData>
  | Event<typeof EXPORT_BACKLOG_DECIDED, ExportBacklogDecidedData>;

export type ExportSinkCommand =
  | { readonly type: 'ConfigureSink'; readonly data: ExportSinkConfiguredData }
  | { readonly type: 'DecideBacklog'; readonly data: ExportBacklogDecidedData };

export interface ExportSinkState {
  readonly sink: string | undefined;
  /** The backlog choice made since the sink was last configured. */
  readonly decided: ExportBacklogDecidedData | undefined;
}

/** Records a new sink once, and the first backlog choice for it (later ones decide nothing). */
export const exportSinkDecider: Decider<ExportSinkCommand, ExportSinkState, ExportSinkEvent> = {
  initialState: { sink: undefined, decided: undefined },
  evolve: (state, event) => {
    switch (event.type) {
      case EXPORT_SINK_CONFIGURED:
        return { sink: event.data.sink, decided: undefined };
      case EXPORT_BACKLOG_DECIDED:
        return { ...state, decided: event.data };
      default: {
        const _exhaustive: never = event;
        return state;
      }
    }
  },
  decide: (command, state) => {
    switch (command.type) {
      case 'ConfigureSink':
        return state.sink === command.data.sink ? [] : [{ type: EXPORT_SINK_CONFIGURED, data: command.data }];
      case 'DecideBacklog':
        return state.decided ? [] : [{ type: EXPORT_BACKLOG_DECIDED, data: command.data }];
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};
