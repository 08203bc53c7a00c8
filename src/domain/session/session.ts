/**
 * Session aggregate (docs/interface.md §1.1–1.2, §2.1–2.4, §3.1, §8). Stream `session-<id>`.
 *
 * States (docs/interface.md §3.1): created `inactive` with a single-use handover token valid 5 minutes; a valid
 * handover makes it `active` (token deleted, cookie issued); DELETE ends it (reported as inactive,
 * the cookie stops working at once); 7.5 days after creation it is expired whatever its state.
 * Tokens and cookies are stored only as SHA-256 hashes (docs/architecture.md "Security").
 */
import { type Decider, DomainError, type Event } from '../decider.js';

/** docs/interface.md §8: handover token lifetime. */
export const HANDOVER_TOKEN_LIFETIME_MS = 5 * 60 * 1000;
/** docs/interface.md §2.3, §8: session lifetime, 7.5 days. */
export const SESSION_LIFETIME_MS = 7.5 * 24 * 60 * 60 * 1000;

export type DeploymentMode = 'embedded' | 'standalone';

export interface SessionCreatedData {
  readonly sessionId: number;
  readonly tenantId: number;
  /** The API client that created the session. */
  readonly clientId: string;
  /** Practitioner id of the session user. */
  readonly userId: number;
  readonly patientId: number | null;
  readonly encounterId: number | null;
  /** Effective scopes after downscoping, v2 text (docs/interface.md §2.3 fhir_server.scope). */
  readonly scopes: readonly string[];
  readonly deploymentMode: DeploymentMode;
  readonly postSubmitRedirect: string | null;
  readonly postCancelRedirect: string | null;
  readonly handoverTokenHash: string;
  readonly handoverExpiresAt: string;
  readonly createdAt: string;
  readonly expiresAt: string;
}

export type SessionEvent =
  | Event<'SessionCreated', SessionCreatedData>
  | Event<'SessionHandedOver', { sessionId: number; cookieHash: string; at: string }>
  | Event<'SessionEnded', { sessionId: number; reason: 'deleted'; at: string }>;

export type Session =
  | { readonly status: 'none' }
  | ({
      readonly status: 'inactive' | 'active' | 'ended';
      /** null once the token has been used (docs/interface.md §5 rule 3: tokens are deleted after handover). */
      readonly currentTokenHash: string | null;
      readonly cookieHash: string | null;
      readonly lastModifiedAt: string;
    } & SessionCreatedData);

export type SessionCommand =
  | ({ readonly type: 'CreateSession' } & Omit<SessionCreatedData, 'handoverExpiresAt' | 'expiresAt'>)
  | {
      readonly type: 'HandOverSession';
      readonly tokenHash: string;
      readonly cookieHash: string;
      readonly now: string;
    }
  | { readonly type: 'EndSession'; readonly tenantId: number; readonly now: string };

const invalidToken = () =>
  new DomainError(
    'unauthorized',
    'HandoverTokenInvalid',
    'the handover token is not valid (unknown, or already used)',
  );

/** True when the session is past its 7.5-day lifetime at `now` (ISO-8601). */
export const isExpired = (session: { expiresAt: string }, now: string): boolean =>
  Date.parse(now) >= Date.parse(session.expiresAt);

export const sessionDecider: Decider<SessionCommand, Session, SessionEvent> = {
  initialState: { status: 'none' },
  evolve: (state, event) => {
    switch (event.type) {
      case 'SessionCreated':
        return {
          status: 'inactive',
          ...event.data,
          currentTokenHash: event.data.handoverTokenHash,
          cookieHash: null,
          lastModifiedAt: event.data.createdAt,
        };
      case 'SessionHandedOver':
        return state.status === 'none'
          ? state
          : {
              ...state,
              status: 'active',
              currentTokenHash: null,
              cookieHash: event.data.cookieHash,
              lastModifiedAt: event.data.at,
            };
      case 'SessionEnded':
        return state.status === 'none'
          ? state
          : {
              ...state,
              status: 'ended',
              currentTokenHash: null,
              cookieHash: null,
              lastModifiedAt: event.data.at,
            };
      default: {
        const _exhaustive: never = event;
        return state;
      }
    }
  },
  decide: (command, state) => {
    switch (command.type) {
      case 'CreateSession': {
        if (state.status !== 'none')
          throw new DomainError('conflict', 'SessionExists', 'the session already exists');
        const created = Date.parse(command.createdAt);
        const { type: _type, ...data } = command;
        return [
          {
            type: 'SessionCreated',
            data: {
              ...data,
              scopes: [...command.scopes],
              handoverExpiresAt: new Date(created + HANDOVER_TOKEN_LIFETIME_MS).toISOString(),
              expiresAt: new Date(created + SESSION_LIFETIME_MS).toISOString(),
            },
          },
        ];
      }
      case 'HandOverSession': {
        // docs/interface.md §4.1 handover rule 1 and §7 row 401: unknown, used, expired tokens are all refused.
        if (state.status === 'none' || state.currentTokenHash === null) throw invalidToken();
        if (state.currentTokenHash !== command.tokenHash) throw invalidToken();
        if (Date.parse(command.now) >= Date.parse(state.handoverExpiresAt))
          throw new DomainError(
            'unauthorized',
            'HandoverTokenExpired',
            'the handover token has expired (tokens are valid for 5 minutes)',
          );
        if (isExpired(state, command.now))
          throw new DomainError('unauthorized', 'SessionExpired', 'the session has expired');
        return [
          {
            type: 'SessionHandedOver',
            data: { sessionId: state.sessionId, cookieHash: command.cookieHash, at: command.now },
          },
        ];
      }
      case 'EndSession': {
        // docs/interface.md §5 rule 1: another tenant's session is indistinguishable from a missing one.
        if (state.status === 'none' || state.tenantId !== command.tenantId)
          throw new DomainError('not_found', 'SessionNotFound', 'no such session in this data tenant');
        if (state.status === 'ended') return [];
        return [
          { type: 'SessionEnded', data: { sessionId: state.sessionId, reason: 'deleted', at: command.now } },
        ];
      }
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};

export const sessionStream = (sessionId: number): string => `session-${sessionId}`;
