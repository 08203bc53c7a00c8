/**
 * Data tenant aggregate (issue 2 §4): a name, an `ehr_managed` flag, the scopes sessions may be
 * granted (docs/interface.md §5.3 rule 1) and the origins redirects may go to (docs/architecture.md "Security"). Stream `tenant-<id>`.
 */
import { type Decider, DomainError, type Event } from '../decider.js';

export interface TenantSettings {
  readonly ehrManaged: boolean;
  /** Allowed scopes as given (v1 or v2 text); downscoping parses them. */
  readonly allowedScopes: readonly string[];
  /** Origins (`https://host[:port]`) that `next`, `post_submit_redirect` and `post_cancel_redirect` may use. */
  readonly redirectOrigins: readonly string[];
  /**
   * The identifier system of the tenant's medical record numbers (issue 32: the patient banner
   * shows the Patient's identifier of this system as the MRN; absent: the first identifier).
   */
  readonly mrnSystem?: string;
  /**
   * Origins Subscription endpoints may use (issue 37; seed `subscription_origins`), besides
   * SUBSCRIPTION_ALLOWED_ORIGINS. Absent in tenants recorded before it.
   */
  readonly subscriptionOrigins?: readonly string[];
  /**
   * Days a patient's record must be kept after its last change (seed `retention_days`;
   * docs/architecture.md "Erasure"): an erasure inside them is refused unless forced with a
   * recorded reason. Absent: no retention period.
   */
  readonly retentionDays?: number;
}

export type TenantEvent =
  | Event<'TenantCreated', { tenantId: number; name: string; createdAt: string } & TenantSettings>
  | Event<'TenantSettingsChanged', { tenantId: number; at: string } & TenantSettings>;

export type Tenant =
  | { readonly status: 'none' }
  | ({ readonly status: 'active'; readonly tenantId: number; readonly name: string } & TenantSettings);

export type TenantCommand =
  | ({
      readonly type: 'CreateTenant';
      readonly tenantId: number;
      readonly name: string;
      readonly now: string;
    } & TenantSettings)
  | ({ readonly type: 'ConfigureTenant'; readonly now: string } & TenantSettings);

const sameSettings = (a: TenantSettings, b: TenantSettings): boolean =>
  a.ehrManaged === b.ehrManaged &&
  JSON.stringify(a.allowedScopes) === JSON.stringify(b.allowedScopes) &&
  JSON.stringify(a.redirectOrigins) === JSON.stringify(b.redirectOrigins) &&
  a.mrnSystem === b.mrnSystem &&
  JSON.stringify(a.subscriptionOrigins ?? []) === JSON.stringify(b.subscriptionOrigins ?? []) &&
  a.retentionDays === b.retentionDays;

const settingsOf = (s: TenantSettings): TenantSettings => ({
  ehrManaged: s.ehrManaged,
  allowedScopes: [...s.allowedScopes],
  redirectOrigins: [...s.redirectOrigins],
  ...(s.mrnSystem ? { mrnSystem: s.mrnSystem } : {}),
  // Only when given: tenants without subscription origins record what they did before issue 37.
  ...(s.subscriptionOrigins?.length ? { subscriptionOrigins: [...s.subscriptionOrigins] } : {}),
  ...(s.retentionDays !== undefined ? { retentionDays: s.retentionDays } : {}),
});

export const tenantDecider: Decider<TenantCommand, Tenant, TenantEvent> = {
  initialState: { status: 'none' },
  evolve: (state, event) => {
    switch (event.type) {
      case 'TenantCreated':
        return {
          status: 'active',
          tenantId: event.data.tenantId,
          name: event.data.name,
          ...settingsOf(event.data),
        };
      case 'TenantSettingsChanged':
        return state.status === 'active' ? { ...state, ...settingsOf(event.data) } : state;
      default: {
        const _exhaustive: never = event;
        return state;
      }
    }
  },
  decide: (command, state) => {
    switch (command.type) {
      case 'CreateTenant':
        if (state.status !== 'none')
          throw new DomainError('conflict', 'TenantExists', 'the tenant already exists');
        return [
          {
            type: 'TenantCreated',
            data: {
              tenantId: command.tenantId,
              name: command.name,
              createdAt: command.now,
              ...settingsOf(command),
            },
          },
        ];
      case 'ConfigureTenant':
        if (state.status === 'none') throw new DomainError('not_found', 'TenantNotFound', 'no such tenant');
        if (sameSettings(state, command)) return [];
        return [
          {
            type: 'TenantSettingsChanged',
            data: { tenantId: state.tenantId, at: command.now, ...settingsOf(command) },
          },
        ];
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};

export const tenantStream = (tenantId: number): string => `tenant-${tenantId}`;
