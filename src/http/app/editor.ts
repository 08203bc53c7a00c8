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
import { defineForm, type FormDefinition, runForm } from '../../sdc/engine/index.js';
import { membersOf, resolveAnswerValueSets, type ValueSetMembers } from '../../sdc/engine/valuesets.js';
import { expandValueSet } from '../../sdc/expand.js';
import type { Json, Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { globalRedirectOrigins } from '../auth/sessions.js';
import { evaluationBudget } from '../edge/budget.js';
import { formResolver, tenantResolver } from '../sdc/resolve.js';
import { editorAssets } from './assets-route.js';
import {
  carriedInputs,
  loadTask,
  type PageContext,
  pageBanner,
  pageContext,
  referenceId,
  sendHtml,
  withQuery,
} from './context.js';
import { type EditorData, evaluateEditorForm } from './editor-form.js';
import {
  type Choice,
  codingChoices,
  type FormBody,
  optionChoices,
  valuesOf,
  withStoredChoices,
} from './form-data.js';
import { escapeHtml, layout } from './layout.js';
import { itemAnchor, renderItems, scriptJson } from './render.js';

interface Report {
  readonly task: ResourceRow;
  /** The Task's live Patient, for the top bar. */
  readonly patient: ResourceRow | undefined;
  readonly response: ResourceRow;
  readonly questionnaire: Questionnaire;
  readonly form: FormDefinition;
  /** linkId → choices: answerOption, the answerValueSet's expansion, and the stored codings. */
  readonly choices: Map<string, Choice[]>;
  /** answerValueSet canonical → its codes (the ValueSets that could be resolved). */
  readonly valueSets: Map<string, ValueSetMembers>;
}

const appBase = (casebook: Casebook) => casebook.config.appUrl.replace(/\/+$/, '');

/**
 * Choices of every choice item: answerOption, or the expansion of its answerValueSet — contained,
 * or stored in the tenant and read with the form's rights (src/http/sdc/resolve.ts formResolver),
 * not the session's scopes.
 */
const choicesOf = (
  questionnaire: Questionnaire,
  valueSets: ReadonlyMap<string, Json>,
  now: Date,
): Map<string, Choice[]> => {
  const choices = new Map<string, Choice[]>();
  const walk = (items: Questionnaire['item']) => {
    for (const item of items ?? []) {
      if (typeof item?.linkId !== 'string') continue;
      walk(item.item);
      if (choices.has(item.linkId)) continue;
      if (Array.isArray(item.answerOption) && item.answerOption.length > 0) {
        choices.set(item.linkId, optionChoices(item));
        continue;
      }
      const valueSet =
        typeof item.answerValueSet === 'string' ? valueSets.get(item.answerValueSet) : undefined;
      if (!valueSet) continue;
      try {
        const expanded = expandValueSet(valueSet, { now: now.toISOString() });
        choices.set(item.linkId, codingChoices((expanded.expansion.contains ?? []).map((c) => ({ ...c }))));
      } catch {
        // A ValueSet casebook cannot enumerate: the item keeps its stored answers (form-data.ts hasField).
      }
    }
  };
  walk(questionnaire.item);
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
  const resolved = await resolveAnswerValueSets(q, formResolver(casebook, page.principal, q));
  const choices = withStoredChoices(
    choicesOf(q, resolved, page.command.now),
    (response.resource as unknown as QuestionnaireResponse).item,
  );
  const valueSets = new Map([...resolved].map(([canonical, valueSet]) => [canonical, membersOf(valueSet)]));
  return { task, patient, response, questionnaire: q, form: defineForm(q), choices, valueSets };
};

const STATUS_LABELS: Record<string, string> = {
  'in-progress': 'In progress',
  completed: 'Completed',
  amended: 'Amended',
};

/** What the editor page shows. */
interface EditorView {
  /** The whole form as a response (every field's item: src/sdc/engine/tree.ts completeTree). */
  readonly page: QuestionnaireResponse;
  /** Enablement by node key. */
  readonly enabled: ReadonlyMap<string, boolean>;
  /** Field messages by node key. */
  readonly errors?: ReadonlyMap<string, readonly string[]>;
  readonly summary?: readonly SummaryEntry[];
  readonly notice?: string;
}

/** One line of the error summary: a field's message, linked to the field when it has one. */
interface SummaryEntry {
  readonly linkId: string | undefined;
  readonly key: string | undefined;
  readonly message: string;
}

/** The linkIds of the nodes `errors` names (`nodule[1]/size` → `size`), by key. */
const nodeLinkIds = (errors: ReadonlyMap<string, readonly string[]> | undefined): Map<string, string> =>
  new Map(
    [...(errors?.keys() ?? [])].map((key) => [
      key,
      key.slice(key.lastIndexOf('/') + 1).replace(/\[\d+\]$/, ''),
    ]),
  );

/**
 * The section list of a long form (issue 32 "Long forms"): one link per top-level group, with
 * the count of field messages inside it; empty for forms with fewer than two groups. The browser
 * opens it as a sidebar on wide screens and a menu on phones (src/http/app/browser/long-form.ts).
 */
const sectionList = (
  questionnaire: Questionnaire,
  errors: ReadonlyMap<string, readonly string[]>,
  linkIds: ReadonlyMap<string, string>,
): string => {
  const groups = (questionnaire.item ?? []).filter(
    (i) => i?.type === 'group' && typeof i.linkId === 'string',
  );
  if (groups.length < 2) return '';
  const inside = (item: Questionnaire['item'] extends (infer T)[] | undefined ? T : never): Set<string> => {
    const ids = new Set<string>([item.linkId]);
    for (const child of item.item ?? []) for (const id of inside(child)) ids.add(id);
    return ids;
  };
  let total = 0;
  const links = groups
    .map((group) => {
      const ids = inside(group);
      let count = 0;
      for (const [key, messages] of errors) if (ids.has(linkIds.get(key) ?? '')) count += messages.length;
      total += count;
      const anchor = itemAnchor(group.linkId);
      return `<li><a href="#${anchor}" data-section="${anchor}">${escapeHtml(String(group.text ?? group.linkId))}<span class="section-errors"${
        count === 0 ? ' hidden' : ''
      }>${count === 0 ? '' : `${count} ${count === 1 ? 'error' : 'errors'}`}</span></a></li>`;
    })
    .join('');
  return `<nav class="sections" aria-label="Sections"><details><summary>Sections<span class="sections-total"${
    total === 0 ? ' hidden' : ''
  }>${total === 0 ? '' : `(${total} ${total === 1 ? 'error' : 'errors'})`}</span></summary><ol>${links}</ol></details></nav>`;
};

const renderEditor = async (
  ctx: Context,
  casebook: Casebook,
  page: PageContext,
  report: Report,
  view: EditorView,
  status: number,
) => {
  const { task, patient, response, questionnaire, form, choices, valueSets } = report;
  const qrStatus = String(response.resource.status ?? '');
  const items = renderItems(questionnaire.item, view.page.item, {
    readonly: page.readonly,
    choices,
    errors: view.errors ?? new Map(),
    enabled: view.enabled,
  });
  const title = String(questionnaire.title ?? questionnaire.name ?? 'Report');
  const summary =
    view.summary && view.summary.length > 0
      ? `<div id="error-summary" class="error-summary" role="alert" tabindex="-1" aria-labelledby="error-summary-title">
<h2 id="error-summary-title">The report cannot be submitted yet</h2><ul>${view.summary
          .map((s) => {
            const item = s.linkId ? form.byLinkId.get(s.linkId)?.item : undefined;
            const name = item ? escapeHtml(String(item.text ?? item.linkId)) : '';
            const text = `${name ? `${name}: ` : ''}${escapeHtml(s.message)}`;
            return `<li>${s.key ? `<a href="#${itemAnchor(s.key)}">${text}</a>` : text}</li>`;
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
  const assets = page.readonly ? undefined : await editorAssets(casebook);
  const data: EditorData = {
    questionnaire,
    choices: [...choices],
    valueSets: [...valueSets],
    stored: (response.resource as unknown as QuestionnaireResponse).item,
    ...(assets?.worker ? { worker: assets.worker } : {}),
  };
  const sections = sectionList(questionnaire, view.errors ?? new Map(), nodeLinkIds(view.errors));
  const banner = await pageBanner(page, patient, {
    status: qrStatus,
    ...(typeof response.resource.meta === 'object' &&
    response.resource.meta !== null &&
    typeof (response.resource.meta as { versionId?: unknown }).versionId === 'string'
      ? { version: (response.resource.meta as { versionId: string }).versionId }
      : {}),
  });
  const authored = typeof response.resource.authored === 'string' ? response.resource.authored : '';
  const body = page.readonly
    ? `<main id="main">${head}<p class="readonly-note" role="note">This report is open read-only: answers cannot be changed here.</p>
<div class="card report readonly">${items || '<p class="hint">This form has no questions.</p>'}</div></main>`
    : `<main id="main">${notice}${summary}${head}
<section id="cb-draft" class="draft-offer" aria-labelledby="cb-draft-title" hidden><h2 id="cb-draft-title">Unsaved answers found</h2>
<p data-draft-text>Answers you typed earlier were not saved. They are kept in this browser.</p>
<div class="buttons"><button type="button" class="primary" data-draft-restore>Restore unsaved answers</button><button type="button" class="secondary" data-draft-discard>Discard</button></div></section>
<div class="${sections ? 'editor-layout' : ''}">${sections}<div class="editor-main">
<form id="report-form" method="post" action="${escapeHtml(action)}" data-task="${task.id}"${
        (page.session.postSubmitRedirect ?? taskRedirectInput(task.resource)) ? ' data-return-submit' : ''
      }${page.session.postCancelRedirect ? ' data-return-cancel' : ''} autocomplete="off" novalidate>
<input type="hidden" name="cb:tz" value="Z">${carriedInputs(page.carry)}
<div class="card report">${items || '<p class="hint">This form has no questions.</p>'}</div>
<p id="cb-live" class="visually-hidden" role="status" aria-live="polite"></p>
<p id="cb-save-problem" class="save-problem" role="alert" hidden></p>
<div class="actions" role="group" aria-label="Report actions">
<button type="submit" name="action" value="cancel" class="secondary" formnovalidate>Cancel</button>
<p id="cb-save-status" class="save-status" role="status"${authored ? ` data-saved-at="${escapeHtml(authored)}"` : ''}></p>
<span class="spacer"></span>
<button type="submit" name="action" value="save" class="secondary">Save draft</button>
<button type="submit" name="action" value="submit" class="primary">Submit report</button>
</div></form></div></div>
<dialog id="cb-discard" aria-labelledby="cb-discard-title"><form method="dialog"><h2 id="cb-discard-title">Discard unsaved changes?</h2>
<p>Answers changed since the last save will be lost.</p>
<div class="buttons"><button value="keep" class="secondary" autofocus>Keep editing</button><button value="discard" class="danger">Discard changes</button></div></form></dialog>
<script type="application/json" id="cb-data">${scriptJson(data)}</script></main>`;
  sendHtml(
    ctx,
    status,
    layout({
      title,
      chrome: page.chrome,
      banner,
      body,
      ...(sections && !page.readonly ? { bodyClass: 'has-sections' } : {}),
      ...(assets ? { scripts: assets.scripts } : {}),
    }),
  );
};

/**
 * GET {app_url}/tasks/:id/report: the stored answers, with enablement and calculated values as the
 * engine gives them now.
 */
export const showReport = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const page = await pageContext(ctx, casebook);
  const report = await loadReport(page, casebook, ctx.params.id);
  const notice =
    ctx.query.saved !== undefined ? 'Saved. Your answers are stored; you can continue later.' : undefined;
  const shown = structuredClone(report.response.resource) as unknown as QuestionnaireResponse;
  const run = runForm(report.form, shown, {
    complete: true,
    calculate: true,
    budget: evaluationBudget(ctx),
    now: page.command.now,
  });
  await renderEditor(
    ctx,
    casebook,
    page,
    report,
    { page: shown, enabled: run.enablementByKey(), ...(notice ? { notice } : {}) },
    200,
  );
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

const messagePage = (
  ctx: Context,
  page: PageContext,
  title: string,
  text: string,
  extra: string,
  banner: string,
) =>
  sendHtml(
    ctx,
    200,
    layout({
      title,
      chrome: page.chrome,
      banner,
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
  const { task, response } = report;

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
      await pageBanner(page, report.patient),
    );
    return;
  }
  if (page.readonly)
    throw new DomainError('forbidden', 'ReadOnly', 'this report was opened read-only and cannot be changed');

  const current = response.resource as unknown as QuestionnaireResponse;
  const wasCompleted = current.status === 'completed' || current.status === 'amended';
  const status = action === 'submit' || wasCompleted ? 'completed' : 'in-progress';
  const { resourceType: _t, id: _i, meta: _m, ...content } = response.resource;
  // The engine recomputes enablement and calculated values; on submit its checks may refuse.
  const evaluated = evaluateEditorForm(report.form, body, {
    choices: report.choices,
    valueSets: report.valueSets,
    stored: {
      ...(content as Omit<QuestionnaireResponse, 'resourceType'>),
      resourceType: 'QuestionnaireResponse',
      status,
    },
    status,
    check: status === 'completed',
    budget: evaluationBudget(ctx),
    now: page.command.now,
  });
  const summary: SummaryEntry[] = [];
  const nodes = new Map(evaluated.run.context.tree.nodes.map((n) => [n.key, n]));
  for (const [key, messages] of evaluated.errors)
    for (const message of messages) summary.push({ linkId: nodes.get(key)?.def.linkId, key, message });
  for (const problem of evaluated.refusals)
    if (problem.key === undefined)
      summary.push({ linkId: problem.linkId, key: undefined, message: problem.message });
  if (summary.length > 0) {
    const rank = (entry: SummaryEntry) =>
      entry.linkId === undefined
        ? -1
        : (report.form.byLinkId.get(entry.linkId)?.order ?? Number.MAX_SAFE_INTEGER);
    summary.sort((a, b) => rank(a) - rank(b));
    await renderEditor(
      ctx,
      casebook,
      page,
      report,
      { page: evaluated.page, enabled: evaluated.run.enablementByKey(), errors: evaluated.errors, summary },
      422,
    );
    return;
  }
  const next: QuestionnaireResponse = { ...evaluated.run.stored(), authored: page.command.now.toISOString() };

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
    await pageBanner(page, report.patient),
  );
};
