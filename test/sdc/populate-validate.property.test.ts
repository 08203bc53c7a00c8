/**
 * Property (issue 4; spec §4.4): a response produced by $populate and then completed with valid
 * answers always validates without errors. Random Questionnaires: trees of groups (repeating or
 * not), display items and questions of every answer type, with required/repeats, answerOptions
 * with each answerConstraint, initial values, constraint extensions, and enableWhen conditions on
 * earlier questions (enableBehavior any/all). Completing = what a form filler does: drop disabled
 * items, keep the populated answers of enabled ones, answer every other enabled question.
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { populate } from '../../src/sdc/populate.js';
import type {
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from '../../src/sdc/types.js';
import {
  ANSWER_VALUE_KEYS,
  EXT_MAX_DECIMAL_PLACES,
  EXT_MAX_VALUE,
  EXT_MIN_LENGTH,
  EXT_MIN_VALUE,
  EXT_REGEX,
  validateResponse,
} from '../../src/sdc/validate.js';

const QUESTION_TYPES = Object.keys(ANSWER_VALUE_KEYS);
const OPTION_TYPES = ['coding', 'integer', 'string'];
const WORDS = ['alpha', 'beta', 'gamma'];
const CODES = 'http://example.org/CodeSystem/findings';
const CONSTRAINTS = [undefined, 'optionsOnly', 'optionsOrType', 'optionsOrString'] as const;
const OPERATORS: Record<string, string[]> = {
  boolean: ['exists', '=', '!='],
  integer: ['exists', '=', '!=', '>', '<', '>=', '<='],
  string: ['exists', '=', '!='],
  coding: ['exists', '=', '!='],
};

/** Valid values of each question type; small domains where enableWhen should hit both ways. */
const validValue = (type: string): fc.Arbitrary<unknown> => {
  switch (type) {
    case 'boolean':
      return fc.boolean();
    case 'decimal':
      return fc.integer({ min: -10_000, max: 10_000 }).map((n) => n / 100);
    case 'integer':
      return fc.integer({ min: 0, max: 5 });
    case 'date':
      return fc
        .integer({ min: 0, max: 20_000 })
        .map((d) => new Date(Date.UTC(2000, 0, 1 + d)).toISOString().slice(0, 10));
    case 'dateTime':
      return fc
        .integer({ min: 0, max: 2_000_000_000 })
        .map((s) => new Date(946_684_800_000 + s * 1000).toISOString());
    case 'time':
      return fc
        .tuple(
          fc.integer({ min: 0, max: 23 }),
          fc.integer({ min: 0, max: 59 }),
          fc.integer({ min: 0, max: 59 }),
        )
        .map((t) => t.map((n) => String(n).padStart(2, '0')).join(':'));
    case 'string':
      return fc.constantFrom(...WORDS);
    case 'text':
      return fc
        .array(fc.constantFrom('lorem', 'ipsum', '\n', 'dolor sit'), { maxLength: 4 })
        .map((w) => `Note ${w.join(' ')}`);
    case 'url':
      return fc.nat(999).map((n) => `https://example.org/doc/${n}`);
    case 'coding':
      return fc.nat(9).map((n) => ({ system: CODES, code: `c${n}`, display: `Finding ${n}` }));
    case 'quantity':
      return fc
        .integer({ min: 0, max: 500 })
        .map((n) => ({ value: n / 10, unit: 'mm', system: 'http://unitsofmeasure.org', code: 'mm' }));
    case 'reference':
      return fc.nat(99).map((n) => ({ reference: `Patient/${n + 1}` }));
    default:
      return fc
        .string({ minLength: 1, maxLength: 12 })
        .map((s) => ({ contentType: 'text/plain', data: Buffer.from(s).toString('base64') }));
  }
};

interface Condition {
  readonly target: number;
  readonly operator: number;
  readonly value: number;
}

interface Spec {
  readonly kind: string;
  readonly required: boolean;
  readonly repeats: boolean;
  readonly withOptions: boolean;
  readonly constraint: number;
  readonly withInitial: boolean;
  readonly withLimits: boolean;
  /** Valid values of the type: answers and initial values come from here. */
  readonly values: unknown[];
  /** Indexes into values (or answerOptions): the answers a filler gives. */
  readonly picks: number[];
  readonly conditions: Condition[];
  readonly any: boolean;
  readonly children: Spec[];
}

const common = {
  required: fc.boolean(),
  repeats: fc.boolean(),
  conditions: fc.array(fc.record({ target: fc.nat(), operator: fc.nat(), value: fc.nat() }), {
    maxLength: 2,
  }),
  any: fc.boolean(),
};

const questionSpec: fc.Arbitrary<Spec> = fc.constantFrom(...QUESTION_TYPES, 'display').chain((kind) =>
  fc.record({
    kind: fc.constant(kind),
    ...common,
    withOptions: OPTION_TYPES.includes(kind) ? fc.boolean() : fc.constant(false),
    constraint: fc.nat(3),
    withInitial: fc.boolean(),
    withLimits: fc.boolean(),
    values: fc.array(validValue(kind), { minLength: 3, maxLength: 3 }),
    picks: fc.array(fc.nat(2), { minLength: 1, maxLength: 3 }),
    children: fc.constant([]),
  }),
);

