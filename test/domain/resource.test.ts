import { expect } from 'chai';
import {
  type ChangedData,
  type Content,
  type CreatedData,
  EVENT_NAMES,
  RESOURCE_TYPES,
  type ResourceCommand,
  type ResourceEvent,
  type ResourceType,
  resourceDecider,
  resourceEventKind,
  resourceStream,
} from '../../src/domain/fhir/resource.js';
import { given } from '../support/given.js';

const CREATED_AT = '2025-03-04T09:30:00.000Z';
const UPDATED_AT = '2025-03-04T10:00:00.000Z';
const LATER = '2025-03-04T11:00:00.000Z';
const MRN = { system: 'urn:oid:1.2.276.0.76.4.8', value: 'P-000123' };
const KVID = { system: 'http://fhir.de/sid/gkv/kvid-10', value: 'A123456780' };

const create = (resource: Content, extra: { project?: string; author?: string } = {}): ResourceCommand => ({
  type: 'CreateResource',
  id: 12,
  tenantId: 7,
  resource,
  now: CREATED_AT,
  ...extra,
});
const update = (resource: Content, now = UPDATED_AT): ResourceCommand => ({
  type: 'UpdateResource',
  resource,
  now,
});
const remove = (now = LATER): ResourceCommand => ({ type: 'DeleteResource', now });

const created = (
  resourceType: ResourceType,
  resource: Content,
  extra: { project?: string; author?: string } = {},
): ResourceEvent => ({
  type: EVENT_NAMES[resourceType].created,
  data: { id: 12, tenantId: 7, resource, at: CREATED_AT, ...extra } satisfies CreatedData,
});
const changed = (type: string, resource: Content, at = UPDATED_AT, from?: string): ResourceEvent => ({
  type,
  data: { id: 12, resource, at, ...(from !== undefined ? { from } : {}) } satisfies ChangedData,
});
const deleted = (resourceType: ResourceType, at = LATER): ResourceEvent => ({
  type: EVENT_NAMES[resourceType].deleted,
  data: { id: 12, at },
});

/** A plausible content of each type (what a client PUTs without resourceType/id/meta). */
const CONTENT: Record<ResourceType, Content> = {
  Patient: { identifier: [MRN], name: [{ family: 'Muster', given: ['Erika'] }] },
  Encounter: { identifier: [MRN], status: 'in-progress', subject: { reference: 'Patient/3' } },
  Practitioner: { identifier: [MRN], name: [{ family: 'Arzt' }] },
  Task: { status: 'requested', intent: 'order', for: { reference: 'Patient/3' } },
  Questionnaire: { url: 'https://example.org/q/phq-9', status: 'active' },
  QuestionnaireResponse: {
    questionnaire: 'https://example.org/q/phq-9',
    status: 'in-progress',
    subject: { reference: 'Patient/3' },
  },
  ValueSet: { url: 'https://example.org/vs/severity', status: 'active' },
  Observation: { status: 'final', code: { text: 'weight' }, subject: { reference: 'Patient/3' } },
  Condition: { subject: { reference: 'Patient/3' }, code: { text: 'asthma' } },
  MedicationStatement: { status: 'recorded', medication: { concept: { text: 'salbutamol' } } },
  Medication: { code: { text: 'salbutamol' }, status: 'active' },
  AllergyIntolerance: { patient: { reference: 'Patient/3' }, code: { text: 'peanut' } },
  Immunization: { status: 'completed', vaccineCode: { text: 'MMR' }, patient: { reference: 'Patient/3' } },
  DocumentReference: { status: 'current', content: [{ attachment: { title: 'letter' } }] },
};

