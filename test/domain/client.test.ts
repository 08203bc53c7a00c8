import { expect } from 'chai';
import {
  CLIENT_ID_PATTERN,
  type ClientCommand,
  type ClientEvent,
  clientDecider,
  clientStream,
} from '../../src/domain/client/client.js';
import { given } from '../support/given.js';

const SECRET_HASH = 'scrypt$16384$8$1$c2FsdHNhbHRzYWx0c2FsdA==$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaGhhc2g=';
const ROTATED_HASH = 'scrypt$16384$8$1$bmV3c2FsdG5ld3NhbHRuZXc=$bmV3aGFzaG5ld2hhc2huZXdoYXNobmV3aGFzaG5ldw==';

const settings = { scopes: ['system/Patient.cruds', 'system/Encounter.rs'], projects: ['tumorboard'] };

const register: ClientCommand = {
  type: 'RegisterApiClient',
  clientId: 'ehr-backend',
  tenantId: 7,
  secretHash: SECRET_HASH,
  now: '2025-03-04T09:00:00.000Z',
  ...settings,
};

const registered: ClientEvent = {
  type: 'ApiClientRegistered',
  data: {
    clientId: 'ehr-backend',
    tenantId: 7,
    secretHash: SECRET_HASH,
    at: '2025-03-04T09:00:00.000Z',
    ...settings,
  },
};

const rotate: ClientCommand = {
  type: 'RotateApiClientSecret',
  secretHash: ROTATED_HASH,
  now: '2025-03-05T09:00:00.000Z',
};

const rotated: ClientEvent = {
  type: 'ApiClientSecretRotated',
  data: { clientId: 'ehr-backend', secretHash: ROTATED_HASH, at: '2025-03-05T09:00:00.000Z' },
};

const configure = (overrides: Partial<typeof settings>): ClientCommand => ({
  type: 'ConfigureApiClient',
  now: '2025-03-06T09:00:00.000Z',
  ...settings,
  ...overrides,
});

const settingsChanged = (changed: typeof settings): ClientEvent => ({
  type: 'ApiClientSettingsChanged',
  data: { clientId: 'ehr-backend', at: '2025-03-06T09:00:00.000Z', ...changed },
});

describe('api client decider', () => {
  describe('RegisterApiClient', () => {
    it('registers a client with its secret hash, scopes and projects', () => {
      given(clientDecider, []).when(register).then([registered]);
    });

    it('refuses to register a client id twice', () => {
      given(clientDecider, [registered]).when(register).thenThrows('ApiClientExists', 'conflict');
    });
  });

  describe('RotateApiClientSecret', () => {
    it('records the new secret hash', () => {
      given(clientDecider, [registered]).when(rotate).then([rotated]);
    });

    it('refuses to rotate the secret of a client that does not exist', () => {
      given(clientDecider, []).when(rotate).thenThrows('ApiClientNotFound', 'not_found');
    });
  });

  describe('ConfigureApiClient', () => {
    it('refuses to configure a client that does not exist', () => {
      given(clientDecider, []).when(configure({})).thenThrows('ApiClientNotFound', 'not_found');
    });

    it('decides nothing when scopes and projects are unchanged', () => {
      given(clientDecider, [registered]).when(configure({})).then([]);
    });

    it('records changed scopes', () => {
      given(clientDecider, [registered])
        .when(configure({ scopes: ['system/*.rs'] }))
        .then([settingsChanged({ ...settings, scopes: ['system/*.rs'] })]);
    });

    it('records changed projects', () => {
      given(clientDecider, [registered])
        .when(configure({ projects: ['tumorboard', 'registry'] }))
        .then([settingsChanged({ ...settings, projects: ['tumorboard', 'registry'] })]);
    });

    it('compares against the latest settings', () => {
      const changed = { scopes: ['system/*.rs'], projects: [] };
      given(clientDecider, [registered, settingsChanged(changed)])
        .when(configure(changed))
        .then([]);
    });
  });

  describe('evolve', () => {
    it('starts with no client', () => {
      given(clientDecider, []).thenState({ status: 'none' });
    });

    it('makes a registered client active', () => {
      given(clientDecider, [registered]).thenState({
        status: 'active',
        clientId: 'ehr-backend',
        tenantId: 7,
        secretHash: SECRET_HASH,
        ...settings,
      });
    });

    it('replaces the secret hash on rotation and the settings on a change', () => {
      const changed = { scopes: ['system/*.rs'], projects: [] };
      given(clientDecider, [registered, rotated, settingsChanged(changed)]).thenState({
        status: 'active',
        clientId: 'ehr-backend',
        tenantId: 7,
        secretHash: ROTATED_HASH,
        ...changed,
      });
    });

    it('ignores a rotation or a settings change without a registered client', () => {
      given(clientDecider, [rotated, settingsChanged(settings)]).thenState({ status: 'none' });
    });
  });

  describe('clientStream and CLIENT_ID_PATTERN', () => {
    it('names the stream client-<client_id>', () => {
      expect(clientStream('ehr-backend')).to.equal('client-ehr-backend');
    });

    it('accepts 3 to 64 letters, digits, dots, underscores and hyphens only', () => {
      expect(CLIENT_ID_PATTERN.test('a.b')).to.equal(true);
      expect(CLIENT_ID_PATTERN.test(`A_z-0.${'x'.repeat(58)}`)).to.equal(true);
      expect(CLIENT_ID_PATTERN.test('ab')).to.equal(false);
      expect(CLIENT_ID_PATTERN.test('x'.repeat(65))).to.equal(false);
      expect(CLIENT_ID_PATTERN.test('ehr backend')).to.equal(false);
      expect(CLIENT_ID_PATTERN.test('ehr/backend')).to.equal(false);
    });
  });
});
