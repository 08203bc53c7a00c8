/**
 * The report commands of the application host (docs/interface.md §1.3, §3.2; issue 5): a clinician
 * starts a report from a form, saves it, and submits it. Each user action is ONE append, across
 * the QuestionnaireResponse's and the Task's streams: a crash can never leave a completed report on
 * an unfinished Task. Scopes are checked as on the data server (the actor is the session).
 */
import { DomainError } from '../domain/decider.js';
import type { ChangedData, Content } from '../domain/fhir/resource.js';
import { type ReportCommand, reportDecider, reportStateOf } from '../domain/report/report.js';
import type { Principal } from '../fhir/access.js';
import { DEFINITIONS } from '../fhir/definitions.js';
import { referenceId } from '../fhir/references.js';
import { create, update } from './fhir.js';
import type { UnitOfWork } from './handler.js';
import { loadResource, versionOf, type WriteResult } from './resources.js';

/** The Task as its stream holds it. @throws {DomainError} 404 when missing, deleted or another tenant's. */
const loadTask = async (uow: UnitOfWork, principal: Principal, taskId: number) => {
  const task = await loadResource(uow, 'Task', taskId, principal.tenantId);
  if (task.status !== 'active')
    throw new DomainError('not_found', 'TaskNotFound', `Task/${taskId} is not known in this data tenant`);
  return task;
};

/**
 * Starts the report of a `draft` Task (form selection): creates the populated QuestionnaireResponse
 * and moves the Task to `in-progress` with the response as its focus and output.
 * @throws {DomainError} 409 when the Task is no longer a draft (its report was started meanwhile),
 *   403/404/422 as the data server's create and update.
 */
export const startReport = async (
  uow: UnitOfWork,
  principal: Principal,
  taskId: number,
  response: Record<string, unknown>,
): Promise<WriteResult> => {
  const task = await loadTask(uow, principal, taskId);
  if (task.resource.status !== 'draft')
    throw new DomainError(
      'conflict',
      'TaskStarted',
      `Task/${taskId} is ${String(task.resource.status)}: its report has already been started`,
    );
  const created = await create(uow, principal, DEFINITIONS.QuestionnaireResponse, response);
  const reference = { reference: `QuestionnaireResponse/${created.id}` };
  const outputs = (Array.isArray(task.resource.output) ? (task.resource.output as Content[]) : []).filter(
    (o) => referenceId(o?.valueReference, 'QuestionnaireResponse') === undefined,
  );
  await update(uow, principal, DEFINITIONS.Task, taskId, {
    resourceType: 'Task',
    ...task.resource,
    status: 'in-progress',
    focus: reference,
    output: [...outputs, { type: { text: 'questionnaire-response' }, valueReference: reference }],
  });
  return created;
};

/** What a write of the report does (src/domain/report/report.ts commands). */
export type ReportWrite = (
  | { readonly type: 'SaveReport' | 'SubmitReport' }
  | { readonly type: 'AmendReport' | 'MarkReportEnteredInError'; readonly reason: string }
) & {
  /** `Practitioner/<id>` of the session's user: the version's author, kept in its event. */
  readonly author?: string;
};

/**
 * Writes a version of a report, decided by the report decider (src/domain/report/report.ts;
 * docs/architecture.md "Reports"): save (`in-progress`), submit (`completed`), amend (`amended`)
 * or entered-in-error, each based on `baseVersion` (the `meta.versionId` the page was built from).
 * ONE append: the response's new version and, on submit, the Task `completed` (a save starts a
 * `ready` Task); an amendment or entered-in-error leaves the Task `completed`.
 * @throws {ReportChangedElsewhere} 409 `baseVersion` is not the current version (nothing stored).
 * @throws {DomainError} 409 ReportLocked / ReportNotSignedOff, 400 ReasonRequired, and those of
 *   the data server's update (403, 404, 410, 422).
 */
export const writeReport = async (
  uow: UnitOfWork,
  principal: Principal,
  taskId: number,
  responseId: number,
  response: Record<string, unknown>,
  baseVersion: number,
  write: ReportWrite,
): Promise<WriteResult> => {
  const task = await loadTask(uow, principal, taskId);
  const stored = await loadResource(uow, 'QuestionnaireResponse', responseId, principal.tenantId);
  // A response of another tenant reads as none (loadResource): its version is not asked.
  const current = reportStateOf(
    stored,
    stored.status === 'none' ? 0 : versionOf(uow, 'QuestionnaireResponse', responseId),
  );
  const { resourceType: _type, id: _id, meta: _meta, ...content } = response;
  const [decided] = reportDecider.decide(
    {
      ...write,
      responseId,
      baseVersion,
      resource: content,
      now: uow.now,
    } as ReportCommand,
    current,
  );
  const data = decided!.data as ChangedData;
  const saved = await update(
    uow,
    principal,
    DEFINITIONS.QuestionnaireResponse,
    responseId,
    { resourceType: 'QuestionnaireResponse', ...data.resource },
    current.version,
    data.reason !== undefined || data.author !== undefined
      ? {
          ...(data.reason !== undefined ? { reason: data.reason } : {}),
          ...(data.author !== undefined ? { author: data.author } : {}),
        }
      : undefined,
  );
  const next =
    write.type === 'SubmitReport'
      ? 'completed'
      : write.type === 'SaveReport' && task.resource.status === 'ready'
        ? 'in-progress'
        : undefined;
  if (next !== undefined && task.resource.status !== next)
    await update(uow, principal, DEFINITIONS.Task, taskId, {
      resourceType: 'Task',
      ...task.resource,
      status: next,
    });
  return saved;
};
