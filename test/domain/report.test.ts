import { expect } from 'chai';
import type { ChangedData, CreatedData } from '../../src/domain/fhir/resource.js';
import {
  ReportChangedElsewhere,
  type ReportCommand,
  type ReportEvent,
  reportDecider,
} from '../../src/domain/report/report.js';
import { given } from '../support/given.js';

const AT = '2026-11-27T10:00:00.000Z';
const LATER = '2026-11-27T11:00:00.000Z';
const answers = (text: string) => ({
  resourceType: 'QuestionnaireResponse',
  questionnaire: 'https://forms.example.org/ct',
  subject: { reference: 'Patient/3' },
  item: [{ linkId: 'impression', answer: [{ valueString: text }] }],
});

const created: ReportEvent = {
  type: 'QuestionnaireResponseCreated',
  data: { id: 9, tenantId: 1, resource: { ...answers(''), status: 'in-progress' }, at: AT } as CreatedData,
};
const saved = (text: string): ReportEvent => ({
  type: 'QuestionnaireResponseUpdated',
  data: { id: 9, resource: { ...answers(text), status: 'in-progress' }, at: AT } as ChangedData,
});
const submitted: ReportEvent = {
  type: 'QuestionnaireResponseSubmitted',
  data: { id: 9, resource: { ...answers('final'), status: 'completed' }, at: AT, from: 'in-progress' },
};
const amended: ReportEvent = {
  type: 'QuestionnaireResponseAmended',
  data: {
    id: 9,
    resource: { ...answers('corrected'), status: 'amended' },
    at: LATER,
    from: 'completed',
    reason: 'wrong lobe',
    author: 'Practitioner/5',
  },
};

const command = <T extends ReportCommand['type']>(
  type: T,
  baseVersion: number,
  text: string,
  extra: Record<string, unknown> = {},
) => ({ type, responseId: 9, baseVersion, resource: answers(text), now: LATER, ...extra }) as ReportCommand;

