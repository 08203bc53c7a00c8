/**
 * The editor and $validate agree on enablement (issue 32): a table of forms — nested groups,
 * repeats, enableWhenExpression, enableBehavior any and all, a cycle, chains through disabled
 * answers, `!=` on an unanswered question — each with a response that has every question item
 * (answered or not), run through the editor in real Chromium (its Web Worker decides what the page
 * shows) and through `POST /QuestionnaireResponse/$validate`, and compared item by item. Every
 * question is required, so $validate names each enabled unanswered item (`required`) and each
 * disabled answered one (`business-rule`): that is its enablement. Then the page saves, and the
 * stored response validates without an answer on a disabled item.
 *
 * One store is enough: what is compared is computed, not stored (both stores are covered by the
 * editor's other browser tests).
 */
import { expect } from 'chai';
import type { Browser, BrowserContext } from 'playwright-core';
import type {
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseItem,
} from '../../src/sdc/types.js';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import {
  CHROMIUM,
  chromiumMissing,
  clickAndNavigate,
  create,
  engineIdle,
  launchBrowser,
  launchUrl,
  newPatient,
  newSession,
  sessionBody,
  signIn,
  unique,
} from './support.js';

const EXPRESSION = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-enableWhenExpression';
const expression = (text: string) => ({
  url: EXPRESSION,
  valueExpression: { language: 'text/fhirpath', expression: text },
});

/** A required question. */
const q = (linkId: string, type: string, extra: Partial<QuestionnaireItem> = {}): QuestionnaireItem => ({
  linkId,
  text: linkId,
  type,
  required: true,
  ...extra,
});
const when = (question: string, operator: string, answer: Record<string, unknown>) => ({
  question,
  operator,
  ...answer,
});
const group = (
  linkId: string,
  item: QuestionnaireItem[],
  extra: Partial<QuestionnaireItem> = {},
): QuestionnaireItem => ({
  linkId,
  text: linkId,
  type: 'group',
  item,
  ...extra,
});

/** A response item: answered (`value`) or not. */
const r = (linkId: string, value?: Record<string, unknown>): QuestionnaireResponseItem => ({
  linkId,
  ...(value ? { answer: [value] } : {}),
});
const rg = (linkId: string, ...item: QuestionnaireResponseItem[]): QuestionnaireResponseItem => ({
  linkId,
  item,
});

const yes = { valueBoolean: true };
const no = { valueBoolean: false };

interface Case {
  readonly name: string;
  readonly items: QuestionnaireItem[];
  /** Every question item, answered or not (so both sides name each one). */
  readonly answers: QuestionnaireResponseItem[];
}

