/**
 * What clients make casebook evaluate (issue 10): evaluation budgets (per evaluation, per
 * request), client regexes on RE2 (the `regex` extension and FHIRPath's matches, matchesFull,
 * replaceMatches), and the SDC walkers on deeply nested input.
 */
import { expect } from 'chai';
import { EVALUATION_BUDGET_MS, EvaluationBudget, EvaluationBudgetExceeded } from '../../src/sdc/budget.js';
import { extract } from '../../src/sdc/extract.js';
import { evaluateFhirPath, FhirPathError } from '../../src/sdc/fhirpath.js';
import { generateNarrative } from '../../src/sdc/narrative.js';
import { POPULATE_EXTENSIONS, populate } from '../../src/sdc/populate.js';
import { ClientRegexError, matchesWhole, replaceAllMatches } from '../../src/sdc/regex.js';
import { runWithinBudget } from '../../src/sdc/run-within-budget.js';
import type { Questionnaire, QuestionnaireResponse } from '../../src/sdc/types.js';
import { EXT_ENABLE_WHEN_EXPRESSION, EXT_REGEX, validateResponse } from '../../src/sdc/validate.js';

const NOW = new Date('2026-03-01T10:00:00.000Z');
const spin = () => {
  for (;;) {
    // burns the event loop until interrupted
  }
};
/** 30⁵ = 24 million evaluations: seconds of FHIRPath without any regex. */
const LIST = `(${Array.from({ length: 30 }, (_, i) => i).join('|')})`;
const SLOW_FHIRPATH = `${LIST}.select(${LIST}.select(${LIST}.select(${LIST}.select(${LIST})))).count()`;

const timed = <T>(fn: () => T): { value?: T; error?: unknown; ms: number } => {
  const started = performance.now();
  try {
    return { value: fn(), ms: performance.now() - started };
  } catch (error) {
    return { error, ms: performance.now() - started };
  }
};

const regexQuestionnaire = (pattern: string): Questionnaire => ({
  resourceType: 'Questionnaire',
  status: 'active',
  item: [{ linkId: 'code', type: 'string', extension: [{ url: EXT_REGEX, valueString: pattern }] }],
});

const answered = (value: string): QuestionnaireResponse => ({
  resourceType: 'QuestionnaireResponse',
  status: 'completed',
  item: [{ linkId: 'code', answer: [{ valueString: value }] }],
});

