/**
 * The report of a Task: the lifecycle of its QuestionnaireResponse (issue 32; docs/architecture.md
 * "Reports: versions, locking, amendments"). Stream `QuestionnaireResponse-<id>`: its events are the
 * response's resource events (src/domain/fhir/resource.ts), version n + 1 = event n.
 *
 *   in-progress ──save──▶ in-progress ──submit──▶ completed ──amend──▶ amended ──amend──▶ amended
 *                                                      └──────────┬───────┘
 *                                                  entered in error ▼
 *                                                          entered-in-error (final)
 *
 * Rules:
 * - every save, submit, amendment and entered-in-error names the version it was based on; a base
 *   other than the current version is refused (`ReportChangedElsewhere`, 409): nothing is stored,
 *   the newer version survives and the editor offers a merge (src/http/app/conflict.ts);
 * - a `completed` or `amended` report is locked: saving or submitting it in place is refused
 *   (`ReportLocked`, 409); only an amendment, with a reason, writes a new version, `amended`;
 * - `entered-in-error` (with a reason) ends the report: every later command is refused.
 *
 * The reason and the author of an amendment or an entered-in-error travel in the event
 * (ChangedData.reason/author). The content of a version (answers, `authored`…) is the editor's;
 * this decider only sets its status.
 */
import { type Decider, DomainError } from '../decider.js';
import {
  type ChangedData,
  type Content,
  type CreatedData,
  EVENT_NAMES,
  type ResourceEvent,
  type ResourceState,
  resourceEventKind,
  updateEventType,
} from '../fhir/resource.js';

/** QuestionnaireResponse.status values the report lifecycle knows. */
export type ReportStatus = 'in-progress' | 'completed' | 'amended' | 'entered-in-error' | 'stopped';

export interface ReportState {
  /** `none`: no response yet; `deleted`: the response was deleted. */
  readonly status: ReportStatus | 'none' | 'deleted';
  /** The response's `meta.versionId` (the number of events of its stream); 0 when none. */
  readonly version: number;
}

/** The report's events: the QuestionnaireResponse stream's own. */
export type ReportEvent = ResourceEvent;

interface Based {
  /** The QuestionnaireResponse's id. */
  readonly responseId: number;
  /** The `meta.versionId` the user's page was built from. */
  readonly baseVersion: number;
  /** The new content (answers, `authored`…); its status is set by the decider. */
  readonly resource: Content;
  readonly now: string;
  /** `Practitioner/<id>` of the session's user, when known: kept in the event as the version's author. */
  readonly author?: string;
}

/** Why a signed-off report is changed. */
interface Reasoned {
  /** The clinician's stated reason (required, not blank). */
  readonly reason: string;
}

export type ReportCommand =
  | ({ readonly type: 'SaveReport' } & Based)
  | ({ readonly type: 'SubmitReport' } & Based)
  | ({ readonly type: 'AmendReport' } & Based & Reasoned)
  | ({ readonly type: 'MarkReportEnteredInError' } & Based & Reasoned);

/** A save or submit based on another version than the current one (409, nothing stored). */
export class ReportChangedElsewhere extends DomainError {
  constructor(
    readonly baseVersion: number,
    readonly currentVersion: number,
  ) {
    super(
      'conflict',
      'ReportChangedElsewhere',
      `the report was changed elsewhere since it was opened: it is at version ${currentVersion}, this change was based on version ${baseVersion}`,
      'base_version',
    );
  }
}

/** Whether a report of this status is signed off (read-only; changed only by an amendment). */
export const isSignedOff = (status: string | undefined): boolean =>
  status === 'completed' || status === 'amended';

/** Whether a report of this status can no longer be changed at all. */
export const isFinalStatus = (status: string | undefined): boolean =>
  isSignedOff(status) || status === 'entered-in-error';

const QR = 'QuestionnaireResponse' as const;