const CASES: Case[] = [
  {
    name: 'nested groups, a group condition and a condition inside it',
    items: [
      q('show', 'boolean'),
      q('detail', 'string'),
      group(
        'outer',
        [
          group('inner', [
            q('deep', 'string', { enableWhen: [when('detail', 'exists', { answerBoolean: true })] }),
            q('deep2', 'integer'),
          ]),
        ],
        { enableWhen: [when('show', '=', { answerBoolean: true })] },
      ),
    ],
    answers: [
      r('show', yes),
      r('detail'),
      rg(
        'outer',
        rg(
          'inner',
          r('deep', { valueString: 'answered, but detail is not' }),
          r('deep2', { valueInteger: 3 }),
        ),
      ),
    ],
  },
  {
    name: 'a disabled group disables what it holds, answered or not',
    items: [
      q('show', 'boolean'),
      group('outer', [q('inside', 'string'), q('inside2', 'string')], {
        enableWhen: [when('show', '=', { answerBoolean: true })],
      }),
    ],
    answers: [r('show', no), rg('outer', r('inside', { valueString: 'kept?' }), r('inside2'))],
  },
  {
    name: 'repeats: a condition reads its own instance; an item outside reads every instance',
    items: [
      group(
        'lesion',
        [
          q('malignant', 'boolean'),
          q('stage', 'string', { enableWhen: [when('malignant', '=', { answerBoolean: true })] }),
        ],
        { repeats: true },
      ),
      q('any-malignant', 'string', { enableWhen: [when('malignant', '=', { answerBoolean: true })] }),
    ],
    answers: [
      rg('lesion', r('malignant', no), r('stage', { valueString: 'T1' })),
      rg('lesion', r('malignant', yes), r('stage')),
      rg('lesion', r('malignant'), r('stage')),
      r('any-malignant'),
    ],
  },
  {
    name: 'enableWhenExpression on %resource and on %context',
    items: [
      q('age', 'integer'),
      q('adult', 'string', {
        extension: [expression("%resource.item.where(linkId='age').answer.value >= 18")],
      }),
      q('child', 'string', {
        extension: [expression("%resource.item.where(linkId='age').answer.value < 18")],
      }),
      q('self', 'integer', {
        extension: [expression('%context.answer.value.empty() or %context.answer.value > 0')],
      }),
    ],
    answers: [
      r('age', { valueInteger: 40 }),
      r('adult'),
      r('child', { valueString: 'no' }),
      r('self', { valueInteger: 0 }),
    ],
  },
  {
    name: 'enableBehavior any and all',
    items: [
      q('a', 'boolean'),
      q('b', 'boolean'),
      q('all', 'string', {
        enableBehavior: 'all',
        enableWhen: [when('a', '=', { answerBoolean: true }), when('b', '=', { answerBoolean: true })],
      }),
      q('any', 'string', {
        enableBehavior: 'any',
        enableWhen: [when('a', '=', { answerBoolean: true }), when('b', '=', { answerBoolean: true })],
      }),
    ],
    answers: [r('a', yes), r('b', no), r('all', { valueString: 'x' }), r('any')],
  },
  {
    name: 'a cycle: both items disabled, and what reads them',
    items: [
      q('a', 'boolean', { enableWhen: [when('b', 'exists', { answerBoolean: true })] }),
      q('b', 'boolean', { enableWhen: [when('a', 'exists', { answerBoolean: true })] }),
      q('c', 'string', { enableWhen: [when('a', '=', { answerBoolean: true })] }),
      q('d', 'string', { enableWhen: [when('a', 'exists', { answerBoolean: false })] }),
    ],
    answers: [r('a', yes), r('b', yes), r('c', { valueString: 'x' }), r('d')],
  },
  {
    name: 'a chain through a disabled answer, != on an unanswered question, numbers',
    items: [
      q('first', 'boolean'),
      q('second', 'integer', { enableWhen: [when('first', '=', { answerBoolean: true })] }),
      q('third', 'string', { enableWhen: [when('second', '>', { answerInteger: 5 })] }),
      q('unanswered', 'string'),
      q('not-x', 'string', { enableWhen: [when('unanswered', '!=', { answerString: 'x' })] }),
    ],
    answers: [
      r('first', no),
      r('second', { valueInteger: 9 }),
      r('third', { valueString: 'y' }),
      r('unanswered'),
      r('not-x'),
    ],
  },
];

interface QuestionPlace {
  readonly key: string;
  readonly path: string;
  readonly answered: boolean;
}

/** Every question item of a response with the engine's key (src/sdc/engine/tree.ts) and its FHIRPath. */
const placesOf = (items: QuestionnaireItem[], answers: QuestionnaireResponseItem[]): QuestionPlace[] => {
  const repeating = new Set<string>();
  const walkItems = (list: QuestionnaireItem[]) => {
    for (const item of list) {
      if (item.type === 'group' && item.repeats) repeating.add(item.linkId);
      walkItems(item.item ?? []);
    }
  };
  walkItems(items);
  const places: QuestionPlace[] = [];
  const walk = (list: QuestionnaireResponseItem[], prefix: string, path: string) => {
    const seen = new Map<string, number>();
    list.forEach((item, i) => {
      const itemPath = `${path}.item[${i}]`;
      if (item.item) {
        const k = seen.get(item.linkId) ?? 0;
        seen.set(item.linkId, k + 1);
        walk(item.item, repeating.has(item.linkId) ? `${prefix}${item.linkId}[${k}]/` : prefix, itemPath);
      } else
        places.push({
          key: `${prefix}${item.linkId}`,
          path: itemPath,
          answered: (item.answer ?? []).length > 0,
        });
    });
  };
  walk(answers, '', 'QuestionnaireResponse');
  return places;
};