const { tree } = fc.letrec<{ tree: Spec; group: Spec }>((tie) => ({
  tree: fc.oneof({ depthSize: 'small', maxDepth: 3, depthIdentifier: 'items' }, questionSpec, tie('group')),
  group: fc.record({
    kind: fc.constant('group'),
    ...common,
    withOptions: fc.constant(false),
    constraint: fc.constant(0),
    withInitial: fc.constant(false),
    withLimits: fc.constant(false),
    values: fc.constant([]),
    picks: fc.constant([]),
    children: fc.array(tie('tree'), { minLength: 1, maxLength: 3, depthIdentifier: 'items' }),
  }),
}));

/** A plain question every group starts with, so an enabled group can always hold an answer. */
const plain = (values: unknown[]): Spec => ({
  kind: 'string',
  required: false,
  repeats: false,
  withOptions: false,
  constraint: 0,
  withInitial: false,
  withLimits: false,
  values,
  picks: [0],
  conditions: [],
  any: false,
  children: [],
});

interface Target {
  readonly linkId: string;
  readonly type: string;
  readonly options: QuestionnaireResponseAnswer[];
}

/** Builds the Questionnaire; `answers` of each question (what the filler gives) are kept aside. */
const build = (
  specs: Spec[],
): { questionnaire: Questionnaire; fills: Map<string, QuestionnaireResponseAnswer[]> } => {
  let next = 0;
  const targets: Target[] = [];
  const fills = new Map<string, QuestionnaireResponseAnswer[]>();

  const item = (spec: Spec, inRepeating: boolean): QuestionnaireItem => {
    const linkId = `q${next++}`;
    const type = spec.kind;
    const result: QuestionnaireItem = { linkId, text: `Item ${linkId}`, type };
    const conditions = targets.length
      ? spec.conditions.map((c) => {
          const target = targets[c.target % targets.length]!;
          const operators = OPERATORS[target.type]!;
          const operator = operators[c.operator % operators.length]!;
          if (operator === 'exists')
            return { question: target.linkId, operator, answerBoolean: c.value % 2 === 0 };
          switch (target.type) {
            case 'boolean':
              return { question: target.linkId, operator, answerBoolean: c.value % 2 === 0 };
            case 'integer':
              return { question: target.linkId, operator, answerInteger: c.value % 6 };
            case 'string':
              return { question: target.linkId, operator, answerString: WORDS[c.value % WORDS.length] };
            default: {
              const coding = target.options[c.value % target.options.length]!.valueCoding as Record<
                string,
                unknown
              >;
              return {
                question: target.linkId,
                operator,
                answerCoding: { system: coding.system, code: coding.code },
              };
            }
          }
        })
      : [];
    if (conditions.length) result.enableWhen = conditions;
    if (conditions.length > 1) result.enableBehavior = spec.any ? 'any' : 'all';
    if (type === 'display') return result;
    if (spec.required) result.required = true;
    if (spec.repeats) result.repeats = true;
    if (type === 'group') {
      const children =
        spec.children[0]?.kind === 'string' && !spec.children[0].conditions.length
          ? spec.children
          : [plain(['alpha']), ...spec.children];
      result.item = children.map((c) => item(c, inRepeating || spec.repeats));
      return result;
    }
    const key = ANSWER_VALUE_KEYS[type]!;
    const values = spec.values.map((v) => ({ [key]: v }) as QuestionnaireResponseAnswer);
    const picks = spec.repeats ? spec.picks : spec.picks.slice(0, 1);
    if (spec.withOptions) {
      // Distinct options: the values are drawn from small domains.
      const options = values.filter(
        (v, i) => values.findIndex((w) => JSON.stringify(w) === JSON.stringify(v)) === i,
      );
      result.answerOption = options.map((o, i) => ({
        ...o,
        ...(spec.withInitial && i === 0 ? { initialSelected: true } : {}),
      }));
      const constraint = CONSTRAINTS[spec.constraint];
      if (constraint) result.answerConstraint = constraint;
      fills.set(
        linkId,
        picks.map((p) => options[p % options.length]!),
      );
      if (!inRepeating && OPERATORS[type]) targets.push({ linkId, type, options });
    } else {
      if (spec.withInitial) result.initial = picks.map((p) => values[p]!);
      fills.set(
        linkId,
        picks.map((p) => values[p]!),
      );
      if (!inRepeating && OPERATORS[type] && type !== 'coding') targets.push({ linkId, type, options: [] });
    }
    if (spec.withLimits)
      switch (type) {
        case 'string':
          result.maxLength = 10;
          result.extension = [
            { url: EXT_MIN_LENGTH, valueInteger: 2 },
            { url: EXT_REGEX, valueString: '[a-z]+' },
          ];
          break;
        case 'integer':
          result.extension = [
            { url: EXT_MIN_VALUE, valueInteger: 0 },
            { url: EXT_MAX_VALUE, valueInteger: 5 },
          ];
          break;
        case 'decimal':
          result.extension = [
            { url: EXT_MAX_DECIMAL_PLACES, valueInteger: 2 },
            { url: EXT_MIN_VALUE, valueDecimal: -100 },
            { url: EXT_MAX_VALUE, valueDecimal: 100 },
          ];
          break;
        case 'date':
          result.extension = [{ url: EXT_MIN_VALUE, valueDate: '2000-01-01' }];
          break;
        case 'quantity':
          result.extension = [
            {
              url: EXT_MAX_VALUE,
              valueQuantity: { value: 50, system: 'http://unitsofmeasure.org', code: 'mm' },
            },
          ];
          break;
      }
    return result;
  };

  const questionnaire: Questionnaire = {
    resourceType: 'Questionnaire',
    url: 'https://forms.example.org/Questionnaire/generated',
    version: '1',
    status: 'active',
    item: specs.map((s) => item(s, false)),
  };
  return { questionnaire, fills };
};

