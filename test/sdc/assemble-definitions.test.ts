/**
 * $assemble of items carrying `definition` (src/sdc/assemble-definitions.ts; issue 35; SDC IG
 * "Modular Forms": Data Element-based Questionnaires, Questionnaire Library Referencing): the IG's
 * own modular example (npm hl7.fhir.uv.sdc, never committed) against the metadata its assembled
 * example shows, a library item by `Questionnaire#linkId`, and the errors and warnings SDC asks for.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { expect } from 'chai';
import { AssemblyFailed, assembleQuestionnaire } from '../../src/sdc/assemble.js';
import type { DefinitionResolver, Json, Questionnaire } from '../../src/sdc/types.js';

const require = createRequire(import.meta.url);
const sdcDir = dirname(require.resolve('hl7.fhir.uv.sdc/package.json'));
const load = (file: string): Json => JSON.parse(readFileSync(join(sdcDir, file), 'utf8')) as Json;
const library = load('StructureDefinition-SdcQuestionLibrary.json');
const modules = [
  'example/Questionnaire-sdc-modular-name.json',
  'example/Questionnaire-sdc-modular-contact.json',
].map(load);
const root = load('example/Questionnaire-sdc-modular-root.json') as unknown as Questionnaire;
const expected = (load('example/Parameters-sdc-modular-root-assembled.json').parameter as Json[])[0]!
  .resource as Questionnaire;

const byUrl = (canonical: string) => canonical.split('|')[0];
const resolveQuestionnaire = async (_type: string, canonical: string) =>
  modules.find((m) => m.url === byUrl(canonical));
const resolveDefinition: DefinitionResolver = async (type, canonical) =>
  type === 'StructureDefinition'
    ? byUrl(canonical) === library.url
      ? library
      : undefined
    : resolveQuestionnaire(type, canonical);

const itemOf = (q: Questionnaire, linkId: string): Json | undefined => {
  const find = (items: unknown): Json | undefined => {
    for (const item of (items ?? []) as Json[]) {
      if (item.linkId === linkId) return item;
      const inner = find(item.item);
      if (inner) return inner;
    }
    return undefined;
  };
  return find(q.item);
};
const extensionUrls = (item: Json | undefined) => ((item?.extension ?? []) as Json[]).map((e) => e.url);

describe('$assemble: item definitions (issue 35, SDC modular forms)', () => {
  it("takes the IG example's text, answerValueSet, maxLength and value limits from its StructureDefinition, as the IG's assembled example shows", async () => {
    const { questionnaire, issues } = await assembleQuestionnaire(root, resolveQuestionnaire, {
      resolveDefinition,
    });
    for (const [linkId, keys] of [
      ['1', ['text']],
      ['2', ['text']],
      ['3', ['text', 'answerValueSet']],
      ['4', ['text']],
      ['patientname.2', ['maxLength']],
      ['patientname.3', ['maxLength']],
    ] as const)
      for (const key of keys)
        expect(itemOf(questionnaire, linkId)?.[key], `${linkId}.${key}`).to.deep.equal(
          itemOf(expected, linkId)?.[key],
        );
    expect(extensionUrls(itemOf(questionnaire, '2'))).to.include.members(
      extensionUrls(itemOf(expected, '2')),
    );
    // The IG's example generates group 4's questions from the element's children; casebook says it does not.
    const diagnostics = issues.map((i) => i.diagnostics);
    expect(diagnostics.some((d) => /group '4': questions are not generated/.test(d ?? ''))).to.equal(true);
    // The contact module's definition names a library that does not exist: a warning, as in the IG's outcome.
    expect(
      issues.some(
        (i) =>
          i.severity === 'warning' &&
          /non-existent-library#Stuff\.phone could not be resolved/.test(i.diagnostics ?? ''),
      ),
    ).to.equal(true);
  });

  it('takes a library item by Questionnaire#linkId, keeps what the item has and warns where they differ', async () => {
    const lib = {
      resourceType: 'Questionnaire',
      url: 'https://forms.example.org/Questionnaire/library',
      status: 'active',
      item: [
        {
          linkId: 'smoker',
          text: 'Do you smoke?',
          type: 'coding',
          required: true,
          answerOption: [{ valueCoding: { code: 'y' } }, { valueCoding: { code: 'n' } }],
          item: [{ linkId: 'packs', text: 'Packs a day', type: 'integer' }],
        },
      ],
    };
    const form: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      item: [{ linkId: 'smoking', type: 'coding', required: false, definition: `${lib.url}#smoker` }],
    };
    const { questionnaire, issues } = await assembleQuestionnaire(form, async (_t, c) =>
      c === lib.url ? lib : undefined,
    );
    const item = questionnaire.item![0]!;
    expect(item.text).to.equal('Do you smoke?');
    expect(item.required).to.equal(false);
    expect(item.answerOption).to.have.length(2);
    expect(item.item?.map((i) => i.linkId)).to.deep.equal(['packs']);
    expect(issues.map((i) => i.diagnostics)).to.include(
      `item 'smoking' keeps its own required; its definition ${lib.url}#smoker says true`,
    );
  });

  it('fails when the definition resolves but its element does not; an unresolved definition is a warning naming what the item lacks', async () => {
    const failure = await assembleQuestionnaire(
      {
        resourceType: 'Questionnaire',
        status: 'active',
        item: [
          { linkId: 'a', text: 'A', type: 'string', definition: `${library.url}#SdcQuestionLibrary.nothing` },
        ],
      },
      resolveQuestionnaire,
      { resolveDefinition },
    ).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).to.be.instanceOf(AssemblyFailed);
    expect((failure as AssemblyFailed).issues[0]!.expression).to.deep.equal([
      'Questionnaire.item[0].definition',
    ]);
    expect((failure as AssemblyFailed).message).to.match(/has no element SdcQuestionLibrary\.nothing/);
    const { issues } = await assembleQuestionnaire(
      {
        resourceType: 'Questionnaire',
        status: 'active',
        item: [
          {
            linkId: 'b',
            type: 'string',
            definition: 'https://nowhere.example.org/StructureDefinition/X#X.b',
          },
          {
            linkId: 'c',
            text: 'C',
            type: 'coding',
            definition: 'https://nowhere.example.org/StructureDefinition/X#X.c',
          },
        ],
      },
      resolveQuestionnaire,
      { resolveDefinition },
    );
    expect(
      issues.map((i) => [
        i.severity,
        i.code,
        i.expression?.[0],
        /left without (text|an answer list)/.exec(i.diagnostics ?? '')?.[1],
      ]),
    ).to.deep.equal([
      ['warning', 'incomplete', 'Questionnaire.item[0].definition', 'text'],
      ['warning', 'incomplete', 'Questionnaire.item[1].definition', 'an answer list'],
    ]);
  });
});