describe('evaluation budgets', () => {
  it(`interrupts one evaluation after ${EVALUATION_BUDGET_MS} ms`, () => {
    const { error, ms } = timed(() => runWithinBudget(spin));
    expect(error).to.be.instanceOf(EvaluationBudgetExceeded);
    expect((error as EvaluationBudgetExceeded).scope).to.equal('evaluation');
    // At least the budget; at most the issue's bound on holding the event loop (1 s), whatever
    // else the machine is doing (the design's worst case is twice the budget: one retry).
    expect(ms).to.be.within(EVALUATION_BUDGET_MS - 5, 1000);
  });

  it("charges every evaluation to the request's budget and refuses to start once it is used up", () => {
    const budget = new EvaluationBudget(250);
    const first = timed(() => runWithinBudget(spin, budget));
    expect((first.error as EvaluationBudgetExceeded).scope).to.equal('evaluation');
    const second = timed(() => runWithinBudget(spin, budget));
    expect((second.error as EvaluationBudgetExceeded).scope).to.equal('request');
    expect(second.ms).to.be.below(EVALUATION_BUDGET_MS);
    const third = timed(() => runWithinBudget(() => 1, budget));
    expect((third.error as EvaluationBudgetExceeded).scope).to.equal('request');
    expect(third.ms).to.be.below(50);
    // Without a request's budget, only the per-evaluation budget applies.
    expect(runWithinBudget(() => 42)).to.equal(42);
  });

  it('passes results and errors of the task through', () => {
    expect(runWithinBudget(() => 'x')).to.equal('x');
    expect(() =>
      runWithinBudget(() => {
        throw new TypeError('boom');
      }),
    ).to.throw(TypeError, 'boom');
  });

  it('stops a FHIRPath expression that runs too long with a FhirPathError', () => {
    const { error, ms } = timed(() => evaluateFhirPath({ resourceType: 'Patient' }, SLOW_FHIRPATH));
    expect(error).to.be.instanceOf(FhirPathError);
    expect((error as Error).message).to.match(/budget of 200 ms/);
    expect(ms).to.be.below(1000);
  });

  it('turns an initialExpression that runs too long into a $populate issue, within the request budget', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      item: Array.from({ length: 6 }, (_, i) => ({
        linkId: `slow${i}`,
        type: 'integer',
        extension: [
          {
            url: POPULATE_EXTENSIONS.initialExpression,
            valueExpression: { language: 'text/fhirpath', expression: SLOW_FHIRPATH },
          },
        ],
      })),
    };
    const started = performance.now();
    const { issues } = await populate({
      questionnaire,
      context: [],
      now: NOW,
      budget: new EvaluationBudget(750),
    });
    expect(performance.now() - started).to.be.below(1000);
    expect(issues.issue).to.have.length(6);
    expect(issues.issue.map((i) => i.severity)).to.deep.equal(Array(6).fill('warning'));
    expect(issues.issue[0]!.diagnostics).to.match(/budget of 200 ms/);
    expect(issues.issue.at(-1)!.diagnostics).to.match(/budget of 750 ms is used up/);
  });

  it('turns a calculatedExpression that runs too long into a $populate issue, within the request budget', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      item: Array.from({ length: 6 }, (_, i) => ({
        linkId: `calc${i}`,
        type: 'integer',
        extension: [
          {
            url: POPULATE_EXTENSIONS.calculatedExpression,
            valueExpression: { language: 'text/fhirpath', expression: SLOW_FHIRPATH },
          },
        ],
      })),
    };
    const started = performance.now();
    const { response, issues } = await populate({
      questionnaire,
      context: [],
      now: NOW,
      budget: new EvaluationBudget(750),
    });
    expect(performance.now() - started).to.be.below(1000);
    expect(issues.issue).to.have.length(6);
    expect(issues.issue.map((i) => [i.severity, i.code])).to.deep.equal(
      Array(6).fill(['warning', 'processing']),
    );
    expect(issues.issue[0]!.diagnostics).to.match(/calculatedExpression .*budget of 200 ms/);
    expect(issues.issue.at(-1)!.diagnostics).to.match(/budget of 750 ms is used up/);
    // The items stay, unanswered.
    expect(response.item?.map((i) => [i.linkId, i.answer])).to.deep.equal(
      Array.from({ length: 6 }, (_, i) => [`calc${i}`, undefined]),
    );
  });

  it('turns an enableWhenExpression that runs too long into a $validate issue, within the request budget', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      item: Array.from({ length: 6 }, (_, i) => ({
        linkId: `q${i}`,
        type: 'integer',
        extension: [
          {
            url: EXT_ENABLE_WHEN_EXPRESSION,
            valueExpression: { language: 'text/fhirpath', expression: `${SLOW_FHIRPATH} > 0` },
          },
        ],
      })),
    };
    const response: QuestionnaireResponse = {
      resourceType: 'QuestionnaireResponse',
      status: 'completed',
      item: Array.from({ length: 6 }, (_, i) => ({ linkId: `q${i}`, answer: [{ valueInteger: i }] })),
    };
    const started = performance.now();
    const outcome = await validateResponse(response, questionnaire, { budget: new EvaluationBudget(750) });
    expect(performance.now() - started).to.be.below(1000);
    // Each a warning that the expression failed; the items count as enabled, so no other issue.
    expect(outcome.issue.map((i) => [i.severity, i.code, i.expression])).to.deep.equal(
      Array.from({ length: 6 }, (_, i) => ['warning', 'processing', [`QuestionnaireResponse.item[${i}]`]]),
    );
    expect(outcome.issue[0]!.diagnostics).to.match(/enableWhenExpression .*budget of 200 ms/);
    expect(outcome.issue.at(-1)!.diagnostics).to.match(/budget of 750 ms is used up/);
  });
});

