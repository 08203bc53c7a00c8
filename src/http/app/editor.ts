/**
 * The report editor `{app_url}/tasks/:id/report` (issue 5; docs/interface.md §1.3, §2.1, §3.2): the Task's
 * QuestionnaireResponse as a form; save, submit (validated, then post_submit_redirect) or cancel
 * (post_cancel_redirect). Writes go through the data server's handlers, with the session as actor.
 */
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { execute } from '../../commands/handler.js';
import { type ReportWrite, writeReport } from '../../commands/reports.js';
import { checkRedirect, readTenant } from '../../commands/sessions.js';
import { DomainError } from '../../domain/decider.js';
import { type MergeItem, mergeAnswers } from '../../domain/report/merge.js';
import { isFinalStatus, ReportChangedElsewhere } from '../../domain/report/report.js';
import { DEFINITIONS } from '../../fhir/definitions.js';
import { vread } from '../../queries/fhir.js';
import { type ResourceRow, readIfVisible } from '../../queries/visibility.js';
import { computeAnswers, usesAnswerExpressions, withComputedOptions } from '../../sdc/answer-expression.js';
import { EXT_ANSWER_EXPRESSION } from '../../sdc/engine/extensions.js';
import { defineForm, type FormDefinition, runForm } from '../../sdc/engine/index.js';
import { membersOf, resolveAnswerValueSets, type ValueSetMembers } from '../../sdc/engine/valuesets.js';
import { expandValueSet } from '../../sdc/expand.js';
import type { Json, Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { auditedWith, auditInline } from '../audit.js';
import { globalRedirectOrigins } from '../auth/sessions.js';
import { evaluationBudget } from '../edge/budget.js';
import { assembledForUse } from '../sdc/assemble.js';
import { queryRun } from '../sdc/query.js';
import { formResolver, tenantResolver } from '../sdc/resolve.js';
import { editorAssets, reportViewAssets } from './assets-route.js';
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
import { conflictPanel, mergedNotice, reportStatusLine } from './report-view.js';

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

/** 303 See Other to `url`, never cached (Koa's redirect sets 302 unless a 3xx is already set). */
const seeOther = (ctx: Context, url: string): void => {
  ctx.status = 303;
  ctx.set('Cache-Control', 'no-store');
  ctx.redirect(url);
};

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
  ctx: Context,
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
  // SDC modular forms (issue 35): a form that needs assembling is assembled first.
  const assembled = await assembledForUse(questionnaire as unknown as Questionnaire, resolve);
  // answerExpression (issue 35): the permitted answers are computed on the server when the page
  // renders (docs/interface.md §3.3), under the session's scopes, and shown as the item's choices.
  const q = usesAnswerExpressions(assembled)
    ? withComputedOptions(
        assembled,
        (
          await computeAnswers(assembled, EXT_ANSWER_EXPRESSION, {
            response: response.resource as Json,
            environment: patient ? { patient: patient.resource } : {},
            queries: queryRun(ctx, page.command.sql, page.principal, casebook.config),
            budget: evaluationBudget(ctx),
            now: page.command.now,
          })
        ).options,
      )
    : assembled;
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
  completed: 'Final',
  amended: 'Amended',
  'entered-in-error': 'Entered in error',
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
  /** The version the page's answers are based on (`base_version`); the stored one when absent. */
  readonly baseVersion?: number;
  /** HTML above the form: the conflict panel (src/http/app/report-view.ts) or a merge notice. */
  readonly banner?: string;
  /** The page edits an amendment of a signed-off report, for this reason (issue 32). */
  readonly amendReason?: string;
  /**
   * The page's answers are the user's and are not stored (a refused submit, a conflict, a merge):
   * the browser counts them as unsaved — "Not saved yet", kept as a draft, asked about on leaving
   * (issue 32 "Work is never lost").
   */
  readonly unsaved?: boolean;
  /** Read-only view: show unanswered items too. */
  readonly showEmpty?: boolean;
  /** A message for the read-only view's amend / entered-in-error form that was sent (a missing reason). */
  readonly reasonError?: { readonly action: string; readonly message: string };
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
  // issue 32: a signed-off (or entered-in-error) report opens read-only, whatever the launch says;
  // an amendment in progress is the editable copy.
  const readonly = view.amendReason === undefined && (page.readonly || isFinalStatus(qrStatus));
  const items = renderItems(questionnaire.item, view.page.item, {
    readonly,
    choices,
    errors: view.errors ?? new Map(),
    enabled: view.enabled,
    ...(readonly && !view.showEmpty ? { hideEmpty: true } : {}),
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
  const badge =
    view.amendReason !== undefined
      ? '<span class="badge status-amending">Amending</span>'
      : readonly && !isFinalStatus(qrStatus)
        ? '<span class="badge readonly">Read-only</span>'
        : `<span class="badge status-${escapeHtml(qrStatus)}">${escapeHtml(STATUS_LABELS[qrStatus] ?? qrStatus)}</span>`;
  const head = `<div class="report-head"><div><h1>${escapeHtml(title)}</h1><p class="meta">${
    typeof questionnaire.version === 'string' ? `Form version ${escapeHtml(questionnaire.version)} · ` : ''
  }Task ${task.id}</p></div>${badge}</div>`;
  const action = withQuery(`${appBase(casebook)}/tasks/${task.id}/report`, page.carry);
  const baseVersion = view.baseVersion ?? response.versionId;
  if (readonly) {
    const statusLine = await reportStatusLine(page, report.response, STATUS_LABELS[qrStatus] ?? qrStatus);
    const note = isFinalStatus(qrStatus)
      ? ''
      : '<p class="readonly-note" role="note">This report is open read-only: answers cannot be changed here.</p>';
    const body = `<main id="main">${notice}${head}${statusLine}${note}${readonlyActions(page, report, view, action, baseVersion)}
<div class="card report readonly${qrStatus === 'entered-in-error' ? ' struck' : ''}">${items || '<p class="hint">This form has no questions.</p>'}</div></main>`;
    const viewAssets = await reportViewAssets(casebook);
    sendHtml(
      ctx,
      status,
      layout({
        title,
        chrome: page.chrome,
        banner: await pageBanner(page, patient, { status: qrStatus, version: String(response.versionId) }),
        body,
        ...(viewAssets ? { scripts: viewAssets } : {}),
      }),
    );
    return;
  }
  const assets = await editorAssets(casebook);
  const data: EditorData = {
    questionnaire,
    choices: [...choices],
    valueSets: [...valueSets],
    stored: (response.resource as unknown as QuestionnaireResponse).item,
    ...(assets?.worker ? { worker: assets.worker } : {}),
  };
  const sections = sectionList(questionnaire, view.errors ?? new Map(), nodeLinkIds(view.errors));
  const banner = await pageBanner(page, patient, { status: qrStatus, version: String(response.versionId) });
  const authored = typeof response.resource.authored === 'string' ? response.resource.authored : '';
  const amending = view.amendReason !== undefined;
  const body = `<main id="main">${view.banner ?? ''}${notice}${summary}${head}${
    amending
      ? `<p class="notice" role="note">You are amending the signed-off report (version ${baseVersion}). Reason: ${escapeHtml(view.amendReason ?? '')}. Submitting it makes a new version, marked amended.</p>`
      : ''
  }
<section id="cb-draft" class="draft-offer" aria-labelledby="cb-draft-title" hidden><h2 id="cb-draft-title">Unsaved answers found</h2>
<p data-draft-text>Answers you typed earlier were not saved. They are kept in this browser.</p>
<div class="buttons"><button type="button" class="primary" data-draft-restore>Restore unsaved answers</button><button type="button" class="secondary" data-draft-discard>Discard</button></div></section>
<div class="${sections ? 'editor-layout' : ''}">${sections}<div class="editor-main">
<form id="report-form" method="post" action="${escapeHtml(action)}" data-task="${task.id}"${
    (page.session.postSubmitRedirect ?? taskRedirectInput(task.resource)) ? ' data-return-submit' : ''
  }${page.session.postCancelRedirect ? ' data-return-cancel' : ''} autocomplete="off" novalidate${amending ? ' data-autosave="off"' : ''}${
    view.unsaved ? ' data-unsaved' : ''
  }>
<input type="hidden" name="cb:tz" value="Z">${carriedInputs(page.carry)}
<input type="hidden" name="base_version" value="${baseVersion}">${
    amending ? `<input type="hidden" name="amend_reason" value="${escapeHtml(view.amendReason ?? '')}">` : ''
  }
<div class="card report">${items || '<p class="hint">This form has no questions.</p>'}</div>
<p id="cb-live" class="visually-hidden" role="status" aria-live="polite"></p>
<div class="actions" role="group" aria-label="Report actions">
<p id="cb-save-problem" class="save-problem" role="alert" hidden></p>
<button type="submit" name="action" value="cancel" class="secondary" formnovalidate>Cancel</button>
<p id="cb-save-status" class="save-status" role="status"${authored && !amending && !view.unsaved ? ` data-saved-at="${escapeHtml(authored)}"` : ''}></p>
<span class="spacer"></span>${
    amending ? '' : '\n<button type="submit" name="action" value="save" class="secondary">Save draft</button>'
  }
<button type="submit" name="action" value="submit" class="primary">${amending ? 'Submit amendment' : 'Submit report'}</button>
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
 * The read-only view's actions: Print, the unanswered-items switch (a link: works without script)
 * and, on a signed-off report the launch did not open read-only, "Amend report" and "Entered in
 * error", each with its Reason field (issue 32).
 */
const readonlyActions = (
  page: PageContext,
  report: Report,
  view: EditorView,
  action: string,
  baseVersion: number,
): string => {
  const qrStatus = String(report.response.resource.status ?? '');
  const switchUrl = withQuery(
    `${action.split('?')[0]}`,
    page.carry,
    view.showEmpty ? {} : { unanswered: 'show' },
  );
  const tools = `<div class="view-tools no-print"><button type="button" class="secondary" data-print hidden>Print</button>
<a href="${escapeHtml(switchUrl)}">${view.showEmpty ? 'Hide unanswered questions' : 'Show unanswered questions'}</a></div>`;
  if (page.readonly || (qrStatus !== 'completed' && qrStatus !== 'amended')) return tools;
  const form = (value: string, label: string, id: string, hint: string) => {
    const error = view.reasonError?.action === value ? view.reasonError.message : undefined;
    return `<form method="post" action="${escapeHtml(action)}" class="card change-form no-print">
<input type="hidden" name="base_version" value="${baseVersion}">${carriedInputs(page.carry)}
<h2>${escapeHtml(label)}</h2><p class="hint">${escapeHtml(hint)}</p>${
      error ? `<p class="field-error" id="${id}-error">${escapeHtml(error)}</p>` : ''
    }
<label class="q-label" for="${id}">Reason</label>
<input type="text" id="${id}" name="reason" required maxlength="500"${
      error ? ` aria-describedby="${id}-error" aria-invalid="true"` : ''
    }>
<button type="submit" name="action" value="${value}" class="${value === 'amend' ? 'primary' : 'secondary'}">${escapeHtml(label)}</button></form>`;
  };
  return `${tools}<div class="change-forms">${form(
    'amend',
    'Amend report',
    'amend-reason',
    'Opens an editable copy; submitting it makes a new version, marked amended, sent again to the clinical system as a correction.',
  )}${form(
    'entered-in-error',
    'Entered in error',
    'error-reason',
    'For a report on the wrong patient or order: it is withdrawn and shown struck through.',
  )}</div>`;
};

/** The stored response run through the engine (enablement, calculated values) for showing. */
const shownResponse = (report: Report, ctx: Context, page: PageContext, items?: MergeItem[]) => {
  const shown = structuredClone(report.response.resource) as unknown as QuestionnaireResponse;
  if (items) (shown as { item?: unknown }).item = items;
  const run = runForm(report.form, shown, {
    complete: true,
    calculate: true,
    budget: evaluationBudget(ctx),
    now: page.command.now,
  });
  return { page: shown, enabled: run.enablementByKey() };
};

/** The positive integer of `base_version`. @throws {DomainError} 400 when missing or malformed. */
const baseVersionOf = (body: FormBody): number => {
  const raw = valuesOf(body, 'base_version')[0];
  if (raw === undefined || !/^[1-9][0-9]{0,9}$/.test(raw))
    throw new DomainError(
      'invalid',
      'BaseVersionRequired',
      'base_version must name the version of the report the page was opened at',
      'base_version',
    );
  return Number(raw);
};

/** The items of version `version` of the report's response (FHIR vread through the session's rights). */
const itemsAt = async (page: PageContext, report: Report, version: number): Promise<MergeItem[]> => {
  const stored = await vread(
    page.command.sql,
    page.command.store,
    page.principal,
    DEFINITIONS.QuestionnaireResponse,
    report.response.id,
    version,
  );
  return (stored.resource.item ?? []) as MergeItem[];
};

/**
 * GET {app_url}/tasks/:id/report: the stored answers, with enablement and calculated values as the
 * engine gives them now. A signed-off report is the read-only view (issue 32); `?base_version=N`
 * (the `conflictUrl` of a refused JSON save) shows what changed since version N.
 */
export const showReport = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const page = await pageContext(ctx, casebook);
  const report = await loadReport(ctx, page, casebook, ctx.params.id);
  const notice =
    ctx.query.saved !== undefined ? 'Saved. Your answers are stored; you can continue later.' : undefined;
  const raw = typeof ctx.query.base_version === 'string' ? ctx.query.base_version : undefined;
  let banner: string | undefined;
  if (raw !== undefined && /^[1-9][0-9]{0,9}$/.test(raw) && Number(raw) < report.response.versionId) {
    const base = await itemsAt(page, report, Number(raw));
    const theirs = (report.response.resource.item ?? []) as MergeItem[];
    const { changes } = mergeAnswers(base, base, theirs);
    banner = conflictPanel(report.form, report.choices, changes, {
      baseVersion: Number(raw),
      currentVersion: report.response.versionId,
      mine: false,
      mergeable: false,
    });
  }
  await renderEditor(
    ctx,
    casebook,
    page,
    report,
    {
      ...shownResponse(report, ctx, page),
      ...(notice ? { notice } : {}),
      ...(banner ? { banner } : {}),
      showEmpty: ctx.query.unanswered === 'show',
    },
    200,
  );
};

/** Whether the request is the editor's own fetch (autosave): it wants JSON answers (docs/interface.md §1.3). */
const wantsJson = (ctx: Context): boolean =>
  ctx.accepts('text/html', 'application/json') === 'application/json';

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

const ACTIONS = ['save', 'submit', 'cancel', 'amend', 'entered-in-error', 'merge'] as const;
type Action = (typeof ACTIONS)[number];

/**
 * POST {app_url}/tasks/:id/report (docs/interface.md §1.3) with `action`:
 * - `save` / `submit`, with `base_version`: a new version (`in-progress` / `completed`), or with
 *   `amend_reason` the amendment's submit (`amended`). A stale base answers the conflict page
 *   (409: what changed, the user's answers kept, nothing stored); with `Accept: application/json`
 *   a save answers `{version, savedAt}` or 409 `{conflict, currentVersion, conflictUrl}`.
 * - `merge`: the user's non-colliding changes applied onto the current version, shown for review
 *   (nothing stored until Save).
 * - `amend` / `entered-in-error`, with `reason`: the editable copy of a signed-off report, or its
 *   withdrawal.
 * - `cancel`: post_cancel_redirect.
 */
export const postReport = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const page = await pageContext(ctx, casebook);
  const body = (ctx.request.body ?? {}) as FormBody;
  const action = valuesOf(body, 'action')[0] as Action | undefined;
  if (action === undefined || !ACTIONS.includes(action))
    throw new DomainError(
      'invalid',
      'InvalidAction',
      `action must be one of ${ACTIONS.join(', ')}`,
      'action',
    );
  const report = await loadReport(ctx, page, casebook, ctx.params.id);
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
      seeOther(ctx, url);
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
  const baseVersion = baseVersionOf(body);
  const current = response.resource as unknown as QuestionnaireResponse;
  const author = `Practitioner/${page.session.userId}`;

  if (action === 'amend' || action === 'entered-in-error') {
    const reason = (valuesOf(body, 'reason')[0] ?? '').trim();
    if (reason === '' || baseVersion !== response.versionId || !isFinalStatus(current.status)) {
      const notice =
        reason === ''
          ? undefined
          : baseVersion !== response.versionId
            ? `The report changed since you opened it (now version ${response.versionId}); nothing was done. Check this version, then try again.`
            : undefined;
      if (!isFinalStatus(current.status))
        throw new DomainError(
          'conflict',
          'ReportNotSignedOff',
          'only a submitted report is amended or withdrawn',
        );
      await renderEditor(
        ctx,
        casebook,
        page,
        report,
        {
          ...shownResponse(report, ctx, page),
          ...(notice ? { notice } : {}),
          ...(reason === '' ? { reasonError: { action, message: 'Give the reason for this change.' } } : {}),
        },
        reason === '' ? 422 : 409,
      );
      return;
    }
    if (action === 'amend') {
      if (current.status === 'entered-in-error')
        throw new DomainError(
          'conflict',
          'ReportLocked',
          'the report was marked entered in error: it can no longer be changed',
        );
      await renderEditor(
        ctx,
        casebook,
        page,
        report,
        { ...shownResponse(report, ctx, page), amendReason: reason, baseVersion },
        200,
      );
      return;
    }
    const { resourceType: _t, id: _i, meta: _m, ...content } = response.resource;
    await writeAudited(ctx, casebook, page, report, content, baseVersion, {
      type: 'MarkReportEnteredInError',
      reason,
      author,
    });
    seeOther(ctx, withQuery(`${appBase(casebook)}/tasks/${task.id}/report`, page.carry));
    return;
  }

  const amendReason = valuesOf(body, 'amend_reason')[0]?.trim();
  const amending = amendReason !== undefined && amendReason !== '';
  if (amending && action === 'save')
    throw new DomainError(
      'conflict',
      'ReportLocked',
      'an amendment is not saved as a draft: submit it, or cancel it',
    );
  const status = action === 'submit' ? (amending ? 'amended' : 'completed') : 'in-progress';
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
    check: action === 'submit',
    budget: evaluationBudget(ctx),
    now: page.command.now,
  });
  const keep = { baseVersion, ...(amending ? { amendReason } : {}) };

  if (action === 'merge') {
    if (isFinalStatus(current.status)) {
      await renderEditor(
        ctx,
        casebook,
        page,
        report,
        {
          ...shownResponse(report, ctx, page),
          notice:
            'The report was signed off elsewhere meanwhile: your changes cannot be applied to it. Amend it if they are needed.',
        },
        409,
      );
      return;
    }
    const base = await itemsAt(page, report, baseVersion);
    const mine = (evaluated.run.stored().item ?? []) as unknown as MergeItem[];
    const merged = mergeAnswers(base, mine, (current.item ?? []) as unknown as MergeItem[]);
    await renderEditor(
      ctx,
      casebook,
      page,
      report,
      {
        ...shownResponse(report, ctx, page, merged.items),
        banner: mergedNotice(report.form, report.choices, merged.changes, response.versionId),
        unsaved: true,
      },
      200,
    );
    return;
  }

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
      {
        page: evaluated.page,
        enabled: evaluated.run.enablementByKey(),
        errors: evaluated.errors,
        summary,
        unsaved: true,
        ...keep,
      },
      422,
    );
    return;
  }
  const next: QuestionnaireResponse = { ...evaluated.run.stored(), authored: page.command.now.toISOString() };
  const write: ReportWrite = amending
    ? { type: 'AmendReport', reason: amendReason, author }
    : { type: action === 'submit' ? 'SubmitReport' : 'SaveReport', author };

  let saved: { versionId: number; lastUpdated: string };
  try {
    saved = await writeAudited(
      ctx,
      casebook,
      page,
      report,
      next as unknown as Record<string, unknown>,
      baseVersion,
      write,
      action === 'save' && wantsJson(ctx) ? 200 : 303,
    );
  } catch (error) {
    if (error instanceof ReportChangedElsewhere) {
      const conflictUrl = withQuery(`${appBase(casebook)}/tasks/${task.id}/report`, page.carry, {
        base_version: String(baseVersion),
      });
      if (wantsJson(ctx)) {
        ctx.status = 409;
        ctx.set('Cache-Control', 'no-store');
        ctx.body = { conflict: true, currentVersion: String(error.currentVersion), conflictUrl };
        return;
      }
      // Nothing stored: the page keeps the user's answers and says what changed (issue 32).
      const base = await itemsAt(page, report, baseVersion);
      const mine = (evaluated.run.stored().item ?? []) as unknown as MergeItem[];
      const { changes } = mergeAnswers(base, mine, (current.item ?? []) as unknown as MergeItem[]);
      await renderEditor(
        ctx,
        casebook,
        page,
        report,
        {
          page: evaluated.page,
          enabled: evaluated.run.enablementByKey(),
          banner: conflictPanel(report.form, report.choices, changes, {
            baseVersion,
            currentVersion: error.currentVersion,
            mine: true,
            mergeable: !isFinalStatus(current.status),
          }),
          unsaved: true,
          ...keep,
        },
        409,
      );
      return;
    }
    if (error instanceof DomainError && error.code === 'ReportLocked' && !wantsJson(ctx)) {
      await renderEditor(
        ctx,
        casebook,
        page,
        report,
        {
          ...shownResponse(report, ctx, page),
          notice: 'This report is signed off: it was not changed. Use "Amend report" to change it.',
        },
        409,
      );
      return;
    }
    throw error;
  }

  if (action === 'save') {
    if (wantsJson(ctx)) {
      ctx.status = 200;
      ctx.set('Cache-Control', 'no-store');
      ctx.body = { version: String(saved.versionId), savedAt: saved.lastUpdated };
      return;
    }
    seeOther(ctx, withQuery(`${appBase(casebook)}/tasks/${task.id}/report`, page.carry, { saved: '1' }));
    return;
  }
  // docs/interface.md §2.1: the session's post_submit_redirect wins over the Task's input; an
  // amendment sends it again (issue 32).
  const { url, problem } = await redirectTarget(
    page,
    casebook,
    page.session.postSubmitRedirect ?? taskRedirectInput(task.resource),
    'post_submit_redirect',
    { response: `QuestionnaireResponse/${response.id}`, task: `Task/${task.id}` },
  );
  if (url) {
    seeOther(ctx, url);
    return;
  }
  messagePage(
    ctx,
    page,
    amending ? 'Amendment submitted' : 'Report submitted',
    `The ${amending ? 'amendment' : 'report'} was submitted. You can close this window and return to your clinical system.`,
    problem ? `<p class="hint">The return address was not allowed: ${escapeHtml(problem)}</p>` : '',
    await pageBanner(page, report.patient),
  );
};

/**
 * One append of a report version (src/commands/reports.ts writeReport) with the request's
 * AuditEvent in it; an amendment's or entered-in-error's reason is on the AuditEvent's entity
 * (the version written), beside the event's own `reason` and `author`.
 */
const writeAudited = async (
  ctx: Context,
  casebook: Casebook,
  page: PageContext,
  report: Report,
  content: Record<string, unknown>,
  baseVersion: number,
  write: ReportWrite,
  answered = 303,
): Promise<{ versionId: number; lastUpdated: string }> => {
  const { task, response } = report;
  const executed = await execute(
    page.command,
    (uow) => writeReport(uow, page.principal, task.id, response.id, content, baseVersion, write),
    {
      audit: auditInline(casebook, ctx, (result) => ({
        status: answered,
        note: {
          action: 'U',
          interaction: 'update',
          entities: [
            {
              reference: `QuestionnaireResponse/${response.id}`,
              patientId: response.patientId,
              version: result.versionId,
              ...('reason' in write ? { reason: write.reason } : {}),
            },
          ],
        },
      })),
    },
  );
  auditedWith(ctx, executed.audited);
  return { versionId: executed.result.versionId, lastUpdated: executed.result.lastUpdated };
};
