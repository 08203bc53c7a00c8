/**
 * The Questionnaire module of FHIR/fhir-test-cases (issue 35), run against casebook's form engine:
 * each case whose `module` is `questionnaire` validates a QuestionnaireResponse against its
 * supporting Questionnaire with $validate's engine (src/sdc/validate.ts, which also applies the
 * Questionnaire's own rules), or a Questionnaire with the rules of the write path
 * (src/sdc/engine/definition-rules.ts). Its error count is compared with the manifest's (the Java
 * reference validator's `errorCount`, else brianpos's .NET `errorCount + fatalCount`): the case
 * agrees when both find errors or both find none. (casebook makes every problem of an in-progress
 * response a warning; the reference validators keep invalid values errors and downgrade only
 * what an unfinished response may lack: such cases disagree.) The suite is not on npm and is never committed:
 * point FHIR_TEST_CASES_DIR at a local copy of the repository; without it the runner prints that
 * it was skipped. It prints the agreement; it fails only if the engine throws.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { expect } from 'chai';
import { questionnaireProblems } from '../../src/sdc/engine/definition-rules.js';
import type { Questionnaire, QuestionnaireResponse } from '../../src/sdc/types.js';
import { validateResponse } from '../../src/sdc/validate.js';
import { printAgreement } from './agreement.js';

interface Expectation {
  readonly errorCount?: number;
  readonly fatalCount?: number;
}
interface TestCase {
  readonly name: string;
  readonly file: string;
  readonly module?: string;
  readonly version?: string;
  readonly supporting?: readonly string[];
  readonly 'use-test'?: boolean;
  readonly java?: Expectation;
  readonly 'dotnet-brianpos'?: Expectation;
}

/** The commit of a git checkout (its HEAD, short), or 'local copy' when it is not one. */
const checkoutOf = (dir: string): string => {
  try {
    const head = readFileSync(join(dir, '.git', 'HEAD'), 'utf8').trim();
    const commit = head.startsWith('ref: ')
      ? readFileSync(join(dir, '.git', head.slice(5)), 'utf8').trim()
      : head;
    return commit.slice(0, 8);
  } catch {
    return 'local copy';
  }
};

const root = process.env.FHIR_TEST_CASES_DIR;
const validatorDir = root ? join(root, 'validator') : '';

/** Every manifest.json under validator/ that holds Questionnaire-module cases. */
const manifests = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : manifests(path);
    return entry.name === 'manifest.json' ? [path] : [];
  });

const expectedErrors = (c: TestCase): number | undefined => {
  if (c.java?.errorCount !== undefined) return c.java.errorCount;
  const dotnet = c['dotnet-brianpos'];
  return dotnet ? (dotnet.errorCount ?? 0) + (dotnet.fatalCount ?? 0) : undefined;
};

const read = (file: string): Record<string, unknown> | undefined => {
  const path = join(validatorDir, file);
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>) : undefined;
};

/** casebook's error count for one case; undefined when the case is not about a Questionnaire(Response). */
const ourErrors = async (c: TestCase): Promise<number | undefined> => {
  const resource = read(c.file);
  if (!resource) return undefined;
  if (resource.resourceType === 'Questionnaire')
    return questionnaireProblems(resource).filter((p) => p.severity === 'error').length;
  if (resource.resourceType !== 'QuestionnaireResponse') return undefined;
  const supporting = (c.supporting ?? []).map(read).filter((r) => r?.resourceType === 'Questionnaire');
  const canonical = String(resource.questionnaire ?? '').split('|')[0];
  const questionnaire = (supporting.find((q) => q?.url === canonical) ?? supporting[0]) as
    | Questionnaire
    | undefined;
  if (!questionnaire) return undefined;
  const outcome = await validateResponse(resource as unknown as QuestionnaireResponse, questionnaire);
  return outcome.issue.filter((i) => i.severity === 'error' || i.severity === 'fatal').length;
};

describe('conformance: fhir-test-cases, Questionnaire module', function () {
  this.timeout(300_000);

  it('agrees with the manifest on which cases have errors (or says it was skipped)', async function () {
    if (!root || !existsSync(validatorDir)) {
      console.log(
        '  fhir-test-cases: SKIPPED — set FHIR_TEST_CASES_DIR to a local copy of FHIR/fhir-test-cases',
      );
      this.skip();
    }
    const cases = manifests(validatorDir).flatMap((path) => {
      const manifest = JSON.parse(readFileSync(path, 'utf8')) as { 'test-cases'?: TestCase[] };
      return (manifest['test-cases'] ?? []).filter(
        (c) => c.module === 'questionnaire' && c['use-test'] !== false,
      );
    });
    let compared = 0;
    let agree = 0;
    let exact = 0;
    const disagreements: string[] = [];
    for (const c of cases) {
      const expected = expectedErrors(c);
      const ours = await ourErrors(c);
      if (expected === undefined || ours === undefined) continue;
      compared++;
      if (ours === expected) exact++;
      if (ours > 0 === expected > 0) agree++;
      else
        disagreements.push(
          `${c.name} (${relative(validatorDir, join(validatorDir, c.file))}): expected ${expected} errors, casebook ${ours}`,
        );
    }
    printAgreement({
      suite: 'fhir-test-cases, Questionnaire module: valid/invalid as the manifest says',
      version: `FHIR/fhir-test-cases ${checkoutOf(root ?? '')}`,
      cases: compared,
      agree,
      detail: `${cases.length} cases, ${compared} comparable; ${exact} with the same error count`,
    });
    for (const line of disagreements) console.log(`    disagrees: ${line}`);
    expect(compared).to.be.greaterThan(0);
  });
});
