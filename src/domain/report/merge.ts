/**
 * Three-way merge of a report's answers (issue 32; docs/architecture.md "Reports"): the version a
 * user's page was based on (`base`), the user's own answers (`mine`) and the newer version stored
 * meanwhile (`theirs`). An item only the user changed takes the user's answers; an item only the
 * other writer changed keeps theirs; an item both changed differently collides and keeps theirs
 * (the user decides); the same change on both sides is no change to report. Items are matched by linkId and occurrence (the n-th instance of a repeating
 * group matches the n-th); answers are compared by value, their nested items merged the same way.
 */
import { canonical } from '../fhir/resource.js';

/** A QuestionnaireResponse item as far as the merge reads it (FHIR JSON). */
export interface MergeItem {
  readonly linkId: string;
  readonly text?: string;
  readonly answer?: readonly MergeAnswer[];
  readonly item?: readonly MergeItem[];
  readonly [element: string]: unknown;
}
export interface MergeAnswer {
  readonly item?: readonly MergeItem[];
  readonly [element: string]: unknown;
}

/** One item the merge looked at: its path (`group#1/size#1`) and the answers on each side. */
export interface MergeChange {
  readonly path: string;
  readonly linkId: string;
  readonly base: readonly MergeAnswer[];
  readonly mine: readonly MergeAnswer[];
  readonly theirs: readonly MergeAnswer[];
  /** applied: the user's change was taken; collision: both changed it (theirs kept); theirs: only the other writer changed it. */
  readonly outcome: 'applied' | 'collision' | 'theirs';
}

export interface MergeResult {
  readonly items: MergeItem[];
  /** Every item changed on either side, in document order. */
  readonly changes: MergeChange[];
}

/** The answers' values, nested items left out: what "changed" compares. */
const valuesOf = (item: MergeItem | undefined): readonly MergeAnswer[] =>
  (item?.answer ?? []).map(({ item: _nested, ...value }) => value);

const same = (a: readonly MergeAnswer[], b: readonly MergeAnswer[]): boolean => canonical(a) === canonical(b);

/** Items keyed `linkId#n` (n-th occurrence), in first-seen order. */
const keyed = (items: readonly MergeItem[] | undefined): Map<string, MergeItem> => {
  const out = new Map<string, MergeItem>();
  const seen = new Map<string, number>();
  for (const item of items ?? []) {
    if (typeof item?.linkId !== 'string') continue;
    const n = (seen.get(item.linkId) ?? 0) + 1;
    seen.set(item.linkId, n);
    out.set(`${item.linkId}#${n}`, item);
  }
  return out;
};

const mergeList = (
  base: readonly MergeItem[] | undefined,
  mine: readonly MergeItem[] | undefined,
  theirs: readonly MergeItem[] | undefined,
  prefix: string,
  changes: MergeChange[],
): MergeItem[] => {
  const b = keyed(base);
  const m = keyed(mine);
  const t = keyed(theirs);
  const keys = [...new Set([...t.keys(), ...m.keys()])];
  const out: MergeItem[] = [];
  for (const key of keys) {
    const merged = mergeItem(b.get(key), m.get(key), t.get(key), `${prefix}${key}`, changes);
    if (merged) out.push(merged);
  }
  return out;
};

const mergeItem = (
  b: MergeItem | undefined,
  m: MergeItem | undefined,
  t: MergeItem | undefined,
  path: string,
  changes: MergeChange[],
): MergeItem | undefined => {
  const shape = t ?? m ?? b;
  if (!shape) return undefined;
  const [base, mine, theirs] = [valuesOf(b), valuesOf(m), valuesOf(t)];
  let chosen: readonly MergeAnswer[] = theirs;
  let source: MergeItem | undefined = t;
  if (!same(mine, base) && !same(mine, theirs)) {
    const outcome = same(theirs, base) ? 'applied' : 'collision';
    if (outcome === 'applied') {
      chosen = mine;
      source = m;
    }
    changes.push({ path, linkId: shape.linkId, base, mine, theirs, outcome });
  } else if (!same(theirs, base) && !same(mine, theirs))
    changes.push({ path, linkId: shape.linkId, base, mine, theirs, outcome: 'theirs' });
  // Nested items under the first answer (a question's child questions) and under the item (groups).
  const children = mergeList(b?.item, m?.item, t?.item, `${path}/`, changes);
  const answerChildren = mergeList(
    b?.answer?.[0]?.item,
    m?.answer?.[0]?.item,
    t?.answer?.[0]?.item,
    `${path}/`,
    changes,
  );
  const answers: MergeAnswer[] = chosen.map((a, i) =>
    i === 0 && answerChildren.length > 0 ? { ...a, item: answerChildren } : { ...a },
  );
  const { answer: _a, item: _i, ...rest } = source ?? shape;
  if (answers.length === 0 && children.length === 0) return undefined;
  return {
    ...rest,
    linkId: shape.linkId,
    ...(answers.length > 0 ? { answer: answers } : {}),
    ...(children.length > 0 ? { item: children } : {}),
  };
};

/**
 * Merges the user's answers (`mine`, based on `base`) onto `theirs`.
 * @returns the merged items and every change seen (applied, collision, theirs), in document order.
 */
export const mergeAnswers = (
  base: readonly MergeItem[] | undefined,
  mine: readonly MergeItem[] | undefined,
  theirs: readonly MergeItem[] | undefined,
): MergeResult => {
  const changes: MergeChange[] = [];
  const items = mergeList(base, mine, theirs, '', changes);
  return { items, changes };
};
