/**
 * The report editor `{app_url}/tasks/:id/report` (issue 5; docs/interface.md §1.3, §2.1, §3.2): the Task's
 * QuestionnaireResponse as a form; save, submit (validated, then post_submit_redirect) or cancel
 * (post_cancel_redirect). Writes go through the data server's handlers, with the session as actor.
 */
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { execute } from '../../commands/handler.js';
import { saveReport } from '../../commands/reports.js';
import { checkRedirect, readTenant } from '../../commands/sessions.js';
import { DomainError } from '../../domain/decider.js';
import { type ResourceRow, readIfVisible } from '../../queries/visibility.js';
import { expandValueSet } from '../../sdc/expand.js';
import type { Json, Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { validateResponse } from '../../sdc/validate.js';
import { globalRedirectOrigins } from '../auth/sessions.js';
import { evaluationBudget } from '../edge/budget.js';
import { tenantResolver } from '../sdc/resolve.js';
import {
  carriedInputs,
  loadTask,
  type PageContext,
  pageContext,
  patientBanner,
  referenceId,
  sendHtml,
  withQuery,
} from './context.js';
import { evaluateEnableWhen, normaliseValue, rulesOf } from './enable-when.js';
import {
  buildItems,
  type Choice,
  codingChoices,
  type FormBody,
  itemsByLinkId,
  linkIdOfExpression,
  missingRequired,
  optionChoices,
  valuesOf,
} from './form-data.js';
import { escapeHtml, layout } from './layout.js';
import { answersByLinkId, editorData, itemAnchor, renderItems, scriptJson } from './render.js';
import { EDITOR_SCRIPT } from './script.js';

interface Report {
  readonly task: ResourceRow;
  /** The Task's live Patient, for the top bar. */
  readonly patient: ResourceRow | undefined;
  readonly response: ResourceRow;
  readonly questionnaire: Questionnaire;
  readonly choices: Map<string, Choice[]>;
}

const appBase = (casebook: Casebook) => casebook.config.appUrl.replace(/\/+$/, '');

/** Choices of every choice item: answerOption, or the expansion of answerValueSet. */
const choicesOf = async (
  questionnaire: Questionnaire,
  resolve: ReturnType<typeof tenantResolver>,
  now: Date,
): Promise<Map<string, Choice[]>> => {
  const choices = new Map<string, Choice[]>();
  for (const item of itemsByLinkId(questionnaire.item).values()) {
    if (Array.isArray(item.answerOption) && item.answerOption.length > 0) {
      choices.set(item.linkId, optionChoices(item));
      continue;
    }
    if (typeof item.answerValueSet !== 'string') continue;
    const canonical = item.answerValueSet;
    const valueSet = canonical.startsWith('#')
      ? (questionnaire.contained ?? []).find(
          (c) => c.resourceType === 'ValueSet' && c.id === canonical.slice(1),
        )
      : await resolve('ValueSet', canonical);
    if (!valueSet) continue;
    try {
      const expanded = expandValueSet(valueSet, { now: now.toISOString() });
      choices.set(item.linkId, codingChoices((expanded.expansion.contains ?? []).map((c) => ({ ...c }))));
    } catch {
      // A ValueSet casebook cannot enumerate: the item falls back to a code input.
    }
  }
  return choices;
};

/**
 * Loads the Task, its response and the response's Questionnaire, each as the session may see it
 * (`openTask`, src/queries/visibility.ts): a Task of this session's patient that points at another
 * patient's report opens nothing (issue 33).
 * @throws {DomainError} 404 unknown Task, 403 a Task, Patient, Encounter or response the session
 *   may not read, 422 no response or no form.
 */
const loadReport = async (
  page: PageContext,
  casebook: Casebook,
  taskId: string | undefined,
): Promise<Report> => {
  const { task, patient, response } = await loadTask(page, taskId);
  if (task.resource.status === 'failed')
    throw new DomainError('unprocessable', 'TaskFailed', `Task/${task.id} has failed and cannot be opened`);
  if (!response)
    throw new DomainError('unprocessable', 'NoResponse', `Task/${task.id} has no questionnaire response yet`);
  page.note([{ reference: `QuestionnaireResponse/${response.id}`, patientId: response.patientId }]);
  const resolve = tenantResolver(casebook, page.principal);
  const canonical = String(response.resource.questionnaire ?? '');
  let questionnaire = canonical ? await resolve('Questionnaire', canonical) : undefined;
  const localId = referenceId({ reference: canonical }, 'Questionnaire');
  if (!questionnaire && localId !== undefined)
    questionnaire = (await readIfVisible(page.command.sql, page.principal, 'Questionnaire', localId))
      ?.resource as Json | undefined;
  if (!questionnaire)
    throw new DomainError(
      'unprocessable',
      'QuestionnaireNotFound',
      `the form of this report (${canonical || 'none'}) is not available to you`,
    );
  const q = questionnaire as unknown as Questionnaire;
  return {
    task,
    patient,
    response,
    questionnaire: q,
    choices: await choicesOf(q, resolve, page.command.now),
  };
};

const STATUS_LABELS: Record<string, string> = {
  'in-progress': 'In progress',
  completed: 'Completed',
  amended: 'Amended',
};

interface EditorView {
  readonly items: QuestionnaireResponse['item'];
  readonly errors?: Map<string, string[]>;
  readonly summary?: { linkId: string | undefined; message: string }[];
  readonly notice?: string;
}

const renderEditor = async (
  ctx: Context,
  casebook: Casebook,
  page: PageContext,
  report: Report,
  view: EditorView,
  status: number,
) => {
  const { task, patient, response, questionnaire, choices } = report;
  const qrStatus = String(response.resource.status ?? '');
  const errors = view.errors ?? new Map<string, string[]>();
  const answers = answersByLinkId(view.items);
  // Object.fromEntries: own keys only, so a linkId such as `__proto__` stays a linkId.
  const values = Object.fromEntries(
    [...answers].map(([linkId, list]) => [
      linkId,
      list.map((a) => normaliseValue(a, 'value')).filter((v) => v !== undefined),
    ]),
  );
  const enabled = evaluateEnableWhen(rulesOf(questionnaire.item), values);
  const items = renderItems(questionnaire.item, view.items, {
    readonly: page.readonly,
    choices,
    errors,
    enabled,
  });
  const title = String(questionnaire.title ?? questionnaire.name ?? 'Report');
  const byLinkId = itemsByLinkId(questionnaire.item);
  const summary =
    view.summary && view.summary.length > 0
      ? `<div id="error-summary" class="error-summary" role="alert" tabindex="-1" aria-labelledby="error-summary-title">
<h2 id="error-summary-title">The report cannot be submitted yet</h2><ul>${view.summary
          .map((s) => {
            const item = s.linkId ? byLinkId.get(s.linkId) : undefined;
            const name = item ? escapeHtml(String(item.text ?? item.linkId)) : '';
            const text = `${name ? `${name}: ` : ''}${escapeHtml(s.message)}`;
            return `<li>${s.linkId ? `<a href="#${itemAnchor(s.linkId)}">${text}</a>` : text}</li>`;
          })
          .join('')}</ul></div>`
      : '';
  const notice = view.notice ? `<div class="notice" role="status">${escapeHtml(view.notice)}</div>` : '';
  const badge = page.readonly
    ? '<span class="badge readonly">Read-only</span>'
    : `<span class="badge status-${escapeHtml(qrStatus)}">${escapeHtml(STATUS_LABELS[qrStatus] ?? qrStatus)}</span>`;
  const head = `<div class="report-head"><div><h1>${escapeHtml(title)}</h1><p class="meta">${
    typeof questionnaire.version === 'string' ? `Version ${escapeHtml(questionnaire.version)} · ` : ''
  }Task ${task.id}</p></div>${badge}</div>`;
  const action = withQuery(`${appBase(casebook)}/tasks/${task.id}/report`, page.carry);
  const body = page.readonly
    ? `<main id="main">${head}<p class="readonly-note" role="note">This report is open read-only: answers cannot be changed here.</p>
<div class="card report readonly">${items || '<p class="hint">This form has no questions.</p>'}</div></main>`
    : `<main id="main">${notice}${summary}${head}
<form id="report-form" method="post" action="${escapeHtml(action)}" novalidate>
<input type="hidden" name="cb:tz" value="Z">${carriedInputs(page.carry)}
<div class="card report">${items || '<p class="hint">This form has no questions.</p>'}</div>
<div class="actions" role="group" aria-label="Report actions">
<button type="submit" name="action" value="cancel" class="secondary" formnovalidate>Cancel</button>
<span class="spacer"></span>
<button type="submit" name="action" value="save" class="secondary">Save draft</button>
<button type="submit" name="action" value="submit" class="primary">Submit report</button>
</div></form>
<script type="application/json" id="cb-data">${scriptJson(editorData(questionnaire.item, choices))}</script></main>`;
  sendHtml(
    ctx,
    status,
    layout({
      title,
      chrome: page.chrome,
      topBar: patientBanner(patient?.resource),
      body,
      ...(page.readonly ? {} : { script: EDITOR_SCRIPT }),
    }),
  );
};

/** GET {app_url}/tasks/:id/report. */
export const showReport = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const page = await pageContext(ctx, casebook);
  const report = await loadReport(page, casebook, ctx.params.id);
  const notice =
    ctx.query.saved !== undefined ? 'Saved. Your answers are stored; you can continue later.' : undefined;
  await renderEditor(
    ctx,
    casebook,
    page,
    report,
    { items: report.response.resource.item as QuestionnaireResponse['item'], ...(notice ? { notice } : {}) },
    200,
  );
};

