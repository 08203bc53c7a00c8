/** HTML layout of the application host pages (issue 5): one stylesheet, chrome on or off. */

/** Escapes text for HTML element content and attribute values. */
export const escapeHtml = (text: string): string =>
  text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );

export interface LayoutOptions {
  readonly title: string;
  /** `embedded` hides navigation and top bar (docs/interface.md §2.1 deployment_mode); `standalone` shows them. */
  readonly chrome: 'embedded' | 'standalone';
  /** Already-escaped HTML of the page body. */
  readonly body: string;
  /**
   * Already-escaped HTML of the patient banner (src/http/app/context.ts patientBanner): shown in
   * both modes, sticky, below the chrome.
   */
  readonly banner?: string;
  /** Extra class names of `<body>` (the editor's `has-sections` widens the page for its section list). */
  readonly bodyClass?: string;
  /** URLs of the page's scripts (the bundles of src/http/app/assets.ts): no inline script runs. */
  readonly scripts?: readonly string[];
}

/**
 * The Content-Security-Policy of every layout page (issue 32): scripts (and the editor's Web
 * Worker) only from casebook's own origin, so no inline or injected script can run; the one
 * stylesheet is inline. `form-action` is left open on purpose: the report form's answer is a 303
 * to the EHR's post-submit/cancel address, and browsers apply `form-action` to that redirect.
 */
export const PAGE_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; base-uri 'none'";

