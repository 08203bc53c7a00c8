/**
 * QuestionnaireResponse/$generate-narrative (issue 4; docs/interface.md §4.4): the response's human-readable
 * form, once as XHTML for `text.div` and once as plain text — the rendering the report export
 * sends to hospital systems, so it is laid out to read well as a letter, not as a data dump.
 *
 * Pure and deterministic: the same response (and Questionnaire) always give the same strings.
 */
import { answerText as answerDisplay } from './engine/display.js';
import type {
  Coding,
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from './types.js';

/** Both renderings of one response. */
export interface Narrative {
  /** `<div xmlns="http://www.w3.org/1999/xhtml">…</div>`: well-formed XHTML, every text escaped. */
  readonly xhtml: string;
  /** Plain text, lines separated by `\n`, no trailing newline. */
  readonly text: string;
}

/** The rendered outline both forms are written from: only what has an answer survives. */
type Node =
  | { readonly kind: 'group'; readonly label: string; readonly children: readonly Node[] }
  | { readonly kind: 'question'; readonly label: string; readonly answers: readonly RenderedAnswer[] };

interface RenderedAnswer {
  /** The answer as text; may hold `\n` (a multi-line text answer). */
  readonly value: string;
  /** Items nested under this answer. */
  readonly children: readonly Node[];
}

const EMPTY_TEXT = 'No answers recorded.';

/** Options of {@link generateNarrative}. */
export interface NarrativeOptions {
  /**
   * The codings of the items' answerValueSets by canonical, with their displays (issue 35): a coded
   * answer without a display reads as the ValueSet's display for its code.
   */
  readonly valueSetCodings?: ReadonlyMap<string, readonly Coding[]>;
}
const XHTML_NS = 'http://www.w3.org/1999/xhtml';

/**
 * Renders a QuestionnaireResponse as narrative (docs/interface.md §4.4 `$generate-narrative`).
 *
 * Question texts come from the response items, then the Questionnaire's item of the same linkId,
 * then the linkId. Answers as src/sdc/engine/display.ts writes them: booleans as Yes/No; codings by
 * display (then the Questionnaire's answerOption display, then the code); quantities as value and
 * unit, integers and decimals with the item's questionnaire-unit (`7 mm`); dates as given (ISO);
 * attachments by title and url; references by display, then reference. Several answers are joined
 * with `, `. Unanswered questions and groups with nothing answered are left out.
 *
 * Plain text: the Questionnaire's title (when given) and a blank line; for an `amended` or
 * `entered-in-error` response a status line (`AMENDED REPORT: …`, `ENTERED IN ERROR: …`, also the
 * XHTML's first paragraph) and a blank line; top-level groups as
 * UPPERCASE headings set off by blank lines; nested groups as `Heading:` with their items
 * indented two spaces per level; `Question: answer` lines (no colon added after a `?` or `:`);
 * multi-line answers and items nested under an answer indented beneath their question; repeated
 * answers that carry nested items as `- ` bullets. Repeated groups are numbered (`Nodule 1`).
 *
 * A coded answer without a display takes its answerValueSet's display (`options.valueSetCodings`),
 * before the answerOption's and the code.
 *
 * XHTML: `<h1>` title, one `<div>` per group with an `<h2>`…`<h6>` heading, questions as
 * `<dl>` of `<dt>` question / `<dd>` answer, line breaks as `<br/>`; characters XML forbids are
 * dropped and `& < > " '` escaped.
 */
export const generateNarrative = (
  response: QuestionnaireResponse,
  questionnaire?: Questionnaire,
  options: NarrativeOptions = {},
): Narrative => {
  const definitions = new Map<string, QuestionnaireItem>();
  const collect = (items: readonly QuestionnaireItem[] | undefined) => {
    for (const item of asArray<QuestionnaireItem>(items)) {
      if (isObject(item) && typeof item.linkId === 'string' && !definitions.has(item.linkId))
        definitions.set(item.linkId, item);
      if (isObject(item)) collect(item.item);
    }
  };
  collect(questionnaire?.item);
  const nodes = outline(
    asArray<QuestionnaireResponseItem>(response.item),
    definitions,
    options.valueSetCodings ?? new Map(),
  );
  const title = typeof questionnaire?.title === 'string' ? singleLine(questionnaire.title) : '';
  // Object.hasOwn: a status such as `constructor` is no note, never an inherited property.
  const statusCode = String(response.status ?? '');
  const status = Object.hasOwn(STATUS_NOTES, statusCode) ? STATUS_NOTES[statusCode]! : '';
  return { xhtml: toXhtml(title, nodes, status), text: toText(title, nodes, status) };
};

/**
 * The line a changed report's narrative starts with (issue 32): an amended report says so, and an
 * entered-in-error one says it is withdrawn, so a reader of the text alone cannot take either for
 * the original.
 */
const STATUS_NOTES: Record<string, string> = {
  amended: 'AMENDED REPORT: this version replaces the earlier one.',
  'entered-in-error': 'ENTERED IN ERROR: this report is withdrawn and must not be used.',
};

// ---------------------------------------------------------------------------------------------
// Outline

const outline = (
  items: readonly QuestionnaireResponseItem[],
  definitions: ReadonlyMap<string, QuestionnaireItem>,
  valueSets: ReadonlyMap<string, readonly Coding[]>,
): Node[] => {
  const nodes = items.flatMap((item): { linkId: string; node: Node }[] => {
    if (!isObject(item)) return [];
    const linkId = typeof item.linkId === 'string' ? item.linkId : '';
    const definition = definitions.get(linkId);
    const label =
      singleLine(typeof item.text === 'string' ? item.text : '') ||
      singleLine(typeof definition?.text === 'string' ? definition.text : '') ||
      singleLine(linkId) ||
      'Item';
    const answers = asArray<QuestionnaireResponseAnswer>(item.answer).flatMap((answer): RenderedAnswer[] => {
      if (!isObject(answer)) return [];
      const value = answerText(withValueSetDisplay(answer, definition, valueSets), definition);
      const children = outline(asArray<QuestionnaireResponseItem>(answer.item), definitions, valueSets);
      return value || children.length ? [{ value, children }] : [];
    });
    const children = outline(asArray<QuestionnaireResponseItem>(item.item), definitions, valueSets);
    if (answers.length === 0)
      return children.length ? [{ linkId, node: { kind: 'group', label, children } }] : [];
    // A question with child items of its own (not valid FHIR, but seen): keep them under its last answer.
    if (children.length) {
      const last = answers.at(-1)!;
      answers[answers.length - 1] = { value: last.value, children: [...last.children, ...children] };
    }
    return [{ linkId, node: { kind: 'question', label, answers } }];
  });
  // Repeating groups: number the sibling instances so a reader can tell them apart.
  const groupCounts = new Map<string, number>();
  for (const { linkId, node } of nodes)
    if (node.kind === 'group') groupCounts.set(linkId, (groupCounts.get(linkId) ?? 0) + 1);
  const seen = new Map<string, number>();
  return nodes.map(({ linkId, node }) => {
    if (node.kind !== 'group' || (groupCounts.get(linkId) ?? 0) < 2) return node;
    const n = (seen.get(linkId) ?? 0) + 1;
    seen.set(linkId, n);
    return { ...node, label: `${node.label} ${n}` };
  });
};

/** A coded answer without a display, given the display its item's answerValueSet has for the code. */
const withValueSetDisplay = (
  answer: QuestionnaireResponseAnswer,
  definition: QuestionnaireItem | undefined,
  valueSets: ReadonlyMap<string, readonly Coding[]>,
): QuestionnaireResponseAnswer => {
  const coding = answer.valueCoding;
  if (!isObject(coding) || (typeof coding.display === 'string' && coding.display.trim())) return answer;
  const canonical = definition?.answerValueSet;
  if (typeof canonical !== 'string') return answer;
  const found = valueSets
    .get(canonical)
    ?.find(
      (c) =>
        c.code === coding.code &&
        (coding.system === undefined || c.system === undefined || c.system === coding.system),
    );
  return found?.display ? { ...answer, valueCoding: { ...coding, display: found.display } } : answer;
};

/**
 * The text of one answer (src/sdc/engine/display.ts: the editor's rendering too, units included);
 * '' when it has none we can show. Text answers keep their line breaks; the rest is one line.
 */
const answerText = (
  answer: QuestionnaireResponseAnswer,
  definition: QuestionnaireItem | undefined,
): string => {
  const text = answerDisplay(definition, answer);
  return 'valueString' in answer || 'valueMarkdown' in answer ? multiLine(text) : singleLine(text);
};

// ---------------------------------------------------------------------------------------------
// Plain text

const toText = (title: string, nodes: readonly Node[], status: string): string => {
  const lines: string[] = [];
  if (title) lines.push(title, '');
  if (status) lines.push(status, '');
  if (nodes.length === 0) lines.push(EMPTY_TEXT);
  nodes.forEach((node, i) => {
    // Top-level groups stand apart; a question after a group must not read as part of it.
    const previous = nodes[i - 1];
    if (previous && (node.kind === 'group' || previous.kind === 'group')) lines.push('');
    if (node.kind === 'group') {
      lines.push(node.label.toUpperCase());
      textLines(node.children, 0, lines);
    } else textLines([node], 0, lines);
  });
  return lines.join('\n');
};

const INDENT = '  ';

const textLines = (nodes: readonly Node[], depth: number, lines: string[]): void => {
  const pad = INDENT.repeat(depth);
  for (const node of nodes) {
    if (node.kind === 'group') {
      lines.push(`${pad}${introducing(node.label)}`);
      textLines(node.children, depth + 1, lines);
      continue;
    }
    const { answers } = node;
    const bullets = separately(answers);
    if (!bullets && !answers.some((a) => a.value.includes('\n'))) {
      const value = answers
        .map((a) => a.value)
        .filter(Boolean)
        .join(', ');
      lines.push(value ? `${pad}${labelled(node.label, value)}` : `${pad}${introducing(node.label)}`);
      for (const answer of answers) textLines(answer.children, depth + 1, lines);
      continue;
    }
    lines.push(`${pad}${introducing(node.label)}`);
    const inner = pad + INDENT;
    for (const answer of answers) {
      const valueLines = answer.value ? answer.value.split('\n') : [];
      valueLines.forEach((line, i) => {
        const prefix = bullets ? (i === 0 ? '- ' : INDENT) : '';
        lines.push(line ? `${inner}${prefix}${line}` : '');
      });
      textLines(answer.children, depth + (bullets ? 2 : 1), lines);
    }
  }
};

/** Several answers that can't share one line (nested items or line breaks): one entry each. */
const separately = (answers: readonly RenderedAnswer[]): boolean =>
  answers.length > 1 && answers.some((a) => a.children.length > 0 || a.value.includes('\n'));

/** `Question: answer`, without a second punctuation mark after `?` or `:`. */
const labelled = (label: string, value: string): string =>
  /[?:]$/.test(label) ? `${label} ${value}` : `${label}: ${value}`;

/** A label that introduces the indented lines below it. */
const introducing = (label: string): string => (/[?:]$/.test(label) ? label : `${label}:`);

// ---------------------------------------------------------------------------------------------
// XHTML

const toXhtml = (title: string, nodes: readonly Node[], status: string): string => {
  const body = nodes.length === 0 ? `<p>${escapeXml(EMPTY_TEXT)}</p>` : xhtmlBlocks(nodes, 2);
  const note = status ? `<p><strong>${escapeXml(status)}</strong></p>` : '';
  return `<div xmlns="${XHTML_NS}">${title ? `<h1>${escapeXml(title)}</h1>` : ''}${note}${body}</div>`;
};

/** Groups as `<div>` sections with a heading; runs of questions as one `<dl>`. */
const xhtmlBlocks = (nodes: readonly Node[], level: number): string => {
  let html = '';
  let list = '';
  const flush = () => {
    if (list) html += `<dl>${list}</dl>`;
    list = '';
  };
  const heading = `h${Math.min(level, 6)}`;
  for (const node of nodes) {
    if (node.kind === 'group') {
      flush();
      html += `<div><${heading}>${escapeXml(node.label)}</${heading}>${xhtmlBlocks(node.children, level + 1)}</div>`;
      continue;
    }
    list += `<dt>${escapeXml(node.label)}</dt>`;
    if (separately(node.answers)) {
      for (const answer of node.answers)
        list += `<dd>${xhtmlValue(answer.value)}${xhtmlBlocks(answer.children, level)}</dd>`;
    } else {
      const value = node.answers
        .map((a) => xhtmlValue(a.value))
        .filter(Boolean)
        .join(', ');
      const children = node.answers.map((a) => xhtmlBlocks(a.children, level)).join('');
      list += `<dd>${value}${children}</dd>`;
    }
  }
  flush();
  return html;
};

const xhtmlValue = (value: string): string => value.split('\n').map(escapeXml).join('<br/>');

// ---------------------------------------------------------------------------------------------
// Text hygiene

/** Characters XML 1.0 does not allow (C0 controls but tab/LF/CR, lone surrogates, U+FFFE/F). */
const NOT_XML =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching them is the point.
  /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** Escapes text for XHTML content or attributes, dropping characters XML forbids. */
export const escapeXml = (text: string): string =>
  text.replace(NOT_XML, '').replace(/[&<>"']/g, (c) => ESCAPES[c]!);

/** One line: whitespace runs (newlines included) collapsed, forbidden characters dropped. */
const singleLine = (text: string): string => text.replace(NOT_XML, '').replace(/\s+/g, ' ').trim();

/**
 * A text answer keeping its line breaks: CRLF/CR normalised, trailing spaces and the blank lines
 * around it dropped, runs of blank lines collapsed to one.
 */
const multiLine = (text: string): string =>
  text
    .replace(NOT_XML, '')
    .replace(/\r\n?/g, '\n')
    .split('\n')
    .map((line) => line.replace(/\s+$/, '').replace(/\t/g, '    '))
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .replace(/^\n+|\n+$/g, '');

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const asArray = <T>(value: unknown): T[] => (Array.isArray(value) ? (value as T[]) : []);