/**
 * The filler's own reading of enableWhen (R5 semantics, independent of validate.ts): conditions
 * only point at earlier questions outside repeating groups, whose final answers are known by then.
 */
const enabledBy = (q: QuestionnaireItem, given: Map<string, QuestionnaireResponseAnswer[]>): boolean => {
  const conditions = (q.enableWhen ?? []) as Record<string, unknown>[];
  if (!conditions.length) return true;
  const holds = conditions.map((c) => {
    const answers = given.get(c.question as string) ?? [];
    const key = Object.keys(c).find((k) => k.startsWith('answer'))!;
    const expected = c[key];
    const values = answers.map((a) => Object.entries(a).find(([k]) => k.startsWith('value'))!);
    const equal = ([k, v]: [string, unknown]) =>
      key === 'answerCoding'
        ? k === 'valueCoding' &&
          (v as Record<string, unknown>).code === (expected as Record<string, unknown>).code &&
          (v as Record<string, unknown>).system === (expected as Record<string, unknown>).system
        : v === expected;
    const numbers = values.map(([, v]) => v).filter((v): v is number => typeof v === 'number');
    const limit = expected as number;
    switch (c.operator) {
      case 'exists':
        return answers.length > 0 === expected;
      case '=':
        return values.some(equal);
      case '!=':
        return !values.some(equal);
      case '>':
        return numbers.some((v) => v > limit);
      case '<':
        return numbers.some((v) => v < limit);
      case '>=':
        return numbers.some((v) => v >= limit);
      default:
        return numbers.some((v) => v <= limit);
    }
  });
  return q.enableBehavior === 'any' ? holds.some(Boolean) : holds.every(Boolean);
};

/** Completes the populated items of one level, in Questionnaire order. */
const complete = (
  qItems: QuestionnaireItem[],
  populated: QuestionnaireResponseItem[],
  fills: Map<string, QuestionnaireResponseAnswer[]>,
  given: Map<string, QuestionnaireResponseAnswer[]>,
): QuestionnaireResponseItem[] => {
  const out: QuestionnaireResponseItem[] = [];
  for (const q of qItems) {
    if (q.type === 'display') continue;
    const enabled = enabledBy(q, given);
    if (!enabled) continue;
    const instances = populated.filter((p) => p.linkId === q.linkId);
    for (const instance of instances.length ? instances : [{ linkId: q.linkId }]) {
      if (q.type === 'group') {
        out.push({ ...instance, item: complete(q.item ?? [], instance.item ?? [], fills, given) });
        continue;
      }
      const answer = instance.answer?.length ? instance.answer : fills.get(q.linkId)!;
      if (!given.has(q.linkId)) given.set(q.linkId, answer);
      out.push({ ...instance, answer });
    }
  }
  // Anything populate put here that the Questionnaire does not have stays, for validate to judge.
  for (const p of populated) if (!qItems.some((q) => q.linkId === p.linkId)) out.push(p);
  return out;
};

describe('$populate then $validate (property)', () => {
  it('a response produced by $populate and then completed with valid answers always validates without errors', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(tree, { minLength: 1, maxLength: 5 }), async (specs) => {
        const { questionnaire, fills } = build(specs);
        const { response } = await populate({
          questionnaire,
          context: [],
          now: new Date('2026-03-01T10:00:00Z'),
        });

        // The populated, in-progress response already mirrors the form with valid initial answers.
        const initial = await validateResponse(response, questionnaire);
        const unexpected = initial.issue.filter(
          (i) => i.severity === 'error' || !['informational', 'required', 'business-rule'].includes(i.code),
        );
        expect(unexpected, JSON.stringify({ questionnaire, response, issues: initial.issue })).to.deep.equal(
          [],
        );

        const completed = {
          ...response,
          status: 'completed',
          item: complete(questionnaire.item ?? [], response.item ?? [], fills, new Map()),
        };
        const outcome = await validateResponse(completed, questionnaire);
        const errors = outcome.issue.filter((i) => i.severity === 'error');
        expect(errors, JSON.stringify({ questionnaire, completed, issues: outcome.issue })).to.deep.equal([]);
      }),
      { numRuns: 100 },
    );
  });
});