const EXPECTED_NAMES: Record<ResourceType, readonly [string, string, string, string?]> = {
  Patient: ['PatientRegistered', 'PatientUpdated', 'PatientDeleted'],
  Encounter: ['EncounterRegistered', 'EncounterUpdated', 'EncounterDeleted'],
  Practitioner: ['PractitionerRegistered', 'PractitionerUpdated', 'PractitionerDeleted'],
  Task: ['TaskCreated', 'TaskUpdated', 'TaskDeleted', 'TaskStatusChanged'],
  Questionnaire: ['QuestionnaireCreated', 'QuestionnaireUpdated', 'QuestionnaireDeleted'],
  QuestionnaireResponse: [
    'QuestionnaireResponseCreated',
    'QuestionnaireResponseUpdated',
    'QuestionnaireResponseDeleted',
    'QuestionnaireResponseSubmitted',
  ],
  ValueSet: ['ValueSetCreated', 'ValueSetUpdated', 'ValueSetDeleted'],
  Observation: ['ObservationCreated', 'ObservationUpdated', 'ObservationDeleted'],
  Condition: ['ConditionCreated', 'ConditionUpdated', 'ConditionDeleted'],
  MedicationStatement: [
    'MedicationStatementCreated',
    'MedicationStatementUpdated',
    'MedicationStatementDeleted',
  ],
  Medication: ['MedicationCreated', 'MedicationUpdated', 'MedicationDeleted'],
  AllergyIntolerance: ['AllergyIntoleranceCreated', 'AllergyIntoleranceUpdated', 'AllergyIntoleranceDeleted'],
  Immunization: ['ImmunizationCreated', 'ImmunizationUpdated', 'ImmunizationDeleted'],
  DocumentReference: ['DocumentReferenceCreated', 'DocumentReferenceUpdated', 'DocumentReferenceDeleted'],
};