/** A validation message for the field: the item's label is already next to it. */
const fieldMessage = (issue: { code: string; diagnostics: string }): string =>
  issue.code === 'required'
    ? 'An answer is required.'
    : `${issue.diagnostics
        .replace(
          /(?:group |question )?'[^']*' \(linkId "(?:[^"\\]|\\.)*"\)|linkId "(?:[^"\\]|\\.)*"/g,
          'this answer',
        )
        .replace(/^this answer/, 'This answer')}`;

const linkIdOfDiagnostics = (diagnostics: string): string | undefined => {
  const m = /linkId ("(?:[^"\\]|\\.)*")/.exec(diagnostics);
  if (!m) return undefined;
  try {
    return JSON.parse(m[1]!) as string;
  } catch {
    return undefined;
  }
};

/** Where the browser goes next: a checked redirect with the parameters appended, or undefined. */
const redirectTarget = async (
  page: PageContext,
  casebook: Casebook,
  target: string | undefined,
  field: string,
  append: Record<string, string>,
): Promise<{ url?: string; problem?: string }> => {
  if (!target) return {};
  const tenant = await readTenant(page.command.store, page.session.tenantId);
  try {
    const url = new URL(
      checkRedirect(target, [...globalRedirectOrigins(casebook), ...tenant.redirectOrigins], field),
    );
    for (const [k, v] of Object.entries(append)) url.searchParams.append(k, v);
    return { url: url.toString() };
  } catch (error) {
    return { problem: error instanceof Error ? error.message : String(error) };
  }
};

