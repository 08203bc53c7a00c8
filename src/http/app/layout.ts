/** HTML layout of the application host pages (issue 5): one stylesheet, chrome on or off. */

/** Escapes text for HTML element content and attribute values. */
export const escapeHtml = (text: string): string =>
  text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );

export interface LayoutOptions {
  readonly title: string;
  /** `embedded` hides navigation and top bar (spec §2.1 deployment_mode); `standalone` shows them. */
  readonly chrome: 'embedded' | 'standalone';
  /** Already-escaped HTML of the page body. */
  readonly body: string;
  /** Already-escaped HTML for the top bar's right side (user, patient). */
  readonly topBar?: string;
  readonly script?: string;
}

const STYLE = `
:root { --ink:#1d2733; --muted:#5b6b7c; --line:#d5dde6; --bg:#f4f6f9; --card:#fff; --accent:#0b5fa5; --accent-ink:#fff; --error:#b3261e; --ok:#1e7b3c; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--ink); background:var(--bg); }
header.topbar { display:flex; align-items:center; justify-content:space-between; padding:.6rem 1.2rem; background:#12324f; color:#fff; }
header.topbar .brand { font-weight:600; letter-spacing:.02em; }
header.topbar .context { font-size:.9rem; opacity:.9; }
nav.crumbs { padding:.4rem 1.2rem; background:#e8eef5; border-bottom:1px solid var(--line); font-size:.9rem; }
main { max-width: 880px; margin: 1.2rem auto; padding: 0 1rem; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:1.2rem 1.4rem; margin-bottom:1rem; }
h1 { font-size:1.35rem; margin:.2rem 0 1rem; }
h2 { font-size:1.1rem; margin:1.2rem 0 .6rem; }
.error h1 { color: var(--error); }
.detail { font-size:1.05rem; }
.hint { color: var(--muted); }
`;

/** A whole HTML document. */
export const layout = (o: LayoutOptions): string => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(o.title)} · casebook</title><style>${STYLE}</style></head>
<body class="${o.chrome}">${
  o.chrome === 'standalone'
    ? `<header class="topbar" role="banner"><span class="brand">casebook</span><span class="context">${o.topBar ?? ''}</span></header>`
    : ''
}
${o.body}${o.script ? `<script>${o.script}</script>` : ''}</body></html>`;
