/**
 * QuestionnaireResponse/$validate (issue 4; docs/interface.md §4.4 "Validate against its Questionnaire
 * (required fields, value types, constraints)"), pure apart from resolving answerValueSets.
 *
 * The response's item tree must mirror the Questionnaire's: group children in `item.item`,
 * question children in `item.answer.item`, items in Questionnaire order, repeated instances only
 * of repeating groups. On top of that: `required` where the item is enabled (enableWhen,
 * enableBehavior, SDC enableWhenExpression), `repeats`, answer types and their syntax,
 * answerOption/answerConstraint, answerValueSet, maxLength, the core constraint extensions
 * (minLength, regex, minValue, maxValue, maxDecimalPlaces) and the questionnaire-constraint
 * invariants (FHIRPath, within the evaluation budget of issue 10).
 */
import { isFhirDate, isFhirDateTime, isFhirTime } from '../fhir/dates.js';
import { isFhirDecimal, isFhirInteger } from '../fhir/primitives.js';
import { type EvaluationBudget, runWithinBudget } from './budget.js';
import { evaluateFhirPath } from './fhirpath.js';
import { matchesWhole } from './regex.js';
import type {
  CanonicalResolver,
  Json,
  OperationOutcome,
  OperationOutcomeIssue,
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseItem,
} from './types.js';

export const EXT_MIN_LENGTH = 'http://hl7.org/fhir/StructureDefinition/minLength';
export const EXT_REGEX = 'http://hl7.org/fhir/StructureDefinition/regex';
export const EXT_MIN_VALUE = 'http://hl7.org/fhir/StructureDefinition/minValue';
export const EXT_MAX_VALUE = 'http://hl7.org/fhir/StructureDefinition/maxValue';
export const EXT_MAX_DECIMAL_PLACES = 'http://hl7.org/fhir/StructureDefinition/maxDecimalPlaces';
export const EXT_ENABLE_WHEN_EXPRESSION =
  'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-enableWhenExpression';
/**
 * An invariant of the Questionnaire or of one item (core extension `questionnaire-constraint`, used
 * by the SDC IG): sub-extensions `key`, `requirements`, `severity` (error | warning), `expression`
 * (FHIRPath), `human` and `location`.
 */
export const EXT_QUESTIONNAIRE_CONSTRAINT =
  'http://hl7.org/fhir/StructureDefinition/questionnaire-constraint';

/** The answer `value[x]` of each item type (R5 Questionnaire.item.type). */
export const ANSWER_VALUE_KEYS: Readonly<Record<string, string>> = {
  boolean: 'valueBoolean',
  decimal: 'valueDecimal',
  integer: 'valueInteger',
  date: 'valueDate',
  dateTime: 'valueDateTime',
  time: 'valueTime',
  string: 'valueString',
  text: 'valueString',
  url: 'valueUri',
  coding: 'valueCoding',
  quantity: 'valueQuantity',
  reference: 'valueReference',
  attachment: 'valueAttachment',
};

const RESPONSE_STATUSES = ['in-progress', 'completed', 'amended', 'entered-in-error', 'stopped'];

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const MIME = /^[\w.+-]+\/[\w.+-]+(?:\s*;.*)?$/;

type Problem = Omit<OperationOutcomeIssue, 'severity'> & {
  /** A problem of the Questionnaire or the environment, not of the answers: always a warning. */
  readonly advisory?: boolean;
};

/** Options of {@link validateResponse}. */
export interface ValidateOptions {
  /** Resolves answerValueSet canonicals; without it (or when it finds nothing) membership is only warned about. */
  readonly resolve?: CanonicalResolver;
  /** The request's evaluation budget (src/sdc/budget.ts), shared by every expression and regex. */
  readonly budget?: EvaluationBudget;
}

/** A response item placed in the tree: its Questionnaire item and where it sits. */
interface Node {
  readonly q: QuestionnaireItem;
  readonly r: QuestionnaireResponseItem;
  readonly path: string;
  readonly scope: Scope;
  /** group: the one scope of `item.item`; question: one scope per answer (`answer.item`). */
  readonly scopes: Scope[];
}

/** A list of sibling response items: the response's, a group instance's or an answer's. */
interface Scope {
  readonly parent: Scope | undefined;
  readonly owner: Node | undefined;
  readonly nodes: Node[];
}

