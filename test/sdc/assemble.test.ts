/**
 * SDC modular forms (src/sdc/assemble.ts; issue 35): subQuestionnaire replaced by the
 * sub-Questionnaire's items, linkIdPrefix, assembleContext, extensions moved, assembledFrom, and
 * the errors (unknown, self-including, missing context) naming the display item.
 */
import { expect } from 'chai';
import { AssemblyFailed, assembleQuestionnaire, needsAssembly } from '../../src/sdc/assemble.js';
import type { CanonicalResolver, Json, Questionnaire } from '../../src/sdc/types.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';
const VARIABLE = 'http://hl7.org/fhir/StructureDefinition/variable';
const BASE = 'https://forms.example.org/Questionnaire';

const variable = (name: string, expression: string) => ({
  url: VARIABLE,
  valueExpression: { name, language: 'text/fhirpath', expression },
});
const subItem = (linkId: string, canonical: string) => ({
  linkId,
  type: 'display',
  text: 'Unable to resolve the sub-questionnaire',
  extension: [{ url: `${SDC}sdc-questionnaire-subQuestionnaire`, valueCanonical: canonical }],
});
const context = (name: string) => ({ url: `${SDC}sdc-questionnaire-assembleContext`, valueString: name });

const name: Questionnaire = {
  resourceType: 'Questionnaire',
  url: `${BASE}/name`,
  version: '1',
  status: 'active',
  extension: [
    { url: `${SDC}sdc-questionnaire-assemble-expectation`, valueCode: 'assemble-child' },
    context('linkIdPrefix'),
    variable('given', "'x'"),
  ],
  item: [
    { linkId: '1', text: 'Given', type: 'string' },
    {
      linkId: '2',
      text: 'Family',
      type: 'string',
      enableWhen: [{ question: '1', operator: 'exists', answerBoolean: true }],
    },
  ],
};
const contact: Questionnaire = {
  resourceType: 'Questionnaire',
  url: `${BASE}/contact`,
  version: '1',
  status: 'active',
  extension: [context('linkIdPrefix'), context('person')],
  item: [
    {
      linkId: '1',
      type: 'group',
      extension: [variable('linkIdPrefix', "%linkIdPrefix + 'name.'")],
      item: [subItem('1.1', `${BASE}/name|1`)],
    },
    { linkId: '2', text: 'Phone', type: 'string' },
  ],
};
const root: Questionnaire = {
  resourceType: 'Questionnaire',
  id: '7',
  url: `${BASE}/root`,
  version: '3',
  status: 'active',
  extension: [
    { url: `${SDC}sdc-questionnaire-assemble-expectation`, valueCode: 'assemble-root' },
    variable('person', "'someone'"),
  ],
  item: [
    {
      linkId: 'a',
      type: 'group',
      extension: [variable('linkIdPrefix', "'patient.'")],
      item: [subItem('a.1', `${BASE}/name|1`)],
    },
    {
      linkId: 'b',
      type: 'group',
      extension: [variable('linkIdPrefix', "'contact.'")],
      item: [subItem('b.1', `${BASE}/contact`)],
    },
  ],
};

const resolverOf =
  (...forms: Questionnaire[]): CanonicalResolver =>
  async (type, canonical) => {
    const [url, version] = canonical.split('|');
    return type === 'Questionnaire'
      ? (forms.find((f) => f.url === url && (!version || f.version === version)) as Json | undefined)
      : undefined;
  };

const failure = async (promise: Promise<unknown>): Promise<AssemblyFailed> => {
  try {
    await promise;
  } catch (error) {
    if (error instanceof AssemblyFailed) return error;
    throw error;
  }
  throw new Error('expected AssemblyFailed');
};