const statusOf = (resource: Content | undefined): ReportStatus | 'none' => {
  const status = resource?.status;
  return typeof status === 'string' ? (status as ReportStatus) : 'none';
};

const locked = (status: string) =>
  new DomainError(
    'conflict',
    'ReportLocked',
    status === 'entered-in-error'
      ? 'the report was marked entered in error: it can no longer be changed'
      : `the report is ${status === 'amended' ? 'amended' : 'signed off'}: change it with "Amend report"`,
  );

/** The refusals every command shares: a live response, and the base version it names. */
const checkBase = (state: ReportState, baseVersion: number): void => {
  if (state.status === 'none')
    throw new DomainError('not_found', 'ResourceNotFound', 'the report has no questionnaire response');
  if (state.status === 'deleted') throw new DomainError('gone', 'ResourceDeleted', 'the report was deleted');
  if (state.status === 'entered-in-error') throw locked(state.status);
  if (!Number.isInteger(baseVersion) || baseVersion !== state.version)
    throw new ReportChangedElsewhere(baseVersion, state.version);
};

const checkReason = (reason: string): string => {
  const trimmed = reason.trim();
  if (trimmed === '')
    throw new DomainError('invalid', 'ReasonRequired', 'give the reason for this change', 'reason');
  return trimmed;
};

/** The one event of a new version: its type follows the status change (resource.ts updateEventType). */
const version = (
  state: ReportState,
  command: Based,
  status: ReportStatus,
  reason?: string,
): ReportEvent[] => {
  const before = state.status as string;
  const resource = { ...command.resource, status };
  const type = updateEventType(QR, before, status);
  const data: ChangedData = {
    id: command.responseId,
    resource,
    at: command.now,
    ...(type !== EVENT_NAMES[QR].updated ? { from: before } : {}),
    ...(reason !== undefined ? { reason } : {}),
    ...(command.author ? { author: command.author } : {}),
  };
  return [{ type, data }];
};

/**
 * The report's state from the response's resource state and version, as a unit of work loaded
 * them (src/commands/reports.ts: the stream is read once, with the resource decider).
 */
export const reportStateOf = (resource: ResourceState, version: number): ReportState =>
  resource.status === 'active'
    ? { status: statusOf(resource.resource) as ReportState['status'], version }
    : { status: resource.status, version };

/**
 * The report decider. `decide` returns the one event of the new version, or refuses:
 * @throws {ReportChangedElsewhere} 409 the base version is not the current one.
 * @throws {DomainError} 409 `ReportLocked` (save/submit of a signed-off report; anything after
 *   entered-in-error), 409 `ReportNotSignedOff` (amend or entered-in-error of an unfinished
 *   report), 400 `ReasonRequired`, 404/410 no or a deleted response.
 */
export const reportDecider: Decider<ReportCommand, ReportState, ReportEvent> = {
  initialState: { status: 'none', version: 0 },
  evolve: (state, event) => {
    const kind = resourceEventKind(event.type);
    if (!kind || kind.resourceType !== QR) return state;
    if (kind.kind === 'deleted') return { status: 'deleted', version: state.version + 1 };
    const data = event.data as CreatedData | ChangedData;
    return { status: statusOf(data.resource), version: state.version + 1 };
  },
  decide: (command, state) => {
    checkBase(state, command.baseVersion);
    switch (command.type) {
      case 'SaveReport':
      case 'SubmitReport':
        if (isSignedOff(state.status)) throw locked(state.status);
        return version(state, command, command.type === 'SubmitReport' ? 'completed' : 'in-progress');
      case 'AmendReport':
      case 'MarkReportEnteredInError': {
        if (!isSignedOff(state.status))
          throw new DomainError(
            'conflict',
            'ReportNotSignedOff',
            `the report is ${state.status}: only a submitted report is amended or marked entered in error`,
          );
        const reason = checkReason(command.reason);
        return version(
          state,
          command,
          command.type === 'AmendReport' ? 'amended' : 'entered-in-error',
          reason,
        );
      }
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};
