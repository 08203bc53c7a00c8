/**
 * Form selection for a draft Task (issue 5; docs/interface.md §3.2): the Questionnaires the session may use;
 * picking one populates a QuestionnaireResponse, links it to the Task and starts the report.
 */
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { execute } from '../../commands/handler.js';
import { startReport } from '../../commands/reports.js';
import { DomainError } from '../../domain/decider.js';
import { resourceIdIn } from '../../fhir/references.js';
import { findVisible, type ResourceRow, readIfVisible } from '../../queries/visibility.js';
import { populate } from '../../sdc/populate.js';
import type { Json, Questionnaire } from '../../sdc/types.js';
import { evaluationBudget } from '../edge/budget.js';
import { queryBudget, queryRunner } from '../sdc/query.js';
import {
  carriedInputs,
  loadTask,
  type PageContext,
  pageBanner,
  pageContext,
  sendHtml,
  withQuery,
} from './context.js';
import { escapeHtml, layout } from './layout.js';

/** The Questionnaires of the tenant the session may read, but retired ones, by id. */
export const usableQuestionnaires = async (page: PageContext): Promise<ResourceRow[]> =>
  (await findVisible(page.command.sql, page.principal, 'Questionnaire', { limit: 1000 })).filter(
    (row) => row.resource.status !== 'retired',
  );

const titleOf = (q: Record<string, unknown>): string =>
  String(q.title ?? q.name ?? q.url ?? `Questionnaire ${String(q.id ?? '')}`);

/** GET {app_url}/tasks/:id/forms. */
export const formSelection = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const page = await pageContext(ctx, casebook);
  const { task, patient } = await loadTask(page, ctx.params.id);
  const questionnaires = await usableQuestionnaires(page);
  const appUrl = casebook.config.appUrl.replace(/\/+$/, '');
  const list =
    questionnaires.length === 0
      ? '<p class="empty-state">No report forms are available to you for this task. Ask your administrator for access.</p>'
      : `<ul class="form-list" role="list">${questionnaires
          .map((row) => {
            const q = row.resource;
            const description = typeof q.description === 'string' ? q.description : '';
            return `<li><button type="submit" name="questionnaire" value="${row.id}" class="form-choice">
<span class="form-title">${escapeHtml(titleOf(q))}</span>${
              typeof q.version === 'string'
                ? `<span class="form-version">version ${escapeHtml(q.version)}</span>`
                : ''
            }${description ? `<span class="form-description">${escapeHtml(description)}</span>` : ''}</button></li>`;
          })
          .join('')}</ul>`;
  const notStarted = task.resource.status === 'draft';
  sendHtml(
    ctx,
    200,
    layout({
      title: 'Choose a report form',
      chrome: page.chrome,
      banner: await pageBanner(page, patient),
      body: `<main id="main"><div class="card">
<h1>Choose a report form</h1>
<p class="hint">${
        notStarted
          ? 'Select the form to start this report with. Answers known from the clinical record are filled in for you.'
          : 'This task already has a report; choosing a form starts a new one.'
      }</p>
<form method="post" action="${escapeHtml(withQuery(`${appUrl}/tasks/${task.id}/forms`, page.carry))}">${carriedInputs(page.carry)}${list}</form>
</div></main>`,
    }),
  );
};

/** POST {app_url}/tasks/:id/forms with `questionnaire=<id>`. */
export const chooseForm = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const page = await pageContext(ctx, casebook);
  const opened = await loadTask(page, ctx.params.id);
  const { task } = opened;
  if (task.resource.status !== 'draft')
    throw new DomainError(
      'conflict',
      'TaskStarted',
      `Task/${task.id} is ${String(task.resource.status)}: its report has already been started`,
    );
  const raw = (ctx.request.body as Record<string, unknown> | undefined)?.questionnaire;
  const qid = typeof raw === 'string' ? resourceIdIn(raw) : undefined;
  if (qid === undefined)
    throw new DomainError('invalid', 'QuestionnaireRequired', 'choose a form (questionnaire=<id>)');
  const qrow = await readIfVisible(page.command.sql, page.principal, 'Questionnaire', qid);
  if (!qrow)
    throw new DomainError('not_found', 'QuestionnaireNotFound', `no form ${qid} is available to you`);

  // The launch context of the form: what the session may read (the Task's Patient and Encounter,
  // read when the Task was opened; the session user's own Practitioner).
  const patient = opened.patient?.resource as Json | undefined;
  const encounter = opened.encounter?.resource as Json | undefined;
  const user = (await readIfVisible(page.command.sql, page.principal, 'Practitioner', page.session.userId))
    ?.resource as Json | undefined;
  const { response } = await populate({
    budget: evaluationBudget(ctx),
    questionnaire: qrow.resource as unknown as Questionnaire,
    ...(patient ? { subject: { reference: `Patient/${patient.id}` } } : {}),
    context: [
      ...(patient ? [{ name: 'patient', content: patient }] : []),
      ...(encounter ? [{ name: 'encounter', content: encounter }] : []),
      ...(user ? [{ name: 'user', content: user }] : []),
    ],
    now: page.command.now,
    // The editor's form is populated as $populate would: queries of the session's own data.
    query: queryRunner(ctx, page.command.sql, page.principal, casebook.config.fhirUrl),
    queryBudget: queryBudget(ctx),
  });
  const questionnaireRef =
    response.questionnaire ??
    (typeof qrow.resource.url === 'string' ? qrow.resource.url : `Questionnaire/${qrow.id}`);
  const qr = {
    ...response,
    questionnaire: questionnaireRef,
    status: 'in-progress',
    ...(patient ? { subject: { reference: `Patient/${patient.id}` } } : {}),
    ...(encounter ? { encounter: { reference: `Encounter/${encounter.id}` } } : {}),
    author: { reference: page.principal.userRef! },
    authored: page.command.now.toISOString(),
  };
  // One append: the response and the Task moved to in-progress (a concurrent start answers 409).
  await execute(page.command, (uow) => startReport(uow, page.principal, task.id, qr));
  const appUrl = casebook.config.appUrl.replace(/\/+$/, '');
  ctx.status = 303;
  ctx.set('Cache-Control', 'no-store');
  ctx.redirect(withQuery(`${appUrl}/tasks/${task.id}/report`, page.carry));
  ctx.status = 303;
};
