/**
 * The R5 JSON format lets every primitive element carry `_element` (extensions of the value); the
 * official schema forgets it for arrays of canonical (src/fhir/r5-schema.ts `addPrimitiveExtensions`;
 * issue 35: the SDC IG's derivation example uses `Questionnaire._derivedFrom`).
 */
import { expect } from 'chai';
import { r5SchemaIssues } from '../../src/fhir/r5-schema.js';

describe('R5 schema: primitive extensions', () => {
  it('accepts _derivedFrom beside derivedFrom on a Questionnaire, and still refuses an unknown element', () => {
    const questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      derivedFrom: ['https://forms.example.org/Questionnaire/parent'],
      _derivedFrom: [
        {
          extension: [
            {
              url: 'http://hl7.org/fhir/StructureDefinition/questionnaire-derivationType',
              valueCoding: {
                system: 'http://hl7.org/fhir/questionnaire-derivationType',
                code: 'compliesWith',
              },
            },
          ],
        },
      ],
    };
    expect(r5SchemaIssues('Questionnaire', questionnaire)).to.deep.equal([]);
    expect(
      r5SchemaIssues('Questionnaire', { ...questionnaire, _colour: {} }).map((i) => i.path),
    ).to.deep.equal([['_colour']]);
  });
});
