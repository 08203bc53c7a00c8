/**
 * Every FHIR R5 core example of casebook's resource types, round-tripped (issue 35; the examples
 * come from the npm package `hl7.fhir.r5.examples`, a pinned devDependency, never committed).
 * Each example is created with `Prefer: return=OperationOutcome` and read back. It agrees when
 * what comes back equals what was sent (without `id` and `meta`, the server's), when the outcome
 * names every element that did not come back, or when a Questionnaire that repeats a linkId is
 * refused for it (que-2). References to casebook's types are pointed at resources created first
 * (the examples name `Patient/example`, which an integer-id server cannot hold). The agreement per
 * type is printed, and the run fails on any silent loss: a 2xx whose stored resource lacks an
 * element the outcome does not name. On PGlite (runtime under a minute).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { expect } from 'chai';
import { isResourceType, type RESOURCE_TYPES } from '../../src/domain/fhir/resource.js';
import { droppedElements } from '../../src/fhir/dropped.js';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { printAgreement } from './agreement.js';

const require = createRequire(import.meta.url);
const examplesDir = dirname(require.resolve('hl7.fhir.r5.examples/package.json'));
const version = JSON.parse(readFileSync(join(examplesDir, 'package.json'), 'utf8')).version as string;

/** The examples of casebook's types (ValueSet left out: casebook stores it for $expand only). */
const examples = readdirSync(examplesDir)
  .filter((f) => f.endsWith('.json') && f !== 'package.json' && !f.startsWith('.'))
  .map((f) => {
    try {
      return { file: f, resource: JSON.parse(readFileSync(join(examplesDir, f), 'utf8')) };
    } catch {
      return undefined;
    }
  })
  .filter(
    (e): e is { file: string; resource: Record<string, unknown> } =>
      e !== undefined &&
      typeof e.resource.resourceType === 'string' &&
      e.resource.resourceType !== 'ValueSet' &&
      isResourceType(e.resource.resourceType),
  );

/** Points every relative reference to one of casebook's types at the stored one of that type. */
const pointed = (value: unknown, stored: Record<string, string>): unknown => {
  if (Array.isArray(value)) return value.map((v) => pointed(v, stored));
  if (!value || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => {
      if (k === 'reference' && typeof v === 'string') {
        const [type, id] = v.split('/');
        if (id !== undefined && v.split('/').length === 2 && type && stored[type])
          return [k, `${type}/${stored[type]}`];
      }
      return [k, pointed(v, stored)];
    }),
  );
};

type Verdict = 'equal' | 'named' | 'que-2' | 'refused' | 'silent';

describe(`FHIR R5 core examples (hl7.fhir.r5.examples ${version}) round-tripped`, function () {
  this.timeout(120_000);
  let app: TestApp;
  const stored: Record<string, string> = {};
  const verdicts = new Map<string, Verdict[]>();
  const refusals: string[] = [];

  before(async () => {
    app = await startTestApp(testDatabases[0]!);
    await seed(app);
    const create = async (body: Record<string, unknown>) =>
      String((await fhir(app, 'POST', `/${body.resourceType}`, { body })).body.id);
    stored.Patient = await create({ resourceType: 'Patient' });
    stored.Practitioner = await create({ resourceType: 'Practitioner' });
    stored.Encounter = await create({
      resourceType: 'Encounter',
      status: 'planned',
      subject: { reference: `Patient/${stored.Patient}` },
    });
    stored.Medication = await create({ resourceType: 'Medication' });
    stored.QuestionnaireResponse = await create({
      resourceType: 'QuestionnaireResponse',
      questionnaire: 'https://example.org/q',
      status: 'in-progress',
    });
  });
  after(() => app?.close());

  it(`round-trips the ${examples.length} examples of casebook's types, or says why not`, async () => {
    for (const { file, resource } of examples) {
      const type = resource.resourceType as string;
      const body = pointed(resource, stored) as Record<string, unknown>;
      const res = await fhir(app, 'POST', `/${type}`, {
        body,
        headers: { Prefer: 'return=OperationOutcome' },
      });
      let verdict: Verdict;
      if (res.status === 201) {
        const location = res.headers.get('location')!;
        const read = await fhir(
          app,
          'GET',
          location.slice(location.indexOf(`/${type}/`)).split('/_history')[0]!,
        );
        const { id: _i, meta: _m, ...sent } = body;
        const { id: _j, meta: _n, ...back } = read.body;
        const named = new Set(res.body.issue.flatMap((i: { expression?: string[] }) => i.expression ?? []));
        const lost = droppedElements(type as (typeof RESOURCE_TYPES)[number], sent, back);
        verdict =
          JSON.stringify(back) === JSON.stringify(sent) ||
          (lost.length === 0 &&
            JSON.stringify(Object.keys(back).sort()) === JSON.stringify(Object.keys(sent).sort()))
            ? 'equal'
            : lost.length > 0 && lost.every((l) => named.has(l))
              ? 'named'
              : 'silent';
        if (verdict === 'silent') refusals.push(`${file}: lost ${lost.join(', ')} without a word`);
      } else {
        const text = JSON.stringify(res.body);
        verdict = type === 'Questionnaire' && /que-2/.test(text) ? 'que-2' : 'refused';
        if (verdict === 'refused')
          refusals.push(
            `${file}: ${res.status} ${res.body.issue
              .slice(0, 2)
              .map((i: any) => `${(i.expression ?? []).join()} ${i.diagnostics}`)
              .join('; ')}`,
          );
      }
      verdicts.set(type, [...(verdicts.get(type) ?? []), verdict]);
    }
    const rows = [...verdicts].map(([type, list]) => {
      const count = (v: Verdict) => list.filter((x) => x === v).length;
      return {
        type,
        cases: list.length,
        agree: count('equal') + count('named') + count('que-2'),
        equal: count('equal'),
        named: count('named'),
        'que-2': count('que-2'),
        refused: count('refused'),
        silent: count('silent'),
      };
    });
    console.log(`\n  hl7.fhir.r5.examples ${version}: agreement per type`);
    console.table(rows);
    if (process.env.R5_EXAMPLES_VERBOSE) console.log(refusals.join('\n'));
    const total = rows.reduce((n, r) => n + r.cases, 0);
    const agree = rows.reduce((n, r) => n + r.agree, 0);
    printAgreement({
      suite: "FHIR R5 core examples of casebook's types, round-tripped or refused with a reason",
      version: `hl7.fhir.r5.examples ${version}`,
      cases: total,
      agree,
      detail: `${rows.reduce((n, r) => n + r.silent, 0)} elements lost without a word`,
    });
    expect(total).to.equal(examples.length);
    // No silent loss: every element a 2xx did not store is named by its outcome.
    expect(
      rows.reduce((n, r) => n + r.silent, 0),
      refusals.filter((r) => r.includes('without a word')).join('\n'),
    ).to.equal(0);
  });
});