/** The Task's post-submit-redirect input (type text or coding code `post-submit-redirect`). */
const taskRedirectInput = (task: Record<string, unknown>): string | undefined => {
  for (const input of Array.isArray(task.input) ? (task.input as Record<string, unknown>[]) : []) {
    const type = input?.type as { text?: unknown; coding?: { code?: unknown }[] } | undefined;
    const named =
      type?.text === 'post-submit-redirect' ||
      (Array.isArray(type?.coding) && type.coding.some((c) => c?.code === 'post-submit-redirect'));
    if (named && typeof input.valueUrl === 'string') return input.valueUrl;
    if (named && typeof input.valueUri === 'string') return input.valueUri;
  }
  return undefined;
};

const messagePage = (ctx: Context, page: PageContext, title: string, text: string, extra = '') =>
  sendHtml(
    ctx,
    200,
    layout({
      title,
      chrome: page.chrome,
      body: `<main id="main"><div class="card outcome"><h1>${escapeHtml(title)}</h1><p>${escapeHtml(text)}</p>${extra}</div></main>`,
    }),
  );

/** POST {app_url}/tasks/:id/report with `action=save|submit|cancel`. */
export const postReport = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const page = await pageContext(ctx, casebook);
  const body = (ctx.request.body ?? {}) as FormBody;
  const action = valuesOf(body, 'action')[0];
  if (action !== 'save' && action !== 'submit' && action !== 'cancel')
    throw new DomainError('invalid', 'InvalidAction', 'action must be save, submit or cancel', 'action');
  const report = await loadReport(page, casebook, ctx.params.id);
  const { task, response, questionnaire } = report;

  if (action === 'cancel') {
    const { url, problem } = await redirectTarget(
      page,
      casebook,
      page.session.postCancelRedirect ?? undefined,
      'post_cancel_redirect',
      {},
    );
    if (url) {
      ctx.status = 303;
      ctx.set('Cache-Control', 'no-store');
      ctx.redirect(url);
      ctx.status = 303;
      return;
    }
    messagePage(
      ctx,
      page,
      'Cancelled',
      'Nothing was changed since your last save. You can close this window and return to your clinical system.',
      problem ? `<p class="hint">The return address was not allowed: ${escapeHtml(problem)}</p>` : '',
    );
    return;
  }
  if (page.readonly)
    throw new DomainError('forbidden', 'ReadOnly', 'this report was opened read-only and cannot be changed');

  const current = response.resource as unknown as QuestionnaireResponse;
  const built = buildItems(questionnaire.item, body, {
    choices: report.choices,
    existing: current.item ?? [],
  });
  const wasCompleted = current.status === 'completed' || current.status === 'amended';
  const status = action === 'submit' || wasCompleted ? 'completed' : 'in-progress';
  const { resourceType: _t, id: _i, meta: _m, ...content } = response.resource;
  const { item: _old, ...rest } = content;
  const next: QuestionnaireResponse = {
    ...(rest as Omit<QuestionnaireResponse, 'resourceType'>),
    resourceType: 'QuestionnaireResponse',
    status,
    ...(built.items.length > 0 ? { item: built.items } : {}),
    authored: page.command.now.toISOString(),
  };

  const errors = new Map(built.errors);
  const summary: { linkId: string | undefined; message: string }[] = [];
  for (const [linkId, messages] of built.errors)
    for (const message of messages) summary.push({ linkId, message });
  if (status === 'completed' && errors.size === 0) {
    const outcome = await validateResponse(next, questionnaire, {
      budget: evaluationBudget(ctx),
      resolve: tenantResolver(casebook, page.principal),
    });
    for (const issue of outcome.issue) {
      if (issue.severity !== 'error' && issue.severity !== 'fatal') continue;
      const linkId =
        linkIdOfDiagnostics(issue.diagnostics) ?? linkIdOfExpression(issue.expression?.[0] ?? '', next.item);
      const message = fieldMessage(issue);
      if (linkId) errors.set(linkId, [...(errors.get(linkId) ?? []), message]);
      summary.push({ linkId, message });
    }
  }
  if (status === 'completed' && built.errors.size === 0)
    for (const linkId of missingRequired(questionnaire.item, next.item)) {
      if (errors.has(linkId)) continue;
      errors.set(linkId, ['An answer is required.']);
      summary.push({ linkId, message: 'An answer is required.' });
    }
  if (summary.length > 0) {
    const order = [...itemsByLinkId(questionnaire.item).keys()];
    const rank = (linkId: string | undefined) => (linkId === undefined ? -1 : order.indexOf(linkId));
    summary.sort((a, b) => rank(a.linkId) - rank(b.linkId));
    await renderEditor(ctx, casebook, page, report, { items: next.item, errors, summary }, 422);
    return;
  }

  // One append: the response and the Task (completed on submit) move together.
  await execute(page.command, (uow) =>
    saveReport(
      uow,
      page.principal,
      task.id,
      response.id,
      next as unknown as Record<string, unknown>,
      status === 'completed',
    ),
  );

  if (action === 'save') {
    ctx.status = 303;
    ctx.set('Cache-Control', 'no-store');
    ctx.redirect(withQuery(`${appBase(casebook)}/tasks/${task.id}/report`, page.carry, { saved: '1' }));
    ctx.status = 303;
    return;
  }
  // docs/interface.md §2.1: the session's post_submit_redirect wins over the Task's input.
  const { url, problem } = await redirectTarget(
    page,
    casebook,
    page.session.postSubmitRedirect ?? taskRedirectInput(task.resource),
    'post_submit_redirect',
    { response: `QuestionnaireResponse/${response.id}`, task: `Task/${task.id}` },
  );
  if (url) {
    ctx.status = 303;
    ctx.set('Cache-Control', 'no-store');
    ctx.redirect(url);
    ctx.status = 303;
    return;
  }
  messagePage(
    ctx,
    page,
    'Report submitted',
    'The report was submitted. You can close this window and return to your clinical system.',
    problem ? `<p class="hint">The return address was not allowed: ${escapeHtml(problem)}</p>` : '',
  );
};
