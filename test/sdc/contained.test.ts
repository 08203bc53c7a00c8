/**
 * Contained resources of a QuestionnaireResponse in $validate (src/sdc/validate.ts
 * `containedProblems`; issue 35; R5 Resource.contained and invariants dom-2, dom-3, dom-4): an
 * answer's `#id` must name a contained resource; contained resources have ids, do not nest, carry no
 * version metadata and are referenced from the response. Over HTTP (stored as sent, a contained
 * Questionnaire and its sibling ValueSet used by $validate): test/http/sdc/contained.test.ts.
 */
import { expect } from 'chai';
import type { Questionnaire, QuestionnaireResponse } from '../../src/sdc/types.js';
import { validateResponse } from '../../src/sdc/validate.js';

const form: Questionnaire = {
  resourceType: 'Questionnaire',
  url: 'https://forms.example.org/Questionnaire/contained',
  status: 'active',
  item: [{ linkId: 'who', text: 'Who', type: 'reference', repeats: true }],
};
const response = (contained: unknown[], ...references: string[]): QuestionnaireResponse => ({
  resourceType: 'QuestionnaireResponse',
  questionnaire: form.url as string,
  status: 'completed',
  contained: contained as never,
  item: [
    { linkId: 'who', answer: references.map((reference) => ({ valueReference: { reference } })) },
  ] as never,
});
const issues = async (qr: QuestionnaireResponse) =>
  (await validateResponse(qr, form)).issue.map((i) => `${i.severity} ${i.code} ${i.expression?.[0] ?? ''}`);

describe('contained resources of a QuestionnaireResponse in $validate (issue 35)', () => {
  it('accepts an answer naming a contained resource', async () => {
    expect(await issues(response([{ resourceType: 'Patient', id: 'p1' }], '#p1'))).to.deep.equal([
      'information informational ',
    ]);
  });

  it('refuses an answer naming a resource the response does not contain', async () => {
    expect(await issues(response([{ resourceType: 'Patient', id: 'p1' }], '#p1', '#p2'))).to.deep.equal([
      'error not-found QuestionnaireResponse.item[0].answer[1].valueReference',
    ]);
  });

  it('refuses a contained resource without id, nested contained resources and version metadata, and warns about one nothing refers to', async () => {
    const outcome = await issues(
      response(
        [
          { resourceType: 'Patient' },
          { resourceType: 'Patient', id: 'p1', contained: [{ resourceType: 'Patient', id: 'x' }] },
          { resourceType: 'Patient', id: 'p2', meta: { versionId: '3' } },
          { resourceType: 'Observation', id: 'lonely', status: 'final', code: { text: 'x' } },
        ],
        '#p1',
        '#p2',
      ),
    );
    expect(outcome).to.deep.equal([
      'error required QuestionnaireResponse.contained[0]',
      'error invariant QuestionnaireResponse.contained[1].contained',
      'error invariant QuestionnaireResponse.contained[2].meta',
      'warning invariant QuestionnaireResponse.contained[3]',
    ]);
  });
});
