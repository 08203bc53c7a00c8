import { expect } from 'chai';
import {
  type TenantCommand,
  type TenantEvent,
  tenantDecider,
  tenantStream,
} from '../../src/domain/tenant/tenant.js';
import { given } from '../support/given.js';

const settings = {
  ehrManaged: true,
  allowedScopes: ['launch', 'patient/*.rs'],
  redirectOrigins: ['https://ehr.example.org'],
};

const createTenant: TenantCommand = {
  type: 'CreateTenant',
  tenantId: 7,
  name: 'Klinikum Nord',
  now: '2025-03-04T09:00:00.000Z',
  ...settings,
};

const tenantCreated: TenantEvent = {
  type: 'TenantCreated',
  data: { tenantId: 7, name: 'Klinikum Nord', createdAt: '2025-03-04T09:00:00.000Z', ...settings },
};

const configure = (overrides: Partial<typeof settings>, now = '2025-03-05T09:00:00.000Z'): TenantCommand => ({
  type: 'ConfigureTenant',
  now,
  ...settings,
  ...overrides,
});

const settingsChanged = (changed: typeof settings, at = '2025-03-05T09:00:00.000Z'): TenantEvent => ({
  type: 'TenantSettingsChanged',
  data: { tenantId: 7, at, ...changed },
});

describe('tenant decider', () => {
  describe('CreateTenant', () => {
    it('creates a tenant with its name and settings', () => {
      given(tenantDecider, []).when(createTenant).then([tenantCreated]);
    });

    it('refuses to create a tenant that already exists', () => {
      given(tenantDecider, [tenantCreated]).when(createTenant).thenThrows('TenantExists', 'conflict');
    });

    it('copies the settings arrays instead of sharing the command arrays', () => {
      const allowedScopes = ['launch'];
      const [event] = tenantDecider.decide({ ...createTenant, allowedScopes }, tenantDecider.initialState);
      expect(event?.data.allowedScopes).to.deep.equal(['launch']);
      expect(event?.data.allowedScopes).to.not.equal(allowedScopes);
    });
  });

  describe('ConfigureTenant', () => {
    it('refuses to configure a tenant that does not exist', () => {
      given(tenantDecider, []).when(configure({})).thenThrows('TenantNotFound', 'not_found');
    });

    it('decides nothing when the settings are unchanged', () => {
      given(tenantDecider, [tenantCreated]).when(configure({})).then([]);
    });

    it('records a changed ehr_managed flag', () => {
      given(tenantDecider, [tenantCreated])
        .when(configure({ ehrManaged: false }))
        .then([settingsChanged({ ...settings, ehrManaged: false })]);
    });

    it('records changed allowed scopes', () => {
      given(tenantDecider, [tenantCreated])
        .when(configure({ allowedScopes: ['launch'] }))
        .then([settingsChanged({ ...settings, allowedScopes: ['launch'] })]);
    });

    it('records changed redirect origins', () => {
      const redirectOrigins = ['https://ehr.example.org', 'https://forms.example.org:8443'];
      given(tenantDecider, [tenantCreated])
        .when(configure({ redirectOrigins }))
        .then([settingsChanged({ ...settings, redirectOrigins })]);
    });

    it('compares against the latest settings, not the creation settings', () => {
      given(tenantDecider, [tenantCreated, settingsChanged({ ...settings, ehrManaged: false })])
        .when(configure({ ehrManaged: false }, '2025-03-06T09:00:00.000Z'))
        .then([]);
    });
  });

  describe('evolve', () => {
    it('starts with no tenant', () => {
      given(tenantDecider, []).thenState({ status: 'none' });
    });

    it('makes a created tenant active with its settings', () => {
      given(tenantDecider, [tenantCreated]).thenState({
        status: 'active',
        tenantId: 7,
        name: 'Klinikum Nord',
        ...settings,
      });
    });

    it('replaces the settings and keeps the name on a change', () => {
      const changed = { ehrManaged: false, allowedScopes: ['launch'], redirectOrigins: [] };
      given(tenantDecider, [tenantCreated, settingsChanged(changed)]).thenState({
        status: 'active',
        tenantId: 7,
        name: 'Klinikum Nord',
        ...changed,
      });
    });

    it('ignores a settings change without a created tenant', () => {
      given(tenantDecider, [settingsChanged(settings)]).thenState({ status: 'none' });
    });
  });

  describe('tenantStream', () => {
    it('names the stream tenant-<id>', () => {
      expect(tenantStream(7)).to.equal('tenant-7');
    });
  });
});