for (const database of testDatabases.slice(0, 1)) {
  describe(`the editor and $validate agree on enablement, in a real browser, on ${database.name}`, function () {
    this.timeout(240_000);

    let browser: Browser;
    let app: TestApp;
    let patient: string;
    const contexts: BrowserContext[] = [];

    before(async function () {
      if (chromiumMissing()) {
        console.log(
          `      skipped: ${CHROMIUM} is missing (apt-get install chromium to run the browser tests)`,
        );
        this.skip();
      }
      app = await startTestApp(database, { start: new Date() });
      await seed(app);
      patient = await newPatient(app);
      browser = await launchBrowser();
    });
    after(async () => {
      for (const c of contexts) await c.close().catch(() => undefined);
      await browser?.close();
      await app?.close();
    });

    /** $validate's enablement of each question place: required ⇒ enabled, answered on a disabled item ⇒ disabled. */
    const validated = async (questionnaire: Questionnaire, response: QuestionnaireResponse) => {
      const res = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
        body: {
          resourceType: 'Parameters',
          parameter: [
            { name: 'resource', resource: { ...response, status: 'completed' } },
            { name: 'questionnaire', resource: questionnaire },
          ],
        },
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      const errors = ((res.body as any).issue as any[]).filter((i) => i.severity === 'error');
      const at = (code: string, path: string) =>
        errors.some((i) => i.code === code && i.expression?.[0] === path);
      return {
        errors,
        enabled: (p: QuestionPlace) => (p.answered ? !at('business-rule', p.path) : at('required', p.path)),
      };
    };

    for (const c of CASES)
      it(c.name, async () => {
        const url = `https://forms.example.org/Questionnaire/${unique('agree')}`;
        const questionnaire: Questionnaire = {
          resourceType: 'Questionnaire',
          url,
          status: 'active',
          item: c.items,
        };
        await create(app, questionnaire as unknown as Record<string, unknown>);
        const response: QuestionnaireResponse = {
          resourceType: 'QuestionnaireResponse',
          questionnaire: url,
          status: 'in-progress',
          subject: { reference: `Patient/${patient}` },
          item: c.answers,
        };
        const responseId = await create(app, response as unknown as Record<string, unknown>);
        const taskId = await create(app, {
          resourceType: 'Task',
          status: 'in-progress',
          intent: 'order',
          for: { reference: `Patient/${patient}` },
          focus: { reference: `QuestionnaireResponse/${responseId}` },
        });
        const places = placesOf(c.items, c.answers);
        const server = await validated(questionnaire, response);
        const expected = Object.fromEntries(places.map((p) => [p.key, server.enabled(p)]));

        const session = await newSession(
          app,
          sessionBody({ patient: Number(patient), deployment_mode: 'standalone' }),
        );
        const { context, page } = await signIn(
          browser,
          app,
          session,
          launchUrl(app, { task: `Task/${taskId}` }),
        );
        contexts.push(context);
        await engineIdle(page);
        const shown = async () =>
          Object.fromEntries(
            await page
              .locator('[data-key][data-type]:not([data-type="group"]):not([data-type="display"])')
              .evaluateAll((els) =>
                els.map((el) => [
                  (el as unknown as { dataset: { key: string } }).dataset.key,
                  el.closest('[hidden]') === null,
                ]),
              ),
          );
        expect(
          await shown(),
          `${c.name}: the editor vs $validate (${JSON.stringify(server.errors)})`,
        ).to.deep.equal(expected);
        // Some item of every case is enabled and some disabled: the comparison can tell them apart.
        expect(new Set(Object.values(expected)).size, c.name).to.equal(2);

        // What the page saves carries no answer on an item it hid, and every answer it stores is shown
        // when it opens again (an item whose expression reads its own answer may change: not compared).
        const saved = await clickAndNavigate(page, 'button[name=action][value=save]');
        expect(saved.all.at(-1)!.status()).to.equal(200);
        const stored = (await fhir(app, 'GET', `/QuestionnaireResponse/${responseId}`, { auth: GENERAL }))
          .body as QuestionnaireResponse;
        const again = await validated(questionnaire, stored);
        expect(
          again.errors.filter((i) => i.code === 'business-rule'),
          JSON.stringify(stored.item),
        ).to.deep.equal([]);
        await engineIdle(page);
        const reopened = await shown();
        for (const place of placesOf(c.items, stored.item ?? []))
          expect(reopened[place.key], `${place.key} is stored, so shown`).to.equal(true);
      });
  });
}