describe('report decider (issue 32)', () => {
  it('counts versions and follows the status of the response events', () => {
    given(reportDecider, [created, saved('a'), submitted]).thenState({ status: 'completed', version: 3 });
    given(reportDecider, [created, saved('a'), submitted, amended]).thenState({
      status: 'amended',
      version: 4,
    });
    given(reportDecider, []).thenState({ status: 'none', version: 0 });
  });

  describe('SaveReport', () => {
    it('decides QuestionnaireResponseUpdated (in-progress) on the current version', () => {
      given(reportDecider, [created, saved('a')])
        .when(command('SaveReport', 2, 'b'))
        .then([
          {
            type: 'QuestionnaireResponseUpdated',
            data: { id: 9, resource: { ...answers('b'), status: 'in-progress' }, at: LATER },
          },
        ]);
    });

    it('refuses a save based on an older version: ReportChangedElsewhere (409) with the current version', () => {
      const refusal = given(reportDecider, [created, saved('a'), saved('b')])
        .when(command('SaveReport', 2, 'stale'))
        .thenThrows('ReportChangedElsewhere', 'conflict');
      expect(refusal).to.be.instanceOf(ReportChangedElsewhere);
      expect((refusal as ReportChangedElsewhere).currentVersion).to.equal(3);
      expect((refusal as ReportChangedElsewhere).baseVersion).to.equal(2);
    });

    it('refuses a base version from the future or not a number', () => {
      given(reportDecider, [created])
        .when(command('SaveReport', 5, 'x'))
        .thenThrows('ReportChangedElsewhere');
      given(reportDecider, [created])
        .when(command('SaveReport', Number.NaN, 'x'))
        .thenThrows('ReportChangedElsewhere');
    });

    it('refuses to save a signed-off report in place: ReportLocked (409)', () => {
      given(reportDecider, [created, submitted])
        .when(command('SaveReport', 2, 'x'))
        .thenThrows('ReportLocked', 'conflict');
      given(reportDecider, [created, submitted, amended])
        .when(command('SaveReport', 3, 'x'))
        .thenThrows('ReportLocked', 'conflict');
    });

    it('refuses without a response (404) and on a deleted one (410)', () => {
      given(reportDecider, [])
        .when(command('SaveReport', 0, 'x'))
        .thenThrows('ResourceNotFound', 'not_found');
      given(reportDecider, [created, { type: 'QuestionnaireResponseDeleted', data: { id: 9, at: AT } }])
        .when(command('SaveReport', 2, 'x'))
        .thenThrows('ResourceDeleted', 'gone');
    });
  });

  describe('SubmitReport', () => {
    it('decides QuestionnaireResponseSubmitted (completed) from in-progress, with its author', () => {
      given(reportDecider, [created, saved('a')])
        .when(command('SubmitReport', 2, 'final', { author: 'Practitioner/5' }))
        .then([
          {
            type: 'QuestionnaireResponseSubmitted',
            data: {
              id: 9,
              resource: { ...answers('final'), status: 'completed' },
              at: LATER,
              from: 'in-progress',
              author: 'Practitioner/5',
            },
          },
        ]);
    });

    it('refuses a second submit of a completed report (ReportLocked), and a stale one first as stale', () => {
      given(reportDecider, [created, submitted])
        .when(command('SubmitReport', 2, 'again'))
        .thenThrows('ReportLocked');
      given(reportDecider, [created, submitted])
        .when(command('SubmitReport', 1, 'again'))
        .thenThrows('ReportChangedElsewhere');
    });
  });

  describe('AmendReport', () => {
    it('decides QuestionnaireResponseAmended (amended) with the reason and the author', () => {
      given(reportDecider, [created, submitted])
        .when(command('AmendReport', 2, 'corrected', { reason: '  wrong lobe ', author: 'Practitioner/5' }))
        .then([amended]);
    });

    it('amends an amended report again', () => {
      given(reportDecider, [created, submitted, amended])
        .when(command('AmendReport', 3, 'again', { reason: 'typo' }))
        .then([
          {
            type: 'QuestionnaireResponseAmended',
            data: {
              id: 9,
              resource: { ...answers('again'), status: 'amended' },
              at: LATER,
              from: 'amended',
              reason: 'typo',
            },
          },
        ]);
    });

    it('refuses a blank reason (400 ReasonRequired)', () => {
      given(reportDecider, [created, submitted])
        .when(command('AmendReport', 2, 'x', { reason: '   ' }))
        .thenThrows('ReasonRequired', 'invalid');
    });

    it('refuses to amend an unfinished report, and a stale amendment', () => {
      given(reportDecider, [created, saved('a')])
        .when(command('AmendReport', 2, 'x', { reason: 'r' }))
        .thenThrows('ReportNotSignedOff', 'conflict');
      given(reportDecider, [created, submitted, amended])
        .when(command('AmendReport', 2, 'x', { reason: 'r' }))
        .thenThrows('ReportChangedElsewhere');
    });
  });

  describe('MarkReportEnteredInError', () => {
    it('decides QuestionnaireResponseEnteredInError with the reason; afterwards everything is refused', () => {
      const retracted: ReportEvent = {
        type: 'QuestionnaireResponseEnteredInError',
        data: {
          id: 9,
          resource: { ...answers('final'), status: 'entered-in-error' },
          at: LATER,
          from: 'completed',
          reason: 'wrong patient',
          author: 'Practitioner/5',
        },
      };
      given(reportDecider, [created, submitted])
        .when(
          command('MarkReportEnteredInError', 2, 'final', {
            reason: 'wrong patient',
            author: 'Practitioner/5',
          }),
        )
        .then([retracted]);
      const after = [created, submitted, retracted];
      given(reportDecider, after).thenState({ status: 'entered-in-error', version: 3 });
      for (const type of ['SaveReport', 'SubmitReport', 'AmendReport', 'MarkReportEnteredInError'] as const)
        given(reportDecider, after)
          .when(command(type, 3, 'x', { reason: 'r' }))
          .thenThrows('ReportLocked');
    });
  });
});
