import { expect } from 'chai';
import {
  type EncounterCommand,
  type EncounterEvent,
  encounterDecider,
  encounterStream,
} from '../../src/domain/clinical/encounter.js';
import { identifierToken } from '../../src/domain/clinical/identifier.js';
import {
  type PatientCommand,
  type PatientEvent,
  patientDecider,
  patientStream,
} from '../../src/domain/clinical/patient.js';
import {
  type PractitionerCommand,
  type PractitionerEvent,
  practitionerDecider,
  practitionerStream,
} from '../../src/domain/clinical/practitioner.js';
import { given } from '../support/given.js';

const AT = '2025-03-04T09:30:00.000Z';
const MRN = { system: 'urn:oid:1.2.276.0.76.4.8', value: 'P-000123' };
const INSURANCE = { system: 'http://fhir.de/sid/gkv/kvid-10', value: 'A123456780' };
const CASE = { system: 'https://ehr.example.org/fall', value: 'F-2025-0042' };
const LANR = { system: 'https://fhir.kbv.de/NamingSystem/KBV_NS_Base_ANR', value: '123456601' };

describe('clinical deciders', () => {
  describe('Patient', () => {
    const register: PatientCommand = {
      type: 'RegisterPatient',
      patientId: 12,
      tenantId: 7,
      identifier: [MRN, INSURANCE],
      at: AT,
    };
    const registered: PatientEvent = {
      type: 'PatientRegistered',
      data: { patientId: 12, tenantId: 7, identifier: [MRN, INSURANCE], at: AT },
    };

    it('registers a patient with its identifiers', () => {
      given(patientDecider, []).when(register).then([registered]);
    });

    it('refuses to register a patient id twice', () => {
      given(patientDecider, [registered]).when(register).thenThrows('PatientExists', 'conflict');
    });

    it('copies the identifier array instead of sharing the command array', () => {
      const [event] = patientDecider.decide(register, patientDecider.initialState);
      expect(event!.data.identifier).to.deep.equal([MRN, INSURANCE]);
      expect(event!.data.identifier).to.not.equal(register.identifier);
    });

    it('folds a registration into an active patient', () => {
      given(patientDecider, []).thenState({ status: 'none' });
      given(patientDecider, [registered]).thenState({
        status: 'active',
        patientId: 12,
        tenantId: 7,
        identifier: [MRN, INSURANCE],
      });
    });

    it('names the stream Patient-<id>', () => {
      expect(patientStream(12)).to.equal('Patient-12');
    });
  });

  describe('Encounter', () => {
    const register: EncounterCommand = {
      type: 'RegisterEncounter',
      encounterId: 13,
      tenantId: 7,
      identifier: [CASE],
      subjectPatientId: 12,
      at: AT,
    };
    const registered: EncounterEvent = {
      type: 'EncounterRegistered',
      data: { encounterId: 13, tenantId: 7, identifier: [CASE], subjectPatientId: 12, at: AT },
    };

    it('registers an encounter with its identifiers and subject patient', () => {
      given(encounterDecider, []).when(register).then([registered]);
    });

    it('refuses to register an encounter id twice', () => {
      given(encounterDecider, [registered]).when(register).thenThrows('EncounterExists', 'conflict');
    });

    it('folds a registration into an active encounter', () => {
      given(encounterDecider, []).thenState({ status: 'none' });
      given(encounterDecider, [registered]).thenState({
        status: 'active',
        encounterId: 13,
        tenantId: 7,
        identifier: [CASE],
        subjectPatientId: 12,
      });
    });

    it('names the stream Encounter-<id>', () => {
      expect(encounterStream(13)).to.equal('Encounter-13');
    });
  });

  describe('Practitioner', () => {
    const register: PractitionerCommand = {
      type: 'RegisterPractitioner',
      practitionerId: 3,
      tenantId: 7,
      identifier: [LANR],
      at: AT,
    };
    const registered: PractitionerEvent = {
      type: 'PractitionerRegistered',
      data: { practitionerId: 3, tenantId: 7, identifier: [LANR], at: AT },
    };

    it('registers a practitioner with its identifiers', () => {
      given(practitionerDecider, []).when(register).then([registered]);
    });

    it('refuses to register a practitioner id twice', () => {
      given(practitionerDecider, [registered]).when(register).thenThrows('PractitionerExists', 'conflict');
    });

    it('folds a registration into an active practitioner', () => {
      given(practitionerDecider, []).thenState({ status: 'none' });
      given(practitionerDecider, [registered]).thenState({
        status: 'active',
        practitionerId: 3,
        tenantId: 7,
        identifier: [LANR],
      });
    });

    it('names the stream Practitioner-<id>', () => {
      expect(practitionerStream(3)).to.equal('Practitioner-3');
    });
  });

  describe('identifierToken', () => {
    it('joins system and value with a pipe (FHIR token syntax)', () => {
      expect(identifierToken(MRN)).to.equal('urn:oid:1.2.276.0.76.4.8|P-000123');
    });
  });
});