describe('resource decider', () => {
  it('knows exactly the resource types casebook stores', () => {
    expect([...RESOURCE_TYPES]).to.deep.equal([
      'Patient',
      'Encounter',
      'Practitioner',
      'Task',
      'Questionnaire',
      'QuestionnaireResponse',
      'ValueSet',
      'Observation',
      'Condition',
      'MedicationStatement',
      'Medication',
      'AllergyIntolerance',
      'Immunization',
      'DocumentReference',
    ]);
  });

  for (const resourceType of RESOURCE_TYPES) {
    const decider = resourceDecider(resourceType);
    const [createdName, updatedName, deletedName] = EXPECTED_NAMES[resourceType];
    const content = CONTENT[resourceType];
    const changedContent: Content = { ...content, identifier: [KVID], language: 'de' };

    describe(resourceType, () => {
      describe('CreateResource', () => {
        it(`decides ${createdName} with the full content`, () => {
          given(decider, [])
            .when(create(content))
            .then([
              {
                type: createdName,
                data: { id: 12, tenantId: 7, resource: content, at: CREATED_AT },
              },
            ]);
        });

        it('keeps the project and the author when given', () => {
          given(decider, [])
            .when(create(content, { project: 'tumorboard', author: 'Practitioner/5' }))
            .then([
              {
                type: createdName,
                data: {
                  id: 12,
                  tenantId: 7,
                  resource: content,
                  at: CREATED_AT,
                  project: 'tumorboard',
                  author: 'Practitioner/5',
                },
              },
            ]);
        });

        it('keeps only the author when no project is given (no project key at all)', () => {
          given(decider, [])
            .when(create(content, { author: 'Practitioner/5' }))
            .then([created(resourceType, content, { author: 'Practitioner/5' })]);
          const [event] = decider.decide(create(content, { author: 'Practitioner/5' }), decider.initialState);
          expect(event!.data).to.not.have.property('project');
        });

        it('keeps only the project when no author is given (no author key at all)', () => {
          given(decider, [])
            .when(create(content, { project: 'tumorboard' }))
            .then([created(resourceType, content, { project: 'tumorboard' })]);
          const [event] = decider.decide(create(content, { project: 'tumorboard' }), decider.initialState);
          expect(event!.data).to.not.have.property('author');
        });

        it('refuses to create an existing resource (409 ResourceExists)', () => {
          const refusal = given(decider, [created(resourceType, content)])
            .when(create(content))
            .thenThrows('ResourceExists', 'conflict');
          expect(refusal.message).to.equal(`${resourceType}/12 already exists`);
        });

        it('refuses to create a deleted resource again (409 ResourceExists)', () => {
          given(decider, [created(resourceType, content), deleted(resourceType)])
            .when(create(content))
            .thenThrows('ResourceExists', 'conflict');
        });
      });

      describe('UpdateResource', () => {
        it(`decides ${updatedName} with the full new content`, () => {
          given(decider, [created(resourceType, content)])
            .when(update(changedContent))
            .then([changed(updatedName, changedContent)]);
        });

        it('decides nothing when the content is unchanged, whatever the key order', () => {
          const reordered = Object.fromEntries(Object.entries(content).reverse());
          expect(Object.keys(reordered)).to.not.deep.equal(Object.keys(content));
          given(decider, [created(resourceType, content)])
            .when(update(reordered))
            .then([]);
          given(decider, [created(resourceType, content), changed(updatedName, changedContent)])
            .when(update(structuredClone(changedContent)))
            .then([]);
        });

        it('sees a changed order of array elements as a change', () => {
          const two = { ...content, identifier: [MRN, KVID] };
          given(decider, [created(resourceType, two)])
            .when(update({ ...content, identifier: [KVID, MRN] }))
            .then([changed(updatedName, { ...content, identifier: [KVID, MRN] })]);
        });

        it('refuses to update a missing resource (404 ResourceNotFound)', () => {
          given(decider, []).when(update(content)).thenThrows('ResourceNotFound', 'not_found');
        });

        it('refuses to update a deleted resource (410 ResourceDeleted)', () => {
          const refusal = given(decider, [created(resourceType, content), deleted(resourceType)])
            .when(update(changedContent))
            .thenThrows('ResourceDeleted', 'gone');
          expect(refusal.message).to.equal(`${resourceType}/12 was deleted`);
        });
      });

      describe('DeleteResource', () => {
        it(`decides ${deletedName}`, () => {
          given(decider, [created(resourceType, content)])
            .when(remove())
            .then([{ type: deletedName, data: { id: 12, at: LATER } }]);
        });

        it(`decides ${deletedName} after updates`, () => {
          given(decider, [created(resourceType, content), changed(updatedName, changedContent)])
            .when(remove())
            .then([{ type: deletedName, data: { id: 12, at: LATER } }]);
        });

        it('decides nothing for a resource already deleted', () => {
          given(decider, [created(resourceType, content), deleted(resourceType)])
            .when(remove('2025-03-05T00:00:00.000Z'))
            .then([]);
        });

        it('refuses to delete a missing resource (404 ResourceNotFound)', () => {
          given(decider, []).when(remove()).thenThrows('ResourceNotFound', 'not_found');
        });
      });

      describe('evolve', () => {
        it('starts with no resource', () => {
          given(decider, []).thenState({ status: 'none' });
        });

        it('folds the creation into an active resource with its project and author', () => {
          given(decider, [
            created(resourceType, content, { project: 'tumorboard', author: 'Practitioner/5' }),
          ]).thenState({
            status: 'active',
            resourceType,
            id: 12,
            tenantId: 7,
            resource: content,
            lastUpdated: CREATED_AT,
            project: 'tumorboard',
            author: 'Practitioner/5',
          });
        });

        it('folds a creation without project or author into undefined ones', () => {
          given(decider, [created(resourceType, content)]).thenState({
            status: 'active',
            resourceType,
            id: 12,
            tenantId: 7,
            resource: content,
            lastUpdated: CREATED_AT,
            project: undefined,
            author: undefined,
          });
        });

        it('folds an update into the new content and lastUpdated, keeping tenant, project and author', () => {
          given(decider, [
            created(resourceType, content, { project: 'tumorboard', author: 'Practitioner/5' }),
            changed(updatedName, changedContent),
          ]).thenState({
            status: 'active',
            resourceType,
            id: 12,
            tenantId: 7,
            resource: changedContent,
            lastUpdated: UPDATED_AT,
            project: 'tumorboard',
            author: 'Practitioner/5',
          });
        });

        it('folds a deletion into a deleted resource that keeps its last content', () => {
          given(decider, [
            created(resourceType, content, { author: 'Practitioner/5' }),
            changed(updatedName, changedContent),
            deleted(resourceType),
          ]).thenState({
            status: 'deleted',
            resourceType,
            id: 12,
            tenantId: 7,
            resource: changedContent,
            lastUpdated: LATER,
            project: undefined,
            author: 'Practitioner/5',
          });
        });

        it('ignores updates and deletions of a resource never created', () => {
          given(decider, [changed(updatedName, changedContent), deleted(resourceType)]).thenState({
            status: 'none',
          });
        });

        it('ignores the events of other resource types and other aggregates', () => {
          const other = resourceType === 'Patient' ? 'Encounter' : 'Patient';
          given(decider, [
            created(resourceType, content),
            changed(EVENT_NAMES[other].updated, changedContent),
            deleted(other),
            { type: 'SessionCreated', data: { id: 12 } } as unknown as ResourceEvent,
          ]).thenState({
            status: 'active',
            resourceType,
            id: 12,
            tenantId: 7,
            resource: content,
            lastUpdated: CREATED_AT,
            project: undefined,
            author: undefined,
          });
        });
      });
    });
  }

  describe('status changes', () => {
    describe('Task', () => {
      const decider = resourceDecider('Task');
      const requested: Content = { status: 'requested', intent: 'order', for: { reference: 'Patient/3' } };
      const inProgress: Content = { ...requested, status: 'in-progress' };

      it('decides TaskStatusChanged with the full content and the status before', () => {
        given(decider, [created('Task', requested)])
          .when(update(inProgress))
          .then([changed('TaskStatusChanged', inProgress, UPDATED_AT, 'requested')]);
      });

      it('decides TaskStatusChanged for every status change, including away from completed', () => {
        const completed = { ...requested, status: 'completed' };
        given(decider, [
          created('Task', requested),
          changed('TaskStatusChanged', completed, UPDATED_AT, 'requested'),
        ])
          .when(update({ ...requested, status: 'entered-in-error' }, LATER))
          .then([
            changed('TaskStatusChanged', { ...requested, status: 'entered-in-error' }, LATER, 'completed'),
          ]);
      });

      it('decides TaskStatusChanged without `from` when the Task had no status', () => {
        const { status: _status, ...withoutStatus } = requested;
        given(decider, [created('Task', withoutStatus)])
          .when(update(requested))
          .then([changed('TaskStatusChanged', requested)]);
      });

      it('decides TaskStatusChanged also when other elements change with the status', () => {
        const changedBoth = { ...inProgress, description: 'PHQ-9 ausfüllen' };
        given(decider, [created('Task', requested)])
          .when(update(changedBoth))
          .then([changed('TaskStatusChanged', changedBoth, UPDATED_AT, 'requested')]);
      });

      it('decides TaskUpdated when the status stays the same', () => {
        const described = { ...requested, description: 'PHQ-9 ausfüllen' };
        given(decider, [created('Task', requested)])
          .when(update(described))
          .then([changed('TaskUpdated', described)]);
      });

      it('folds TaskStatusChanged into the new content', () => {
        given(decider, [
          created('Task', requested),
          changed('TaskStatusChanged', inProgress, UPDATED_AT, 'requested'),
        ]).thenState({
          status: 'active',
          resourceType: 'Task',
          id: 12,
          tenantId: 7,
          resource: inProgress,
          lastUpdated: UPDATED_AT,
          project: undefined,
          author: undefined,
        });
      });
    });

    describe('QuestionnaireResponse', () => {
      const decider = resourceDecider('QuestionnaireResponse');
      const inProgress: Content = {
        questionnaire: 'https://example.org/q/phq-9',
        status: 'in-progress',
        subject: { reference: 'Patient/3' },
      };
      const answered: Content = { ...inProgress, item: [{ linkId: '1', answer: [{ valueInteger: 2 }] }] };
      const completed: Content = { ...answered, status: 'completed' };

      it('decides QuestionnaireResponseSubmitted when it reaches completed', () => {
        given(decider, [created('QuestionnaireResponse', inProgress)])
          .when(update(completed))
          .then([changed('QuestionnaireResponseSubmitted', completed, UPDATED_AT, 'in-progress')]);
      });

      it('decides QuestionnaireResponseUpdated when the answers change but it stays in progress', () => {
        given(decider, [created('QuestionnaireResponse', inProgress)])
          .when(update(answered))
          .then([changed('QuestionnaireResponseUpdated', answered)]);
      });

      it('decides QuestionnaireResponseAmended and …EnteredInError for those statuses (issue 32)', () => {
        const amended = { ...completed, status: 'amended' };
        const history = [
          created('QuestionnaireResponse', inProgress),
          changed('QuestionnaireResponseSubmitted', completed, UPDATED_AT, 'in-progress'),
        ];
        given(decider, history)
          .when(update(amended, LATER))
          .then([changed('QuestionnaireResponseAmended', amended, LATER, 'completed')]);
        const retracted = { ...completed, status: 'entered-in-error' };
        given(decider, history)
          .when(update(retracted, LATER))
          .then([changed('QuestionnaireResponseEnteredInError', retracted, LATER, 'completed')]);
        expect(resourceEventKind('QuestionnaireResponseAmended')).to.deep.equal({
          resourceType: 'QuestionnaireResponse',
          kind: 'statusChanged',
        });
      });

      it('decides QuestionnaireResponseUpdated for another status change (stopped)', () => {
        given(decider, [created('QuestionnaireResponse', inProgress)])
          .when(update({ ...inProgress, status: 'stopped' }))
          .then([changed('QuestionnaireResponseUpdated', { ...inProgress, status: 'stopped' })]);
      });

      it('decides QuestionnaireResponseUpdated when a completed response changes but stays completed', () => {
        const corrected = { ...completed, item: [{ linkId: '1', answer: [{ valueInteger: 3 }] }] };
        given(decider, [
          created('QuestionnaireResponse', inProgress),
          changed('QuestionnaireResponseSubmitted', completed, UPDATED_AT, 'in-progress'),
        ])
          .when(update(corrected, LATER))
          .then([changed('QuestionnaireResponseUpdated', corrected, LATER)]);
      });

      it('decides QuestionnaireResponseCreated (not Submitted) for a response created completed', () => {
        given(decider, [])
          .when(create(completed))
          .then([created('QuestionnaireResponse', completed)]);
      });

      it('folds QuestionnaireResponseSubmitted into the completed content', () => {
        expect(
          given(decider, [
            created('QuestionnaireResponse', inProgress),
            changed('QuestionnaireResponseSubmitted', completed, UPDATED_AT, 'in-progress'),
          ]).state,
        ).to.include({ status: 'active', resource: completed, lastUpdated: UPDATED_AT });
      });
    });

    for (const resourceType of ['Patient', 'Encounter', 'Practitioner', 'Questionnaire'] as const) {
      it(`decides ${resourceType}Updated when a ${resourceType}'s status changes (no status event)`, () => {
        const decider = resourceDecider(resourceType);
        const before = { ...CONTENT[resourceType], status: 'draft' };
        const after = { ...CONTENT[resourceType], status: 'completed' };
        expect(EVENT_NAMES[resourceType].statusChanged).to.equal(undefined);
        given(decider, [created(resourceType, before)])
          .when(update(after))
          .then([changed(`${resourceType}Updated`, after)]);
      });
    }
  });

  describe('resourceEventKind', () => {
    for (const resourceType of RESOURCE_TYPES) {
      const [createdName, updatedName, deletedName, statusName] = EXPECTED_NAMES[resourceType];
      it(`names the events of ${resourceType}`, () => {
        const { statusEvents: _statusEvents, ...names } = EVENT_NAMES[resourceType];
        expect(names).to.deep.equal({
          created: createdName,
          updated: updatedName,
          deleted: deletedName,
          ...(statusName ? { statusChanged: statusName } : {}),
        });
        expect(resourceEventKind(createdName)).to.deep.equal({ resourceType, kind: 'created' });
        expect(resourceEventKind(updatedName)).to.deep.equal({ resourceType, kind: 'updated' });
        expect(resourceEventKind(deletedName)).to.deep.equal({ resourceType, kind: 'deleted' });
        if (statusName)
          expect(resourceEventKind(statusName)).to.deep.equal({ resourceType, kind: 'statusChanged' });
      });
    }

    it('answers undefined for every other event', () => {
      for (const name of [
        'SessionCreated',
        'TenantCreated',
        'ReservationClaimed',
        'PatientStatusChanged',
        'EncounterStatusChanged',
        'QuestionnaireResponseStatusChanged',
        'patientregistered',
        'Patient',
        '',
      ])
        expect(resourceEventKind(name), name).to.equal(undefined);
    });
  });

  describe('resourceStream', () => {
    it('names the stream <resourceType>-<id>', () => {
      expect(RESOURCE_TYPES.map((t) => resourceStream(t, 12))).to.deep.equal([
        'Patient-12',
        'Encounter-12',
        'Practitioner-12',
        'Task-12',
        'Questionnaire-12',
        'QuestionnaireResponse-12',
        'ValueSet-12',
        'Observation-12',
        'Condition-12',
        'MedicationStatement-12',
        'Medication-12',
        'AllergyIntolerance-12',
        'Immunization-12',
        'DocumentReference-12',
      ]);
    });
  });
});