describe('client regexes on RE2', () => {
  it('matches (a+)+$ against a×30 + ! in linear time, and a million characters too', () => {
    expect(timed(() => matchesWhole('(a+)+$', `${'a'.repeat(30)}!`)).ms).to.be.below(100);
    const { value, ms } = timed(() => matchesWhole('(a+)+$', `${'a'.repeat(1_000_000)}!`));
    expect(value).to.equal(false);
    expect(ms).to.be.below(1000);
  });

  it('keeps JavaScript pattern syntax where RE2 has it, and refuses lookaround and backreferences', () => {
    expect(matchesWhole('\\d{3}-[A-Z]+', '123-AB')).to.equal(true);
    expect(matchesWhole('(?<year>\\d{4})', '2026')).to.equal(true);
    expect(matchesWhole('\\u00e9+', 'éé')).to.equal(true);
    expect(() => matchesWhole('(?=a)a', 'a')).to.throw(ClientRegexError, /unsupported Perl syntax/);
    expect(() => matchesWhole('(a)\\1', 'aa')).to.throw(ClientRegexError);
    expect(replaceAllMatches('a(b)', 'xabyab', '[$1]')).to.equal('x[b]y[b]');
  });

  it('runs FHIRPath matches, matchesFull and replaceMatches on RE2 with their flags', () => {
    const patient = { resourceType: 'Patient', id: `${'a'.repeat(30)}!` };
    const { value, ms } = timed(() => evaluateFhirPath(patient, "id.matches('(a+)+$')"));
    expect(value).to.deep.equal([false]);
    expect(ms).to.be.below(100);
    const abc = { resourceType: 'Patient', id: 'ABC' };
    expect(evaluateFhirPath(abc, "id.matches('b', 'i')")).to.deep.equal([true]);
    expect(evaluateFhirPath(abc, "id.matches('b')")).to.deep.equal([false]);
    expect(evaluateFhirPath(abc, "id.matchesFull('b', 'i')")).to.deep.equal([false]);
    expect(evaluateFhirPath(abc, "id.matchesFull('abc', 'i')")).to.deep.equal([true]);
    expect(evaluateFhirPath(abc, "id.replaceMatches('(B)', '<$1>')")).to.deep.equal(['A<B>C']);
    expect(evaluateFhirPath({ resourceType: 'Patient' }, "id.matches('x')")).to.deep.equal([]);
    expect(() => evaluateFhirPath(abc, "id.matches('(?=a)')")).to.throw(FhirPathError, /cannot be used/);
    expect(() => evaluateFhirPath(abc, "id.matches('a', 'x')")).to.throw(FhirPathError, /flags/);
  });

  it('reports a regex extension RE2 cannot compile as a warning in $validate, never an exception', async () => {
    const outcome = await validateResponse(answered('aa'), regexQuestionnaire('(a)\\1'));
    expect(outcome.issue).to.have.length(1);
    expect(outcome.issue[0]).to.deep.include({ severity: 'warning', code: 'processing' });
    expect(outcome.issue[0]!.diagnostics).to.match(/was not applied/);
  });

  it('still applies valid regex extensions: a mismatch is an error on a completed response', async () => {
    const outcome = await validateResponse(answered(`${'a'.repeat(30)}!`), regexQuestionnaire('(a+)+$'));
    expect(outcome.issue.map((i) => [i.severity, i.code])).to.deep.equal([['error', 'value']]);
    const ok = await validateResponse(answered('aaa'), regexQuestionnaire('(a+)+'));
    expect(ok.issue.map((i) => i.severity)).to.deep.equal(['information']);
  });
});

describe('SDC walkers on deep input', () => {
  // The edge refuses JSON deeper than 64 levels, i.e. about 30 levels of items; 300 is a margin.
  const DEPTH = 300;
  const nestedQuestionnaireItems = (depth: number): Questionnaire['item'] => {
    let items: NonNullable<Questionnaire['item']> = [{ linkId: `l${depth}`, type: 'string', text: 'Leaf' }];
    for (let i = depth - 1; i >= 1; i--)
      items = [{ linkId: `l${i}`, type: 'group', text: `Group ${i}`, item: items }];
    return items;
  };
  const nestedResponseItems = (depth: number): QuestionnaireResponse['item'] => {
    let items: NonNullable<QuestionnaireResponse['item']> = [
      { linkId: `l${depth}`, answer: [{ valueString: 'leaf' }] },
    ];
    for (let i = depth - 1; i >= 1; i--) items = [{ linkId: `l${i}`, item: items }];
    return items;
  };
  const questionnaire: Questionnaire = {
    resourceType: 'Questionnaire',
    status: 'active',
    item: nestedQuestionnaireItems(DEPTH),
  };
  const response: QuestionnaireResponse = {
    resourceType: 'QuestionnaireResponse',
    status: 'completed',
    item: nestedResponseItems(DEPTH),
  };

  it(`validate, populate, narrative and extract handle items ${DEPTH} deep`, async () => {
    const outcome = await validateResponse(response, questionnaire);
    expect(outcome.issue.map((i) => i.severity)).to.deep.equal(['information']);
    const populated = await populate({ questionnaire, context: [], now: NOW });
    expect(populated.response.resourceType).to.equal('QuestionnaireResponse');
    expect(generateNarrative(response, questionnaire).text).to.include('leaf');
    const extracted = await extract(response, questionnaire, { now: NOW });
    expect(extracted.bundle.resourceType).to.equal('Bundle');
  });
});