interface ValueSetMembers {
  readonly codes: { system: string | undefined; code: string }[];
  /** true when the ValueSet also includes codes it does not list (whole systems, filters, other ValueSets). */
  readonly open: boolean;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

const label = (q: { linkId?: unknown; text?: unknown }): string =>
  typeof q.text === 'string' && q.text
    ? `'${q.text}' (linkId ${JSON.stringify(q.linkId)})`
    : `linkId ${JSON.stringify(q.linkId)}`;

const extensionValue = (q: QuestionnaireItem, url: string): [string, unknown] | undefined => {
  const ext = (Array.isArray(q.extension) ? q.extension : []).find((e) => isObject(e) && e.url === url);
  if (!ext) return undefined;
  const key = Object.keys(ext).find((k) => k.startsWith('value'));
  return key ? [key, ext[key]] : undefined;
};

/** The `value[x]` keys of an answer, enableWhen (`answer[x]`) or answerOption. */
const valueKeys = (element: Record<string, unknown>, prefix: 'value' | 'answer'): string[] =>
  Object.keys(element).filter(
    (k) => k.startsWith(prefix) && k.length > prefix.length && /[A-Z]/.test(k[prefix.length]!),
  );

/** Is `value` valid syntax for the FHIR type behind `key` (valueDate, answerInteger…)? */
const syntaxProblem = (key: string, value: unknown): string | undefined => {
  const type = key.replace(/^(value|answer)/, '');
  switch (type) {
    case 'Boolean':
      return typeof value === 'boolean' ? undefined : 'must be true or false';
    case 'Decimal':
      return isFhirDecimal(value) ? undefined : 'must be a decimal number';
    case 'Integer':
      return isFhirInteger(value) ? undefined : 'must be a 32-bit integer';
    case 'Date':
      return isFhirDate(value)
        ? undefined
        : 'must be a date YYYY, YYYY-MM or YYYY-MM-DD (a real day from year 0001)';
    case 'DateTime':
      return isFhirDateTime(value)
        ? undefined
        : 'must be a dateTime YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDThh:mm:ss with a time zone (a real day from year 0001)';
    case 'Time':
      return isFhirTime(value) ? undefined : 'must be a time hh:mm:ss';
    case 'String':
      return typeof value === 'string' && value.trim() !== '' ? undefined : 'must be a non-empty string';
    case 'Uri':
      return typeof value === 'string' && /^\S+$/.test(value)
        ? undefined
        : 'must be a URI without whitespace';
    case 'Coding':
      if (!isObject(value)) return 'must be a Coding object';
      for (const field of ['system', 'version', 'code', 'display'])
        if (value[field] !== undefined && (typeof value[field] !== 'string' || value[field] === ''))
          return `${field} must be a non-empty string`;
      if (typeof value.system === 'string' && /\s/.test(value.system)) return 'system must be a URI';
      return value.code === undefined && value.display === undefined
        ? 'must have a code or a display'
        : undefined;
    case 'Quantity':
      if (!isObject(value)) return 'must be a Quantity object';
      if (typeof value.value !== 'number' || !Number.isFinite(value.value))
        return 'must have a numeric value';
      for (const field of ['unit', 'system', 'code', 'comparator'])
        if (value[field] !== undefined && typeof value[field] !== 'string')
          return `${field} must be a string`;
      return undefined;
    case 'Reference':
      if (!isObject(value)) return 'must be a Reference object';
      if (value.reference !== undefined && (typeof value.reference !== 'string' || value.reference === ''))
        return 'reference must be a non-empty string';
      return value.reference === undefined && value.identifier === undefined && value.display === undefined
        ? 'must have a reference, an identifier or a display'
        : undefined;
    case 'Attachment':
      if (!isObject(value)) return 'must be an Attachment object';
      if (
        value.contentType !== undefined &&
        (typeof value.contentType !== 'string' || !MIME.test(value.contentType))
      )
        return 'contentType must be a MIME type';
      if (value.data !== undefined && (typeof value.data !== 'string' || !BASE64.test(value.data)))
        return 'data must be base64';
      if (value.url !== undefined && (typeof value.url !== 'string' || !/^\S+$/.test(value.url)))
        return 'url must be a URL';
      return value.data === undefined && value.url === undefined ? 'must have data or a url' : undefined;
    default:
      return undefined;
  }
};

/** Decimal places of a JSON number (`1.25` → 2, `1e-7` → 7); trailing zeros are lost by JSON.parse. */
const decimalPlaces = (n: number): number => {
  const m = /^-?\d*(?:\.(\d+))?(?:e([+-]?\d+))?$/i.exec(String(n));
  if (!m) return 0;
  return Math.max(0, (m[1]?.length ?? 0) - (m[2] ? Number(m[2]) : 0));
};

/** Orders two dates/dateTimes: instants when both have a time, else by the shared date precision. */
const compareTemporal = (a: string, b: string): number => {
  if (a.includes('T') && b.includes('T')) return Math.sign(Date.parse(a) - Date.parse(b));
  const da = a.slice(0, 10);
  const db = b.slice(0, 10);
  const n = Math.min(da.length, db.length);
  return da.slice(0, n) < db.slice(0, n) ? -1 : da.slice(0, n) > db.slice(0, n) ? 1 : 0;
};

type Kind =
  | 'number'
  | 'temporal'
  | 'time'
  | 'string'
  | 'boolean'
  | 'coding'
  | 'quantity'
  | 'reference'
  | 'other';

const kindOf = (key: string): Kind => {
  switch (key.replace(/^(value|answer)/, '')) {
    case 'Integer':
    case 'Decimal':
      return 'number';
    case 'Date':
    case 'DateTime':
      return 'temporal';
    case 'Time':
      return 'time';
    case 'String':
    case 'Uri':
      return 'string';
    case 'Boolean':
      return 'boolean';
    case 'Coding':
      return 'coding';
    case 'Quantity':
      return 'quantity';
    case 'Reference':
      return 'reference';
    default:
      return 'other';
  }
};

const sameCoding = (a: Record<string, unknown>, b: Record<string, unknown>): boolean =>
  a.code !== undefined
    ? a.code === b.code && (a.system === undefined || b.system === undefined || a.system === b.system)
    : a.display !== undefined && a.display === b.display && b.code === undefined;

const sameUnit = (a: Record<string, unknown>, b: Record<string, unknown>): boolean =>
  (a.code === undefined && a.unit === undefined) ||
  (b.code === undefined && b.unit === undefined) ||
  (a.code !== undefined
    ? a.code === b.code && (a.system ?? b.system) === (b.system ?? a.system)
    : a.unit === b.unit);

/**
 * Compares two typed values: a number (<0, 0, >0), `'unequal'` for values that can only be tested
 * for equality, or undefined when they are not comparable (different types, units…).
 */
const compareValues = (
  aKey: string,
  a: unknown,
  bKey: string,
  b: unknown,
): number | 'unequal' | undefined => {
  const kind = kindOf(aKey);
  if (kind !== kindOf(bKey)) return undefined;
  switch (kind) {
    case 'number':
      return typeof a === 'number' && typeof b === 'number' ? Math.sign(a - b) : undefined;
    case 'temporal':
      return typeof a === 'string' && typeof b === 'string' ? compareTemporal(a, b) : undefined;
    case 'time':
    case 'string':
      return typeof a === 'string' && typeof b === 'string' ? (a < b ? -1 : a > b ? 1 : 0) : undefined;
    case 'boolean':
      return a === b ? 0 : 'unequal';
    case 'coding':
      return isObject(a) && isObject(b) ? (sameCoding(a, b) ? 0 : 'unequal') : undefined;
    case 'quantity':
      return isObject(a) &&
        isObject(b) &&
        typeof a.value === 'number' &&
        typeof b.value === 'number' &&
        sameUnit(a, b)
        ? Math.sign(a.value - b.value)
        : undefined;
    case 'reference':
      return isObject(a) && isObject(b)
        ? a.reference === b.reference && a.reference
          ? 0
          : 'unequal'
        : undefined;
    default:
      return JSON.stringify(a) === JSON.stringify(b) ? 0 : 'unequal';
  }
};

/** The answers of a response item as `[value key, value]`, skipping malformed ones. */
const answerValues = (r: QuestionnaireResponseItem): [string, unknown][] =>
  (Array.isArray(r.answer) ? r.answer : []).flatMap((a) => {
    if (!isObject(a)) return [];
    const keys = valueKeys(a, 'value');
    return keys.length === 1 ? [[keys[0]!, a[keys[0]!]] as [string, unknown]] : [];
  });

/** Every code a ValueSet lists, and whether it may hold more (compose without concept lists). */
const membersOf = (valueSet: Json): ValueSetMembers => {
  const codes: ValueSetMembers['codes'] = [];
  let open = false;
  const walk = (contains: unknown): void => {
    for (const c of Array.isArray(contains) ? contains : []) {
      if (!isObject(c)) continue;
      if (typeof c.code === 'string')
        codes.push({ system: typeof c.system === 'string' ? c.system : undefined, code: c.code });
      walk(c.contains);
    }
  };
  const expansion = valueSet.expansion;
  if (isObject(expansion) && Array.isArray(expansion.contains)) walk(expansion.contains);
  else {
    const compose = isObject(valueSet.compose) ? valueSet.compose : {};
    for (const include of Array.isArray(compose.include) ? compose.include : []) {
      if (!isObject(include)) continue;
      const system = typeof include.system === 'string' ? include.system : undefined;
      if (Array.isArray(include.concept))
        for (const c of include.concept)
          if (isObject(c) && typeof c.code === 'string') codes.push({ system, code: c.code });
      if (!Array.isArray(include.concept) || include.filter !== undefined || include.valueSet !== undefined)
        open = true;
    }
    const excluded = (Array.isArray(compose.exclude) ? compose.exclude : []).flatMap((exclude) =>
      isObject(exclude) && Array.isArray(exclude.concept)
        ? exclude.concept.map((c) => `${String(exclude.system)}|${isObject(c) ? String(c.code) : ''}`)
        : [],
    );
    if (excluded.length)
      return { codes: codes.filter((c) => !excluded.includes(`${c.system}|${c.code}`)), open };
  }
  return { codes, open };
};

/**
 * Validates a QuestionnaireResponse against its Questionnaire (docs/interface.md §4.4 $validate). Never throws
 * on malformed input: everything wrong becomes an issue.
 *
 * Severity: `in-progress` and `stopped` responses are unfinished by definition, so every problem
 * is a warning; `completed`, `amended` (and anything else) get errors. Problems of the
 * Questionnaire or the environment (an unresolvable answerValueSet, a failing
 * enableWhenExpression or questionnaire-constraint expression, an invalid regex) are always
 * warnings. A violated questionnaire-constraint (see {@link constraintProblem}) follows its own
 * `severity`: `error` as above, `warning` always a warning. Each issue has an `expression`
 * (FHIRPath into the response, e.g. `QuestionnaireResponse.item[1].item[0].answer[0]`) and
 * `diagnostics` naming the question text and linkId.
 *
 * @returns an OperationOutcome: the issues, or one `information` issue when the response is valid.
 */
export const validateResponse = async (
  response: QuestionnaireResponse,
  questionnaire: Questionnaire,
  options: ValidateOptions = {},
): Promise<OperationOutcome> => {
  const problems: Problem[] = [];
  const report = (p: Problem) => problems.push(p);
  // Our own copy: fhirpath.js annotates what it evaluates, and the caller's objects stay untouched.
  const qr = structuredClone(response) as QuestionnaireResponse;
  const budget = options.budget;
  const status = (qr as { status?: unknown }).status;
  const lenient = status === 'in-progress' || status === 'stopped';

  if (typeof status !== 'string' || !RESPONSE_STATUSES.includes(status))
    report({
      code: 'value',
      diagnostics: `status must be one of ${RESPONSE_STATUSES.join(', ')}, not ${JSON.stringify(status ?? null)}`,
      expression: ['QuestionnaireResponse.status'],
    });
  if (typeof qr.questionnaire === 'string' && typeof questionnaire.url === 'string') {
    const [url, version] = qr.questionnaire.split('|');
    if (url !== questionnaire.url || (version && questionnaire.version && version !== questionnaire.version))
      report({
        code: 'business-rule',
        advisory: true,
        diagnostics: `the response names Questionnaire ${qr.questionnaire}, but is validated against ${questionnaire.url}${questionnaire.version ? `|${questionnaire.version}` : ''}`,
        expression: ['QuestionnaireResponse.questionnaire'],
      });
  }

  // The linkIds of the whole Questionnaire, to tell "wrong nesting" from "unknown linkId".
  const everywhere = new Map<string, { q: QuestionnaireItem; parent: QuestionnaireItem | undefined }>();
  const index = (items: unknown, parent: QuestionnaireItem | undefined) => {
    for (const q of Array.isArray(items) ? (items as QuestionnaireItem[]) : []) {
      if (!isObject(q) || typeof q.linkId !== 'string') continue;
      if (!everywhere.has(q.linkId)) everywhere.set(q.linkId, { q, parent });
      index(q.item, q);
    }
  };
  index(questionnaire.item, undefined);

  const valueSets = await resolveValueSets(questionnaire, options.resolve);

  // 1. Structure: place every response item, reporting what cannot be placed.
  const root: Scope = { parent: undefined, owner: undefined, nodes: [] };
  const place = (
    rItems: unknown,
    qItems: QuestionnaireItem[],
    scope: Scope,
    path: string,
    where: string,
  ): void => {
    if (rItems === undefined) return;
    if (!Array.isArray(rItems)) {
      report({
        code: 'structure',
        diagnostics: `${where}: item must be a list`,
        expression: [`${path}.item`],
      });
      return;
    }
    let last = -1;
    rItems.forEach((r, i) => {
      const itemPath = `${path}.item[${i}]`;
      if (!isObject(r) || typeof r.linkId !== 'string') {
        report({
          code: 'structure',
          diagnostics: `${where}: item ${i} has no linkId`,
          expression: [itemPath],
        });
        return;
      }
      const at = qItems.findIndex((q) => isObject(q) && q.linkId === r.linkId);
      const q = qItems[at];
      if (!q) {
        const known = everywhere.get(r.linkId);
        report({
          code: 'structure',
          diagnostics: known
            ? `item ${label(known.q)} is not allowed in ${where}: it belongs ${known.parent ? `inside ${label(known.parent)}` : 'at the top level of the response'}`
            : `item ${label(r)} in ${where} is not in the Questionnaire (unknown linkId)`,
          expression: [itemPath],
        });
        return;
      }
      if (at < last) {
        report({
          code: 'structure',
          diagnostics: `item ${label(q)} is out of order in ${where}: the Questionnaire puts it before ${label(qItems[last]!)}`,
          expression: [itemPath],
        });
      } else if (at === last && !(q.type === 'group' && q.repeats === true)) {
        report({
          code: 'structure',
          diagnostics:
            q.type === 'group'
              ? `group ${label(q)} does not repeat but appears more than once in ${where}`
              : `question ${label(q)} appears more than once in ${where}: repeated answers belong in one item's answer list`,
          expression: [itemPath],
        });
      }
      last = Math.max(last, at);
      const node: Node = {
        q,
        r: r as unknown as QuestionnaireResponseItem,
        path: itemPath,
        scope,
        scopes: [],
      };
      scope.nodes.push(node);
      placeChildren(node);
    });
  };
  const placeChildren = (node: Node): void => {
    const { q, r, path } = node;
    const children = Array.isArray(q.item) ? q.item : [];
    if (r.answer !== undefined && !Array.isArray(r.answer)) {
      report({
        code: 'structure',
        diagnostics: `${label(q)}: answer must be a list`,
        expression: [`${path}.answer`],
      });
      return;
    }
    if (q.type === 'group' || q.type === 'display') {
      if (r.answer?.length)
        report({
          code: 'structure',
          diagnostics: `${q.type} item ${label(q)} cannot have answers`,
          expression: [`${path}.answer[0]`],
        });
      if (q.type === 'display' && r.item !== undefined) {
        report({
          code: 'structure',
          diagnostics: `display item ${label(q)} cannot have child items`,
          expression: [`${path}.item`],
        });
        return;
      }
      const scope: Scope = { parent: node.scope, owner: node, nodes: [] };
      node.scopes.push(scope);
      place(r.item, children, scope, path, `group ${label(q)}`);
      return;
    }
    if (r.item !== undefined) {
      report({
        code: 'structure',
        diagnostics: `question ${label(q)} cannot have child items directly: items nested under a question belong in answer.item`,
        expression: [`${path}.item`],
      });
    }
    (r.answer ?? []).forEach((a, k) => {
      const scope: Scope = { parent: node.scope, owner: node, nodes: [] };
      node.scopes.push(scope);
      if (isObject(a)) place(a.item, children, scope, `${path}.answer[${k}]`, `answer ${k} of ${label(q)}`);
    });
  };
  place(
    qr.item,
    Array.isArray(questionnaire.item) ? questionnaire.item : [],
    root,
    'QuestionnaireResponse',
    'the response',
  );

  // 2. Enablement (spec R5 Questionnaire.item.enableWhen; SDC enableWhenExpression).
  const memo = new Map<Node, boolean>();
  const visiting = new Set<Node>();
  const expressionFailures = new Set<string>();

  const nodeEnabled = (node: Node): boolean => {
    const known = memo.get(node);
    if (known !== undefined) return known;
    // A cycle of enableWhen conditions: the item on the cycle counts as not answered.
    if (visiting.has(node)) return false;
    visiting.add(node);
    const enabled = enabledIn(node.q, node.scope, node);
    visiting.delete(node);
    memo.set(node, enabled);
    return enabled;
  };

  const scopeEnabled = (scope: Scope): boolean => (scope.owner ? nodeEnabled(scope.owner) : true);

  /** The enabled instances of `linkId` nearest to `scope`: its own subtree first, then outwards. */
  const nearest = (linkId: string, scope: Scope): Node[] => {
    const collect = (s: Scope, found: Node[]): Node[] => {
      for (const n of s.nodes) {
        if (n.q.linkId === linkId) found.push(n);
        for (const child of n.scopes) collect(child, found);
      }
      return found;
    };
    for (let s: Scope | undefined = scope; s; s = s.parent) {
      const found = collect(s, []);
      if (found.length) return found;
    }
    return [];
  };

  const conditionHolds = (condition: Record<string, unknown>, scope: Scope): boolean => {
    const question = condition.question;
    const operator = condition.operator;
    if (typeof question !== 'string') return false;
    // "If enableWhen logic depends on an item that is disabled, the logic proceeds as though the item is not valued."
    const answers = nearest(question, scope)
      .filter(nodeEnabled)
      .flatMap((n) => answerValues(n.r));
    const key = valueKeys(condition, 'answer')[0];
    if (!key) return false;
    const expected = condition[key];
    if (operator === 'exists') return answers.length > 0 === (expected === true);
    const results = answers.map(([k, v]) => compareValues(k, v, key, expected));
    switch (operator) {
      case '=':
        return results.includes(0);
      case '!=':
        return !results.includes(0);
      case '>':
        return results.some((c) => typeof c === 'number' && c > 0);
      case '<':
        return results.some((c) => typeof c === 'number' && c < 0);
      case '>=':
        return results.some((c) => typeof c === 'number' && c >= 0);
      case '<=':
        return results.some((c) => typeof c === 'number' && c <= 0);
      default:
        return false;
    }
  };

  const expressionHolds = (
    q: QuestionnaireItem,
    expression: string,
    scope: Scope,
    node: Node | undefined,
    path: string,
  ): boolean => {
    const context = node ?? scope.owner;
    try {
      // %context is left to fhirpath.js: it binds the evaluated node typed as a response item, so
      // `answer.value` resolves value[x]; a plain variable would hide that type.
      const env = { resource: qr, rootResource: qr, questionnaire, qitem: q };
      const result = context
        ? evaluateFhirPath(context.r, expression, env, { base: 'QuestionnaireResponse.item', budget })
        : evaluateFhirPath(qr, expression, env, { budget });
      return result.length === 1 && result[0] === true;
    } catch (error) {
      if (!expressionFailures.has(q.linkId)) {
        expressionFailures.add(q.linkId);
        report({
          code: 'processing',
          advisory: true,
          diagnostics: `the enableWhenExpression of ${label(q)} could not be evaluated (${error instanceof Error ? error.message : String(error)}); the item is treated as enabled`,
          expression: [path],
        });
      }
      return true;
    }
  };

  /** Is `q` enabled at `scope` (for an existing instance `node`, or for a missing one)? */
  const enabledIn = (q: QuestionnaireItem, scope: Scope, node?: Node, path = node?.path ?? ''): boolean => {
    if (!scopeEnabled(scope)) return false;
    const conditions = (Array.isArray(q.enableWhen) ? q.enableWhen : []).filter(isObject);
    if (conditions.length) {
      const holds = conditions.map((c) => conditionHolds(c, scope));
      // R5 requires enableBehavior with several conditions; without it all must hold.
      if (!(q.enableBehavior === 'any' ? holds.some(Boolean) : holds.every(Boolean))) return false;
    }
    const expression = extensionValue(q, EXT_ENABLE_WHEN_EXPRESSION);
    if (expression && isObject(expression[1]) && typeof expression[1].expression === 'string')
      return expressionHolds(q, expression[1].expression, scope, node, path);
    return true;
  };

  // 3. Per-scope checks: required items, then every placed item's answers.
  const hasAnswers = (node: Node): boolean =>
    node.q.type === 'group'
      ? node.scopes.some((s) => s.nodes.some(hasAnswers))
      : answerValues(node.r).length > 0 || node.scopes.some((s) => s.nodes.some(hasAnswers));

  const checkScope = (scope: Scope, qItems: QuestionnaireItem[], scopePath: string, where: string): void => {
    for (const q of qItems) {
      if (!isObject(q) || typeof q.linkId !== 'string' || q.required !== true || q.type === 'display')
        continue;
      const instances = scope.nodes.filter((n) => n.q === q);
      if (instances.length === 0) {
        if (enabledIn(q, scope, undefined, scopePath))
          report({
            code: 'required',
            diagnostics: `${label(q)} is required but missing from ${where}`,
            expression: [scopePath],
          });
        continue;
      }
      for (const n of instances)
        if (nodeEnabled(n) && !hasAnswers(n))
          report({
            code: 'required',
            diagnostics:
              q.type === 'group'
                ? `group ${label(q)} is required but none of its questions is answered`
                : `${label(q)} is required but has no answer`,
            expression: [n.path],
          });
    }
    for (const node of scope.nodes) checkNode(node);
  };

  // 4. Invariants (questionnaire-constraint), each evaluated within the budget like every FHIRPath.
  /** Constraints whose expression failed once: reported once, not for every repetition. */
  const invariantFailures = new Set<object>();
  const checkInvariants = (
    owner: Questionnaire | QuestionnaireItem,
    node: Node | undefined,
    path: string,
    where: string,
  ): void => {
    const constraints = constraintsOf(owner);
    // A disabled item is not part of the response: its invariants do not apply.
    if (constraints.length === 0 || (node && !nodeEnabled(node))) return;
    for (const constraint of constraints) {
      if (invariantFailures.has(constraint.source)) continue;
      const problem = constraintProblem(constraint, where, path, (expression) => {
        const env = {
          resource: qr,
          rootResource: qr,
          questionnaire,
          // No `context` variable: fhirpath.js's own %context is the (typed) input, so
          // `%context.answer.value` resolves the value[x] choice.
          ...(node ? { qitem: node.q } : {}),
        };
        return node
          ? evaluateFhirPath(node.r, expression, env, { base: 'QuestionnaireResponse.item', budget })
          : evaluateFhirPath(qr, expression, env, { budget });
      });
      if (!problem) continue;
      if (problem.code === 'processing') invariantFailures.add(constraint.source);
      report(problem);
    }
  };

  const checkNode = (node: Node): void => {
    const { q, r, path } = node;
    const children = Array.isArray(q.item) ? q.item : [];
    checkInvariants(q, node, path, label(q));
    if (q.type === 'group') {
      for (const s of node.scopes) checkScope(s, children, path, `group ${label(q)}`);
      return;
    }
    if (q.type === 'display') return;
    const answers = Array.isArray(r.answer) ? r.answer : [];
    if (answers.length > 0 && !nodeEnabled(node))
      report({
        code: 'business-rule',
        diagnostics: `${label(q)} is answered although it is disabled (enableWhen)`,
        expression: [path],
      });
    if (answers.length > 1 && q.repeats !== true)
      report({
        code: 'structure',
        diagnostics: `${label(q)} does not repeat but has ${answers.length} answers`,
        expression: [`${path}.answer[1]`],
      });
    answers.forEach((a, k) => {
      const answerPath = `${path}.answer[${k}]`;
      checkAnswer(q, a, answerPath);
      const scope = node.scopes[k];
      if (scope) checkScope(scope, children, answerPath, `answer ${k} of ${label(q)}`);
    });
  };

  const checkAnswer = (q: QuestionnaireItem, answer: unknown, path: string): void => {
    if (!isObject(answer)) {
      report({ code: 'structure', diagnostics: `${label(q)}: answer must be an object`, expression: [path] });
      return;
    }
    const keys = valueKeys(answer, 'value');
    if (keys.length !== 1) {
      report({
        code: keys.length ? 'structure' : 'required',
        diagnostics: keys.length
          ? `${label(q)}: an answer holds exactly one value, not ${keys.join(', ')}`
          : `${label(q)}: the answer has no value`,
        expression: [path],
      });
      return;
    }
    const key = keys[0]!;
    const value = answer[key];
    const expected = ANSWER_VALUE_KEYS[q.type];
    const options = Array.isArray(q.answerOption) ? q.answerOption.filter(isObject) : [];
    const valueSet = typeof q.answerValueSet === 'string' ? q.answerValueSet : undefined;
    const constrained = options.length > 0 || valueSet !== undefined;
    const constraint = q.answerConstraint ?? 'optionsOnly';
    const freeText = constrained && constraint === 'optionsOrString' && key === 'valueString';
    if (expected && key !== expected && !freeText) {
      report({
        code: 'value',
        diagnostics: `${label(q)} is of type ${q.type}: its answers are ${expected}${constrained && constraint === 'optionsOrString' ? ' or valueString' : ''}, not ${key}`,
        expression: [path],
      });
      return;
    }
    const syntax = syntaxProblem(key, value);
    if (syntax) {
      report({ code: 'value', diagnostics: `${label(q)}: ${key} ${syntax}`, expression: [path] });
      return;
    }
    if (constrained && !freeText && constraint !== 'optionsOrType') {
      if (options.length > 0) {
        const listed = options.some((o) => {
          const ok = valueKeys(o, 'value')[0];
          return ok !== undefined && compareValues(key, value, ok, o[ok]) === 0;
        });
        if (!listed)
          report({
            code: 'code-invalid',
            diagnostics: `${label(q)}: ${display(key, value)} is not one of the answer options`,
            expression: [path],
          });
      } else if (valueSet !== undefined) checkValueSet(q, valueSet, key, value, path);
    }
    checkConstraints(q, key, value, path);
  };

  const checkValueSet = (
    q: QuestionnaireItem,
    canonical: string,
    key: string,
    value: unknown,
    path: string,
  ) => {
    const members = valueSets.get(canonical);
    if (!members) {
      report({
        code: 'not-found',
        advisory: true,
        diagnostics: `${label(q)}: ValueSet ${canonical} could not be resolved, so membership of ${display(key, value)} was not checked`,
        expression: [path],
      });
      return;
    }
    if (key !== 'valueCoding' || !isObject(value)) return;
    const found = members.codes.some(
      (c) =>
        c.code === value.code &&
        (c.system === undefined || value.system === undefined || c.system === value.system),
    );
    if (found) return;
    if (members.open)
      report({
        code: 'code-invalid',
        advisory: true,
        diagnostics: `${label(q)}: ${display(key, value)} is not listed in ValueSet ${canonical}, which includes codes it does not enumerate; membership was not verified`,
        expression: [path],
      });
    else
      report({
        code: 'code-invalid',
        diagnostics: `${label(q)}: ${display(key, value)} is not in ValueSet ${canonical}`,
        expression: [path],
      });
  };

  const checkConstraints = (q: QuestionnaireItem, key: string, value: unknown, path: string): void => {
    if (typeof value === 'string' && (key === 'valueString' || key === 'valueUri')) {
      const length = [...value].length;
      if (typeof q.maxLength === 'number' && length > q.maxLength)
        report({
          code: 'too-long',
          diagnostics: `${label(q)}: the answer has ${length} characters, more than maxLength ${q.maxLength}`,
          expression: [path],
        });
      const min = extensionValue(q, EXT_MIN_LENGTH)?.[1];
      if (typeof min === 'number' && length < min)
        report({
          code: 'value',
          diagnostics: `${label(q)}: the answer has ${length} characters, fewer than minLength ${min}`,
          expression: [path],
        });
      const regex = extensionValue(q, EXT_REGEX)?.[1];
      if (typeof regex === 'string') {
        const problem = regexProblem(q, regex, value, path, budget);
        if (problem) report(problem);
      }
    }
    for (const [url, bound] of [
      [EXT_MIN_VALUE, 'min'],
      [EXT_MAX_VALUE, 'max'],
    ] as const) {
      const limit = extensionValue(q, url);
      if (!limit) continue;
      const cmp = compareValues(key, value, limit[0], limit[1]);
      if (typeof cmp !== 'number') continue;
      if ((bound === 'min' && cmp < 0) || (bound === 'max' && cmp > 0))
        report({
          code: 'value',
          diagnostics: `${label(q)}: ${display(key, value)} is ${bound === 'min' ? 'below the minimum' : 'above the maximum'} ${display(limit[0], limit[1])}`,
          expression: [path],
        });
    }
    const places = extensionValue(q, EXT_MAX_DECIMAL_PLACES)?.[1];
    const number =
      key === 'valueDecimal' ? value : key === 'valueQuantity' && isObject(value) ? value.value : undefined;
    if (typeof places === 'number' && typeof number === 'number' && decimalPlaces(number) > places)
      report({
        code: 'value',
        diagnostics: `${label(q)}: ${number} has more than ${places} decimal places`,
        expression: [path],
      });
  };

  checkScope(
    root,
    Array.isArray(questionnaire.item) ? questionnaire.item : [],
    'QuestionnaireResponse',
    'the response',
  );
  checkInvariants(questionnaire, undefined, 'QuestionnaireResponse', 'the response');

  if (problems.length === 0)
    return {
      resourceType: 'OperationOutcome',
      issue: [
        {
          severity: 'information',
          code: 'informational',
          diagnostics: `the response is valid against Questionnaire ${questionnaireName(questionnaire)}`,
        },
      ],
    };
  return {
    resourceType: 'OperationOutcome',
    issue: problems.map(({ advisory, ...issue }) => ({
      severity: advisory || lenient ? 'warning' : 'error',
      ...issue,
    })),
  };
};

const questionnaireName = (q: Questionnaire): string =>
  typeof q.url === 'string'
    ? `${q.url}${typeof q.version === 'string' ? `|${q.version}` : ''}`
    : typeof q.id === 'string'
      ? `Questionnaire/${q.id}`
      : typeof q.title === 'string'
        ? JSON.stringify(q.title)
        : '(inline)';

/** A value for diagnostics: `'abc'`, `42`, `http://loinc.org|1234-5`, `5 mg`. */
const display = (key: string, value: unknown): string => {
  if (isObject(value)) {
    if (key.endsWith('Coding'))
      return [value.system, value.code].filter((x) => x !== undefined).join('|') || String(value.display);
    if (key.endsWith('Quantity'))
      return `${String(value.value)}${value.unit || value.code ? ` ${String(value.unit ?? value.code)}` : ''}`;
    if (key.endsWith('Reference')) return String(value.reference ?? value.display ?? 'reference');
    return JSON.stringify(value);
  }
  return typeof value === 'string' ? `'${value}'` : String(value);
};

/**
 * The `regex` extension (R5 core extension; issue 10): the whole answer must match, on RE2 in
 * linear time and within the evaluation budget. A pattern RE2 cannot compile, or one that runs out
 * of time, is a warning that it was not applied; never an exception.
 */
const regexProblem = (
  q: QuestionnaireItem,
  regex: string,
  value: string,
  path: string,
  budget: EvaluationBudget | undefined,
): Problem | undefined => {
  let matched: boolean;
  try {
    matched = runWithinBudget(() => matchesWhole(regex, value), budget);
  } catch (error) {
    return {
      code: 'processing',
      advisory: true,
      diagnostics: `${label(q)}: the regex extension ${JSON.stringify(regex)} was not applied: ${error instanceof Error ? error.message : String(error)}`,
      expression: [path],
    };
  }
  return matched
    ? undefined
    : {
        code: 'value',
        diagnostics: `${label(q)}: ${JSON.stringify(value)} does not match the pattern ${regex}`,
        expression: [path],
      };
};

/** One questionnaire-constraint extension, as read by {@link constraintsOf}. */
interface Constraint {
  /** The extension itself: one identity across the repetitions of its item. */
  readonly source: object;
  readonly key: string | undefined;
  readonly severity: string | undefined;
  readonly expression: string | undefined;
  readonly human: string | undefined;
}

/**
 * The questionnaire-constraint extensions of a Questionnaire or an item. `expression` is a FHIRPath
 * string (`valueString`); a `valueExpression` with FHIRPath is accepted too. `requirements` is
 * documentation and `location` is not used: an issue points at the item the constraint is on.
 */
const constraintsOf = (owner: { extension?: unknown }): Constraint[] =>
  (Array.isArray(owner.extension) ? owner.extension : [])
    .filter((e): e is Record<string, unknown> => isObject(e) && e.url === EXT_QUESTIONNAIRE_CONSTRAINT)
    .map((e) => {
      const part = (url: string): unknown => {
        const sub = (Array.isArray(e.extension) ? e.extension : []).find((x) => isObject(x) && x.url === url);
        const key = isObject(sub) ? Object.keys(sub).find((k) => k.startsWith('value')) : undefined;
        return key ? (sub as Record<string, unknown>)[key] : undefined;
      };
      const text = (value: unknown) => (typeof value === 'string' && value !== '' ? value : undefined);
      const expression = part('expression');
      return {
        source: e,
        key: text(part('key')),
        severity: text(part('severity')),
        expression: text(isObject(expression) ? expression.expression : expression),
        human: text(part('human')),
      };
    });

/**
 * Checks one questionnaire-constraint (core extension, SDC IG; docs/interface.md §4.4 $validate
 * "constraints") on one place of the response: `evaluate` runs its FHIRPath with the matching
 * QuestionnaireResponse item as context (the response itself for a Questionnaire-level one),
 * through evaluateFhirPath and so within the evaluation budget of issue 10.
 *
 * Only a result of exactly `false` violates the invariant. An empty result is unknown in FHIRPath
 * (an unanswered question compared to a number, say) and counts as satisfied: a missing answer is
 * `required`'s business. A violation is an `invariant` issue with the `human` text as diagnostics;
 * severity `warning` makes it advisory (always a warning), anything else is treated as `error`.
 * An expression that is missing, does not parse, fails, runs out of its budget or answers
 * something other than one boolean is an advisory `processing` issue saying it was not checked;
 * never an exception.
 * @returns the issue, or undefined when the invariant holds.
 */
const constraintProblem = (
  constraint: Constraint,
  where: string,
  path: string,
  evaluate: (expression: string) => unknown[],
): Problem | undefined => {
  const name = `the questionnaire-constraint ${constraint.key ? JSON.stringify(constraint.key) : '(without key)'} of ${where}`;
  const notChecked = (why: string): Problem => ({
    code: 'processing',
    advisory: true,
    diagnostics: `${name} was not checked: ${why}`,
    expression: [path],
  });
  if (constraint.expression === undefined) return notChecked('it has no FHIRPath expression');
  let result: unknown[];
  try {
    result = evaluate(constraint.expression);
  } catch (error) {
    return notChecked(
      `its expression could not be evaluated (${error instanceof Error ? error.message : String(error)})`,
    );
  }
  if (result.length === 0 || (result.length === 1 && result[0] === true)) return undefined;
  if (result.length !== 1 || result[0] !== false)
    return notChecked(`its expression answered ${JSON.stringify(result).slice(0, 200)}, not one boolean`);
  return {
    code: 'invariant',
    ...(constraint.severity === 'warning' ? { advisory: true } : {}),
    diagnostics: constraint.human ?? `${name} is not satisfied: ${constraint.expression} is false`,
    expression: [path],
  };
};

/** Resolves every answerValueSet of the Questionnaire up front: contained (`#id`) or through `resolve`. */
const resolveValueSets = async (
  questionnaire: Questionnaire,
  resolve: CanonicalResolver | undefined,
): Promise<Map<string, ValueSetMembers>> => {
  const canonicals = new Set<string>();
  const walk = (items: unknown) => {
    for (const q of Array.isArray(items) ? items : []) {
      if (!isObject(q)) continue;
      if (typeof q.answerValueSet === 'string') canonicals.add(q.answerValueSet);
      walk(q.item);
    }
  };
  walk(questionnaire.item);
  const resolved = new Map<string, ValueSetMembers>();
  for (const canonical of canonicals) {
    let valueSet: Json | undefined;
    if (canonical.startsWith('#'))
      valueSet = (Array.isArray(questionnaire.contained) ? questionnaire.contained : []).find(
        (c) => isObject(c) && c.resourceType === 'ValueSet' && c.id === canonical.slice(1),
      );
    else {
      try {
        valueSet = await resolve?.('ValueSet', canonical);
      } catch {
        // An unreachable terminology source is a warning, not a failure of $validate.
        valueSet = undefined;
      }
    }
    if (isObject(valueSet) && valueSet.resourceType === 'ValueSet')
      resolved.set(canonical, membersOf(valueSet));
  }
  return resolved;
};
