import { expect } from 'chai';
import {
  HANDOVER_TOKEN_LIFETIME_MS,
  isExpired,
  SESSION_LIFETIME_MS,
  type SessionCommand,
  type SessionCreatedData,
  type SessionEvent,
  sessionDecider,
  sessionStream,
} from '../../src/domain/session/session.js';
import { given } from '../support/given.js';

const CREATED_AT = '2025-03-04T10:00:00.000Z';
/** spec §8: created + 5 minutes. */
const HANDOVER_EXPIRES_AT = '2025-03-04T10:05:00.000Z';
/** spec §8: created + 7.5 days (7 days and 12 hours). */
const EXPIRES_AT = '2025-03-11T22:00:00.000Z';

const TOKEN_HASH = 'a3f1c9e2b7d4a3f1c9e2b7d4a3f1c9e2b7d4a3f1c9e2b7d4a3f1c9e2b7d40001';
const COOKIE_HASH = 'c00c1e5a11c00c1e5a11c00c1e5a11c00c1e5a11c00c1e5a11c00c1e5a110002';

const createSession: Extract<SessionCommand, { type: 'CreateSession' }> = {
  type: 'CreateSession',
  sessionId: 41,
  tenantId: 7,
  clientId: 'ehr-backend',
  userId: 3,
  patientId: 12,
  encounterId: 13,
  scopes: ['launch', 'patient/Patient.rs', 'patient/QuestionnaireResponse.cru'],
  deploymentMode: 'embedded',
  postSubmitRedirect: 'https://ehr.example.org/done',
  postCancelRedirect: null,
  handoverTokenHash: TOKEN_HASH,
  createdAt: CREATED_AT,
};

const createdData: SessionCreatedData = {
  sessionId: 41,
  tenantId: 7,
  clientId: 'ehr-backend',
  userId: 3,
  patientId: 12,
  encounterId: 13,
  scopes: ['launch', 'patient/Patient.rs', 'patient/QuestionnaireResponse.cru'],
  deploymentMode: 'embedded',
  postSubmitRedirect: 'https://ehr.example.org/done',
  postCancelRedirect: null,
  handoverTokenHash: TOKEN_HASH,
  handoverExpiresAt: HANDOVER_EXPIRES_AT,
  createdAt: CREATED_AT,
  expiresAt: EXPIRES_AT,
};

const sessionCreated: SessionEvent = { type: 'SessionCreated', data: createdData };

const sessionHandedOver = (at = '2025-03-04T10:01:00.000Z'): SessionEvent => ({
  type: 'SessionHandedOver',
  data: { sessionId: 41, cookieHash: COOKIE_HASH, at },
});

const sessionEnded = (at = '2025-03-04T11:00:00.000Z'): SessionEvent => ({
  type: 'SessionEnded',
  data: { sessionId: 41, reason: 'deleted', at },
});

const handOver = (tokenHash: string, now: string, cookieHash = COOKIE_HASH): SessionCommand => ({
  type: 'HandOverSession',
  tokenHash,
  cookieHash,
  now,
});

const endSession = (tenantId: number, now = '2025-03-04T11:00:00.000Z'): SessionCommand => ({
  type: 'EndSession',
  tenantId,
  now,
});