describe('assembleQuestionnaire (SDC modular forms)', () => {
  it('tells a form that needs assembling from one that does not', () => {
    expect(needsAssembly(root)).to.equal(true);
    expect(needsAssembly({ ...root, extension: [], item: [{ linkId: 'x', type: 'string' }] })).to.equal(
      false,
    );
  });

  it('inlines nested sub-Questionnaires with their linkId prefixes and moves their extensions onto the parent item', async () => {
    const { questionnaire, issues } = await assembleQuestionnaire(root, resolverOf(name, contact));
    expect(issues).to.deep.equal([]);
    const [a, b] = questionnaire.item!;
    expect(a!.item!.map((i) => i.linkId)).to.deep.equal(['patient.1', 'patient.2']);
    expect(a!.item![1]!.enableWhen).to.deep.equal([
      { question: 'patient.1', operator: 'exists', answerBoolean: true },
    ]);
    expect(b!.item!.map((i) => i.linkId)).to.deep.equal(['contact.1', 'contact.2']);
    expect(b!.item![0]!.item!.map((i) => i.linkId)).to.deep.equal(['contact.name.1', 'contact.name.2']);
    // The name module's variable moved onto the group that held its display item; its assembly-only extensions did not.
    expect(a!.extension!.map((e) => e.url)).to.deep.equal([VARIABLE, VARIABLE]);
    expect(questionnaire.version).to.equal('3-assembled');
    expect(questionnaire.id).to.equal(undefined);
    const urls = questionnaire.extension!.map(
      (e) => `${e.url.split('/').pop()} ${String(e.valueCanonical ?? e.valueCode ?? '')}`,
    );
    expect(urls).to.include(`sdc-questionnaire-assembledFrom ${BASE}/name|1`);
    expect(urls).to.include(`sdc-questionnaire-assembledFrom ${BASE}/contact|1`);
    expect(urls.some((u) => u.startsWith('sdc-questionnaire-assemble-expectation'))).to.equal(false);
    expect(needsAssembly(questionnaire)).to.equal(false);
  });

  it('refuses an unknown sub-Questionnaire, naming the display item', async () => {
    const error = await failure(assembleQuestionnaire(root, resolverOf(name)));
    expect(error.issues).to.have.length(1);
    expect(error.issues[0]).to.deep.include({
      code: 'not-found',
      expression: ['Questionnaire.item[1].item[0]'],
    });
    expect(error.issues[0]!.diagnostics).to.include(`${BASE}/contact`);
  });

  it('refuses a sub-Questionnaire whose assembleContext is not defined where it is inserted', async () => {
    const bare = { ...root, extension: [], item: [subItem('x', `${BASE}/contact`)] };
    const error = await failure(assembleQuestionnaire(bare, resolverOf(name, contact)));
    const diagnostics = error.issues.map((i) => i.diagnostics).join('\n');
    expect(diagnostics).to.include('"person"').and.include('"linkIdPrefix"');
    expect(error.issues[0]!.expression).to.deep.equal(['Questionnaire.item[0]']);
  });

  it('refuses a sub-Questionnaire that includes itself', async () => {
    const loop: Questionnaire = {
      resourceType: 'Questionnaire',
      url: `${BASE}/loop`,
      version: '1',
      status: 'active',
      item: [subItem('l', `${BASE}/loop`)],
    };
    const error = await failure(assembleQuestionnaire(loop, resolverOf(loop)));
    expect(error.issues[0]!.diagnostics).to.include('includes itself');
  });

  it('warns when the assembled form breaks a Questionnaire rule (duplicate linkIds without prefixes)', async () => {
    const twice: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      extension: [variable('linkIdPrefix', "''")],
      item: [subItem('s1', `${BASE}/name`), subItem('s2', `${BASE}/name`)],
    };
    const { questionnaire, issues } = await assembleQuestionnaire(twice, resolverOf(name));
    expect(questionnaire.item!.map((i) => i.linkId)).to.deep.equal(['1', '2', '1', '2']);
    expect(issues.map((i) => `${i.severity} ${i.diagnostics.slice(0, 40)}`)[0]).to.match(
      /^warning the assembled Questionnaire breaks que-2/,
    );
  });
});