const STYLE = `
:root { --ink:#1d2733; --muted:#5b6b7c; --line:#d5dde6; --bg:#f4f6f9; --card:#fff; --accent:#0b5fa5; --accent-dark:#084a82; --accent-ink:#fff; --error:#b3261e; --error-bg:#fdecea; --ok:#1e7b3c; --ok-bg:#e7f4ec; --focus:#f2a900; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--ink); background:var(--bg); }
a { color: var(--accent); }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
.skip { position:absolute; left:-9999px; top:0; background:#fff; padding:.5rem 1rem; z-index:10; }
.skip:focus { left:.5rem; top:.5rem; }
.visually-hidden { position:absolute !important; width:1px; height:1px; overflow:hidden; clip:rect(0 0 0 0); white-space:nowrap; }
header.topbar { display:flex; align-items:center; justify-content:space-between; gap:1rem; padding:.55rem 1.2rem; background:#12324f; color:#fff; }
header.topbar .brand { font-weight:650; letter-spacing:.03em; display:flex; align-items:center; gap:.45rem; }
header.topbar .brand::before { content:""; width:.8rem; height:.8rem; border-radius:2px; background:#4fb0e8; display:inline-block; }
header.topbar .context { font-size:.92rem; display:flex; gap:.5rem; align-items:center; flex-wrap:wrap; }
header.topbar .patient-name { font-weight:600; }
header.topbar .sep { opacity:.6; }
main { max-width: 920px; margin: 1.2rem auto 2rem; padding: 0 1rem; }
body.embedded main { margin-top: .8rem; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:1.2rem 1.4rem; margin-bottom:1rem; box-shadow: 0 1px 2px rgba(18,50,79,.05); }
h1 { font-size:1.35rem; margin:.2rem 0 .4rem; }
h2 { font-size:1.1rem; margin:1.2rem 0 .6rem; }
.error h1 { color: var(--error); }
.detail { font-size:1.05rem; }
.hint, .meta { color: var(--muted); }
.meta { margin:0; font-size:.9rem; }
.report-head { display:flex; justify-content:space-between; align-items:flex-start; gap:1rem; margin-bottom:.8rem; }
.badge { display:inline-block; padding:.2rem .6rem; border-radius:999px; font-size:.8rem; font-weight:600; background:#e8eef5; color:#12324f; white-space:nowrap; }
.badge.status-completed { background:var(--ok-bg); color:var(--ok); }
.badge.readonly { background:#fff4d6; color:#6b4e00; }
.readonly-note { background:#fff4d6; border:1px solid #f0d78c; padding:.5rem .8rem; border-radius:6px; }
.notice { background:var(--ok-bg); border:1px solid #b6dcc3; color:var(--ok); padding:.6rem .9rem; border-radius:6px; margin-bottom:1rem; font-weight:500; }
.error-summary { border:2px solid var(--error); background:var(--error-bg); border-radius:8px; padding:.8rem 1.1rem; margin-bottom:1rem; }
.error-summary h2 { margin:.1rem 0 .4rem; color:var(--error); font-size:1.05rem; }
.error-summary ul { margin:0; padding-left:1.2rem; }
.error-summary li { margin:.15rem 0; }
.error-summary a { color:var(--error); font-weight:500; display:inline-block; min-height:24px; line-height:24px; }
.item { margin: 0 0 1.05rem; }
/* The hidden attribute wins over any display rule (an empty error badge must not take a line). */
[hidden] { display:none !important; }
.q-label { display:block; font-weight:600; margin-bottom:.3rem; padding:0; }
.req { color:var(--error); font-weight:700; }
fieldset { border:0; margin:0; padding:0; min-width:0; }
fieldset.group { border:1px solid var(--line); border-radius:8px; padding:.8rem 1.1rem .2rem; margin:0 0 1.1rem; }
fieldset.group > legend { font-weight:700; font-size:1.02rem; padding:0 .4rem; color:#12324f; }
fieldset.group fieldset.group { background:#fafbfd; }
.group-repeat .instances fieldset.group { margin-bottom:.6rem; }
.children { margin: .6rem 0 0 1.1rem; padding-left:.8rem; border-left:3px solid #e8eef5; }
p.display { margin:.2rem 0; color:var(--muted); }
input[type=text], input[type=number], input[type=date], input[type=datetime-local], input[type=time], input[type=url], textarea, select {
  font: inherit; color:inherit; width:100%; max-width:34rem; padding:.45rem .6rem; border:1px solid #9fb0c2; border-radius:6px; background:#fff; }
input[type=number], input[type=date], input[type=time], input[type=datetime-local] { max-width:16rem; }
input[inputmode=numeric], input[inputmode=decimal] { max-width:12rem; }
.with-unit { display:flex; align-items:center; gap:.5rem; }
.unit { font-weight:600; white-space:nowrap; }
select.unit-select { width:auto; }
.calculated .q-label { display:block; }
output.calculated-value { display:inline-block; min-width:5rem; padding:.35rem .6rem; font-weight:600; background:#f6f8fa; border:1px solid #e3e8ee; border-radius:6px; }
textarea { max-width:100%; resize:vertical; }
input[aria-invalid=true], textarea[aria-invalid=true], select[aria-invalid=true], fieldset[aria-invalid=true] .options { border-color:var(--error); box-shadow: 0 0 0 1px var(--error); }
.options { display:flex; flex-direction:column; gap:.25rem; border-radius:6px; }
.options.inline { flex-direction:row; flex-wrap:wrap; gap:.4rem 1.4rem; }
label.option { display:flex; align-items:center; gap:.45rem; cursor:pointer; padding:.15rem 0; }
label.option input { width:1.5rem; height:1.5rem; margin:0; accent-color: var(--accent); flex:none; }
label.other { display:flex; align-items:center; gap:.5rem; margin-top:.35rem; }
.repeats { display:flex; flex-direction:column; gap:.4rem; }
.field-error { color:var(--error); font-weight:600; margin:.1rem 0 .35rem; font-size:.92rem; }
.field-error::before { content:"⚠ "; }
.answer-readonly { padding:.35rem .6rem; background:#f6f8fa; border:1px solid #e3e8ee; border-radius:6px; white-space:pre-wrap; max-width:34rem; }
.answer-readonly + .answer-readonly { margin-top:.3rem; }
.answer-readonly.empty { color:var(--muted); }
button { font: inherit; border-radius:6px; padding:.55rem 1.1rem; border:1px solid transparent; cursor:pointer; font-weight:600; }
button.primary { background:var(--accent); color:var(--accent-ink); }
button.primary:hover { background:var(--accent-dark); }
button.secondary { background:#fff; color:var(--accent); border-color:#9fb0c2; }
button.secondary:hover { background:#eef4fa; }
button.add-answer, button.add-group { margin-top:.45rem; padding:.3rem .8rem; font-size:.9rem; }
.actions { position:sticky; bottom:0; display:flex; gap:.6rem; align-items:center; padding:.8rem 1rem; background:var(--bg); border-top:1px solid var(--line); margin:0 -1rem; }
.actions .spacer { flex:1; }
ul.form-list { list-style:none; margin:1rem 0 0; padding:0; display:grid; gap:.6rem; }
button.form-choice { width:100%; text-align:left; display:flex; flex-direction:column; gap:.15rem; background:#fff; border:1px solid var(--line); padding:.8rem 1rem; color:var(--ink); }
button.form-choice:hover { border-color:var(--accent); background:#f3f8fd; }
.form-title { font-weight:650; color:var(--accent); font-size:1.02rem; }
.form-version, .form-description { color:var(--muted); font-weight:400; font-size:.9rem; }
.empty-state { color:var(--muted); padding:1rem 0; }
.outcome h1 { color:#12324f; }
html { scroll-padding-top: 4.5rem; scroll-padding-bottom: 6rem; }
.patient-banner { position:sticky; top:0; z-index:5; display:flex; flex-wrap:wrap; align-items:baseline; gap:.2rem 1.1rem; padding:.5rem 1.2rem; background:#fff; border-bottom:2px solid #12324f; box-shadow:0 1px 3px rgba(18,50,79,.12); font-size:.92rem; }
.patient-banner .patient-name { font-weight:700; font-size:1rem; }
.patient-banner .banner-label { color:var(--muted); font-size:.8rem; text-transform:uppercase; letter-spacing:.03em; }
.patient-banner .report-status { margin-left:auto; }
body.embedded .patient-banner { padding:.3rem .8rem; gap:.1rem .8rem; font-size:.85rem; }
body.embedded .patient-banner .patient-name { font-size:.92rem; }
@media (max-width: 600px) { .patient-banner .report-status { margin-left:0; } html { scroll-padding-top: 6rem; } .actions { flex-wrap:wrap; gap:.4rem; padding:.5rem .8rem; } .actions .save-status { order:-1; flex-basis:100%; min-width:0; } .actions button { padding:.45rem .65rem; } }
.save-status { margin:0; font-size:.9rem; color:var(--muted); min-width:6rem; }
.save-status[data-state=failed] { color:var(--error); font-weight:600; }
.save-problem { background:var(--error-bg); border:1px solid var(--error); color:var(--error); padding:.5rem .8rem; border-radius:6px; margin:0 0 .8rem; font-weight:500; }
.actions { flex-wrap:wrap; }
.actions .save-problem { flex-basis:100%; margin:0; padding:.4rem .7rem; font-size:.9rem; }
.draft-offer { background:#fff4d6; border:1px solid #f0d78c; border-radius:8px; padding:.7rem 1rem; margin-bottom:1rem; }
.draft-offer h2 { margin:.1rem 0 .3rem; font-size:1rem; }
.draft-offer p { margin:0 0 .5rem; }
.draft-offer .buttons, dialog .buttons { display:flex; gap:.6rem; flex-wrap:wrap; }
dialog { border:1px solid var(--line); border-radius:8px; padding:1.1rem 1.3rem; max-width:28rem; color:var(--ink); }
dialog::backdrop { background:rgba(18,50,79,.35); }
dialog h2 { margin-top:0; }
button.danger { background:var(--error); color:#fff; }
.help { color:var(--muted); margin:.1rem 0 .35rem; font-size:.92rem; }
fieldset.instance > .remove-row, .repeat-row > .remove-row { margin-top:.2rem; padding:.25rem .7rem; font-size:.88rem; }
.repeat-row { display:flex; gap:.5rem; align-items:center; flex-wrap:wrap; }
.repeat-row > .remove-row { margin-top:0; }
nav.sections { margin-bottom:1rem; }
nav.sections details { background:#fff; border:1px solid var(--line); border-radius:8px; padding:.5rem .8rem; }
nav.sections summary { cursor:pointer; font-weight:650; color:#12324f; min-height:24px; }
nav.sections ol { margin:.4rem 0 0; padding-left:1.3rem; }
nav.sections li { margin:.15rem 0; }
nav.sections a { display:inline; line-height:24px; }
nav.sections li { min-height:24px; }
.section-errors { display:inline-block; margin-left:.4rem; padding:0 .45rem; border-radius:999px; background:var(--error-bg); color:var(--error); font-size:.8rem; font-weight:700; line-height:1.5; }
.sections-total { color:var(--error); font-weight:600; margin-left:.3rem; }
@media (min-width: 1100px) {
  body.has-sections main { max-width:1220px; }
  .editor-layout { display:grid; grid-template-columns: 15rem minmax(0, 1fr); gap:1.2rem; align-items:start; }
  nav.sections { position:sticky; top:3.5rem; max-height:calc(100vh - 4.5rem); overflow:auto; }
}
@media print { .patient-banner { position:static; } .actions, nav.sections { display:none; } }
.badge.status-amended { background:#e5f0fb; color:#0b4f8a; }
.badge.status-entered-in-error, .badge.status-amending { background:var(--error-bg); color:var(--error); }
.status-line { background:#fff; border:1px solid var(--line); border-left:4px solid var(--ok); border-radius:6px; padding:.5rem .9rem; margin-bottom:1rem; }
.status-line p { margin:.15rem 0; }
.status-line.status-amended { border-left-color:var(--accent); }
.status-line.status-entered-in-error { border-left-color:var(--error); }
.report.struck .answer-readonly, .report.struck .q-label, .report.struck legend { text-decoration:line-through; color:var(--muted); }
.view-tools { display:flex; gap:1rem; align-items:center; margin-bottom:1rem; flex-wrap:wrap; }
.change-forms { display:grid; grid-template-columns:repeat(auto-fit, minmax(16rem, 1fr)); gap:1rem; }
.change-form h2 { margin-top:0; }
.change-form input[type=text] { margin-bottom:.6rem; }
.conflict { border:2px solid #b26a00; background:#fff8ec; }
.conflict h2 { margin-top:0; color:#6b4000; }
table.changes { border-collapse:collapse; width:100%; margin:.6rem 0; font-size:.95rem; background:#fff; }
table.changes caption { text-align:left; font-weight:600; padding:.2rem 0; }
table.changes th, table.changes td { border:1px solid var(--line); padding:.35rem .5rem; text-align:left; vertical-align:top; }
table.changes .empty { color:var(--muted); }
@media (max-width: 600px) { .conflict.card { padding:1rem .7rem; } table.changes { table-layout:fixed; font-size:.8rem; } table.changes th, table.changes td { padding:.25rem; overflow-wrap:break-word; } }
.merged h2 { margin-top:0; font-size:1.05rem; }
.merged h3 { font-size:.98rem; margin:.6rem 0 .2rem; }
@media print {
  header.topbar { background:none; color:#000; border-bottom:1px solid #000; }
  header.topbar .brand::before { display:none; }
  body { background:#fff; font-size:11pt; }
  main { max-width:none; margin:0; }
  .no-print, .skip, .actions, .change-forms, .view-tools { display:none !important; }
  .card, .status-line { box-shadow:none; border-color:#999; break-inside:avoid; }
  .answer-readonly { background:none; border:0; padding:0 0 0 .6rem; }
  a { color:#000; text-decoration:none; }
}
`;

/** A whole HTML document. */
export const layout = (o: LayoutOptions): string => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="${PAGE_CSP}"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(o.title)} · casebook</title><style>${STYLE}</style></head>
<body class="${o.chrome}${o.bodyClass ? ` ${escapeHtml(o.bodyClass)}` : ''}"><a class="skip" href="#main">Skip to content</a>${
  o.chrome === 'standalone'
    ? '<header class="topbar" role="banner"><span class="brand">casebook</span></header>'
    : ''
}${o.banner ?? ''}
${o.body}${(o.scripts ?? []).map((src) => `<script src="${escapeHtml(src)}" defer></script>`).join('')}</body></html>`;