describe('session decider', () => {
  describe('lifetimes (spec §8)', () => {
    it('keeps a handover token 5 minutes and a session 7.5 days, in milliseconds', () => {
      expect(HANDOVER_TOKEN_LIFETIME_MS).to.equal(300_000);
      expect(SESSION_LIFETIME_MS).to.equal(648_000_000);
    });
  });

  describe('CreateSession', () => {
    it('creates a session whose token expires 5 minutes and whose session expires 7.5 days after creation', () => {
      given(sessionDecider, []).when(createSession).then([sessionCreated]);
    });

    it('computes both expiries from a creation time with milliseconds, across a month end', () => {
      given(sessionDecider, [])
        .when({ ...createSession, createdAt: '2025-01-28T23:58:30.123Z' })
        .then([
          {
            type: 'SessionCreated',
            data: {
              ...createdData,
              createdAt: '2025-01-28T23:58:30.123Z',
              handoverExpiresAt: '2025-01-29T00:03:30.123Z',
              expiresAt: '2025-02-05T11:58:30.123Z',
            },
          },
        ]);
    });

    it('copies the scopes instead of sharing the command array', () => {
      const scopes = ['launch'];
      const [event] = sessionDecider.decide({ ...createSession, scopes }, sessionDecider.initialState);
      expect(event?.type).to.equal('SessionCreated');
      const data = event!.data as SessionCreatedData;
      expect(data.scopes).to.deep.equal(['launch']);
      expect(data.scopes).to.not.equal(scopes);
    });

    it('refuses to create a session that already exists', () => {
      given(sessionDecider, [sessionCreated]).when(createSession).thenThrows('SessionExists', 'conflict');
    });
  });

  describe('HandOverSession', () => {
    it('hands over an inactive session for its token within 5 minutes', () => {
      given(sessionDecider, [sessionCreated])
        .when(handOver(TOKEN_HASH, '2025-03-04T10:01:00.000Z'))
        .then([sessionHandedOver('2025-03-04T10:01:00.000Z')]);
    });

    it('accepts the token one millisecond before it expires', () => {
      given(sessionDecider, [sessionCreated])
        .when(handOver(TOKEN_HASH, '2025-03-04T10:04:59.999Z'))
        .then([sessionHandedOver('2025-03-04T10:04:59.999Z')]);
    });

    it('refuses a token for a session that does not exist', () => {
      given(sessionDecider, [])
        .when(handOver(TOKEN_HASH, CREATED_AT))
        .thenThrows('HandoverTokenInvalid', 'unauthorized');
    });

    it('refuses a token whose hash is not the session token', () => {
      given(sessionDecider, [sessionCreated])
        .when(handOver(`${TOKEN_HASH.slice(0, -1)}2`, '2025-03-04T10:01:00.000Z'))
        .thenThrows('HandoverTokenInvalid', 'unauthorized');
    });

    it('refuses a token used twice', () => {
      given(sessionDecider, [sessionCreated, sessionHandedOver()])
        .when(handOver(TOKEN_HASH, '2025-03-04T10:02:00.000Z', 'another-cookie-hash'))
        .thenThrows('HandoverTokenInvalid', 'unauthorized');
    });

    it('refuses a token exactly 5 minutes after creation as expired', () => {
      given(sessionDecider, [sessionCreated])
        .when(handOver(TOKEN_HASH, HANDOVER_EXPIRES_AT))
        .thenThrows('HandoverTokenExpired', 'unauthorized');
    });

    it('refuses a token later than 5 minutes after creation as expired', () => {
      given(sessionDecider, [sessionCreated])
        .when(handOver(TOKEN_HASH, '2025-03-05T10:00:00.000Z'))
        .thenThrows('HandoverTokenExpired', 'unauthorized');
    });

    it('answers an expired wrong token as invalid, not as expired', () => {
      given(sessionDecider, [sessionCreated])
        .when(handOver('0'.repeat(64), '2025-03-04T10:06:00.000Z'))
        .thenThrows('HandoverTokenInvalid', 'unauthorized');
    });

    it('refuses the token of a session ended before its handover', () => {
      given(sessionDecider, [sessionCreated, sessionEnded('2025-03-04T10:02:00.000Z')])
        .when(handOver(TOKEN_HASH, '2025-03-04T10:03:00.000Z'))
        .thenThrows('HandoverTokenInvalid', 'unauthorized');
    });

    it('refuses the token of a session ended after its handover', () => {
      given(sessionDecider, [sessionCreated, sessionHandedOver(), sessionEnded('2025-03-04T10:02:00.000Z')])
        .when(handOver(TOKEN_HASH, '2025-03-04T10:03:00.000Z'))
        .thenThrows('HandoverTokenInvalid', 'unauthorized');
    });

    it('refuses a live token of a session past its lifetime (only reachable with inconsistent stored expiries)', () => {
      // decide() derives handoverExpiresAt < expiresAt, so this guard only protects against a
      // SessionCreated whose expiries were written inconsistently.
      const inconsistent: SessionEvent = {
        type: 'SessionCreated',
        data: { ...createdData, handoverExpiresAt: '2025-03-20T00:00:00.000Z' },
      };
      given(sessionDecider, [inconsistent])
        .when(handOver(TOKEN_HASH, EXPIRES_AT))
        .thenThrows('SessionExpired', 'unauthorized');
    });
  });

  describe('EndSession', () => {
    it('ends an active session', () => {
      given(sessionDecider, [sessionCreated, sessionHandedOver()]).when(endSession(7)).then([sessionEnded()]);
    });

    it('ends a session that was never handed over', () => {
      given(sessionDecider, [sessionCreated])
        .when(endSession(7, '2025-03-04T10:03:00.000Z'))
        .then([sessionEnded('2025-03-04T10:03:00.000Z')]);
    });

    it("answers another tenant's session as not found", () => {
      given(sessionDecider, [sessionCreated, sessionHandedOver()])
        .when(endSession(8))
        .thenThrows('SessionNotFound', 'not_found');
    });

    it("answers another tenant's ended session as not found too", () => {
      given(sessionDecider, [sessionCreated, sessionEnded()])
        .when(endSession(8))
        .thenThrows('SessionNotFound', 'not_found');
    });

    it('answers a missing session as not found', () => {
      given(sessionDecider, []).when(endSession(7)).thenThrows('SessionNotFound', 'not_found');
    });

    it('decides nothing for a session already ended', () => {
      given(sessionDecider, [sessionCreated, sessionHandedOver(), sessionEnded()])
        .when(endSession(7, '2025-03-04T12:00:00.000Z'))
        .then([]);
    });
  });

  describe('evolve', () => {
    it('starts with no session', () => {
      given(sessionDecider, []).thenState({ status: 'none' });
    });

    it('makes a created session inactive with its token current and no cookie', () => {
      given(sessionDecider, [sessionCreated]).thenState({
        status: 'inactive',
        ...createdData,
        currentTokenHash: TOKEN_HASH,
        cookieHash: null,
        lastModifiedAt: CREATED_AT,
      });
    });

    it('makes a handed-over session active, deletes its token and keeps the cookie hash', () => {
      given(sessionDecider, [sessionCreated, sessionHandedOver('2025-03-04T10:01:00.000Z')]).thenState({
        status: 'active',
        ...createdData,
        currentTokenHash: null,
        cookieHash: COOKIE_HASH,
        lastModifiedAt: '2025-03-04T10:01:00.000Z',
      });
    });

    it('makes an ended session ended and clears its cookie hash', () => {
      given(sessionDecider, [
        sessionCreated,
        sessionHandedOver('2025-03-04T10:01:00.000Z'),
        sessionEnded('2025-03-04T11:00:00.000Z'),
      ]).thenState({
        status: 'ended',
        ...createdData,
        currentTokenHash: null,
        cookieHash: null,
        lastModifiedAt: '2025-03-04T11:00:00.000Z',
      });
    });

    it('clears the unused token of a session ended before its handover', () => {
      given(sessionDecider, [sessionCreated, sessionEnded('2025-03-04T10:02:00.000Z')]).thenState({
        status: 'ended',
        ...createdData,
        currentTokenHash: null,
        cookieHash: null,
        lastModifiedAt: '2025-03-04T10:02:00.000Z',
      });
    });

    it('ignores a handover or an end without a created session', () => {
      given(sessionDecider, [sessionHandedOver()]).thenState({ status: 'none' });
      given(sessionDecider, [sessionEnded()]).thenState({ status: 'none' });
    });
  });

  describe('isExpired', () => {
    it('is false before the session lifetime and true from its end on', () => {
      expect(isExpired(createdData, '2025-03-11T21:59:59.999Z')).to.equal(false);
      expect(isExpired(createdData, EXPIRES_AT)).to.equal(true);
      expect(isExpired(createdData, '2025-03-12T00:00:00.000Z')).to.equal(true);
    });
  });

  describe('sessionStream', () => {
    it('names the stream session-<id>', () => {
      expect(sessionStream(41)).to.equal('session-41');
    });
  });
});
