/**
 * The SDC implementation guide's own example Questionnaires (npm `hl7.fhir.uv.sdc`, pinned in
 * devDependencies; its files are never committed), against a real casebook on PGlite (issue 35):
 * each is stored with POST /Questionnaire or refused with a 4xx that names its reason; each stored
 * one is populated ($populate, no launch context) and the populated response validated
 * ($validate). A modular form is assembled from the IG's modules on the way ($populate
 * assembles it). It prints the agreement: stored, populated and validated without an error
 * issue (the IG's examples are meant to be valid). It fails on any 5xx or an unnamed refusal.
 *
 * The IG is written for FHIR R4 while casebook stores R5: R4-only item types (`choice`,
 * `open-choice`) are refused by the R5 schema, and the printed reasons say so.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { FHIR_JSON, type FhirResponse } from '../support/fhir.js';
import { printAgreement } from './agreement.js';

const require = createRequire(import.meta.url);
const packageDir = dirname(require.resolve('hl7.fhir.uv.sdc/package.json'));
const { version } = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as { version: string };
const exampleDir = join(packageDir, 'example');
const examples = readdirSync(exampleDir)
  .filter((f) => f.startsWith('Questionnaire-') && f.endsWith('.json'))
  .sort()
  .map((file) => ({
    file,
    resource: JSON.parse(readFileSync(join(exampleDir, file), 'utf8')) as Record<string, unknown>,
  }));

/** An example as a create body: without the server-assigned parts and the R4 narrative. */
const createBody = (resource: Record<string, unknown>) => {
  const { id: _id, meta: _meta, text: _text, ...rest } = resource;
  return rest;
};

describe('conformance: SDC IG example Questionnaires', function () {
  this.timeout(600_000);
  const database = testDatabases[0]!;
  let app: TestApp;

  before(async () => {
    app = await startTestApp(database);
    await seed(app);
  });
  after(() => app?.close());

  // Raw requests: test/support/fhir.ts would fail on a response that is not valid R5, and an R4
  // example stored as given is what this runner reports on, not what it asserts.
  const post = async (base: string, path: string, body: unknown): Promise<FhirResponse> => {
    const res = await fetch(`${base.replace('localhost', '127.0.0.1')}${path}`, {
      method: 'POST',
      headers: {
        Accept: FHIR_JSON,
        'Content-Type': FHIR_JSON,
        Authorization: (await import('../support/app.js')).GENERAL as string,
      },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
  };
  const sdc = (path: string, body: unknown) => post(app.casebook.config.sdcUrl, path, body);

  it(`stores every example or names why not; populates and validates the stored ones (${database.name})`, async () => {
    expect(examples.length).to.be.greaterThan(10);
    const lines: string[] = [];
    let stored = 0;
    let agree = 0;
    const ids = new Map<string, string>();
    for (const { file, resource } of examples) {
      const res = await post(app.casebook.config.fhirUrl, '/Questionnaire', createBody(resource));
      expect(res.status, `${file}: ${JSON.stringify(res.body).slice(0, 300)}`).to.be.below(500);
      if (res.status !== 201) {
        expect(res.status, file).to.be.within(400, 499);
        const reason = res.body?.issue?.[0]?.diagnostics;
        expect(reason, `${file} refused without a reason`).to.be.a('string').and.not.equal('');
        lines.push(`    refused  ${file}: ${res.status} ${String(reason).slice(0, 160)}`);
        continue;
      }
      stored++;
      ids.set(file, res.body.id as string);
    }
    for (const [file, id] of ids) {
      const populated = await sdc(`/Questionnaire/${id}/$populate`, {
        resourceType: 'Parameters',
        parameter: [],
      });
      expect(populated.status, `${file} $populate`).to.be.below(500);
      if (populated.status !== 200) {
        lines.push(
          `    populate ${file}: ${populated.status} ${String(populated.body?.issue?.[0]?.diagnostics).slice(0, 160)}`,
        );
        continue;
      }
      const response = populated.body.parameter.find((p: { name: string }) => p.name === 'response').resource;
      const validated = await sdc('/QuestionnaireResponse/$validate', response);
      expect(validated.status, `${file} $validate`).to.be.below(500);
      const errors = (validated.body?.issue ?? []).filter(
        (i: { severity: string }) => i.severity === 'error',
      );
      if (validated.status === 200 && errors.length === 0) agree++;
      else
        lines.push(
          `    validate ${file}: ${validated.status} ${errors
            .map((e: { diagnostics: string }) => e.diagnostics)
            .join(' | ')
            .slice(0, 200)}`,
        );
    }
    printAgreement({
      suite: 'SDC IG example Questionnaires: stored, $populate, $validate without errors',
      version: `hl7.fhir.uv.sdc ${version}`,
      cases: examples.length,
      agree,
      detail: `${stored} stored; ${examples.length - stored} refused, each with its reason below`,
    });
    for (const line of lines) console.log(line);
  });
});
