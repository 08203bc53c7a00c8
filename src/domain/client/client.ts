/**
 * API client aggregate (issue 2 §4, docs/interface.md §5 rule 1, docs/architecture.md "Security"): a `client_id`, a salted hash of
 * its secret (never the secret), its own scopes (governing its data-server calls, docs/interface.md §5 rule 4)
 * and the projects of its service account (docs/interface.md §5.3 rule 3). Stream `client-<client_id>`.
 */
import { type Decider, DomainError, type Event } from '../decider.js';

export interface ClientSettings {
  /** The client's own scopes, as given (v1 or v2 text). */
  readonly scopes: readonly string[];
  /** Service-account projects whose Questionnaires sessions may use. */
  readonly projects: readonly string[];
}

export type ClientEvent =
  | Event<
      'ApiClientRegistered',
      { clientId: string; tenantId: number; secretHash: string; at: string } & ClientSettings
    >
  | Event<'ApiClientSecretRotated', { clientId: string; secretHash: string; at: string }>
  | Event<'ApiClientSettingsChanged', { clientId: string; at: string } & ClientSettings>;

export type ApiClient =
  | { readonly status: 'none' }
  | ({
      readonly status: 'active';
      readonly clientId: string;
      readonly tenantId: number;
      readonly secretHash: string;
    } & ClientSettings);

export type ClientCommand =
  | ({
      readonly type: 'RegisterApiClient';
      readonly clientId: string;
      readonly tenantId: number;
      readonly secretHash: string;
      readonly now: string;
    } & ClientSettings)
  | { readonly type: 'RotateApiClientSecret'; readonly secretHash: string; readonly now: string }
  | ({ readonly type: 'ConfigureApiClient'; readonly now: string } & ClientSettings);

const settingsOf = (s: ClientSettings): ClientSettings => ({
  scopes: [...s.scopes],
  projects: [...s.projects],
});

export const clientDecider: Decider<ClientCommand, ApiClient, ClientEvent> = {
  initialState: { status: 'none' },
  evolve: (state, event) => {
    switch (event.type) {
      case 'ApiClientRegistered':
        return {
          status: 'active',
          clientId: event.data.clientId,
          tenantId: event.data.tenantId,
          secretHash: event.data.secretHash,
          ...settingsOf(event.data),
        };
      case 'ApiClientSecretRotated':
        return state.status === 'active' ? { ...state, secretHash: event.data.secretHash } : state;
      case 'ApiClientSettingsChanged':
        return state.status === 'active' ? { ...state, ...settingsOf(event.data) } : state;
      default: {
        const _exhaustive: never = event;
        return state;
      }
    }
  },
  decide: (command, state) => {
    switch (command.type) {
      case 'RegisterApiClient':
        if (state.status !== 'none')
          throw new DomainError('conflict', 'ApiClientExists', `client ${command.clientId} already exists`);
        return [
          {
            type: 'ApiClientRegistered',
            data: {
              clientId: command.clientId,
              tenantId: command.tenantId,
              secretHash: command.secretHash,
              at: command.now,
              ...settingsOf(command),
            },
          },
        ];
      case 'RotateApiClientSecret':
        if (state.status === 'none')
          throw new DomainError('not_found', 'ApiClientNotFound', 'no such client');
        return [
          {
            type: 'ApiClientSecretRotated',
            data: { clientId: state.clientId, secretHash: command.secretHash, at: command.now },
          },
        ];
      case 'ConfigureApiClient':
        if (state.status === 'none')
          throw new DomainError('not_found', 'ApiClientNotFound', 'no such client');
        if (
          JSON.stringify(state.scopes) === JSON.stringify(command.scopes) &&
          JSON.stringify(state.projects) === JSON.stringify(command.projects)
        )
          return [];
        return [
          {
            type: 'ApiClientSettingsChanged',
            data: { clientId: state.clientId, at: command.now, ...settingsOf(command) },
          },
        ];
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};

export const clientStream = (clientId: string): string => `client-${clientId}`;

/** client_id syntax: 3–64 characters of letters, digits, `.`, `_`, `-`. */
export const CLIENT_ID_PATTERN = /^[A-Za-z0-9._-]{3,64}$/;
