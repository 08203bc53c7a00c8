import { expect } from 'chai';
import {
  identifierKey,
  type ReservationCommand,
  type ReservationEvent,
  reservationDecider,
  reservationStream,
  tenantNameKey,
} from '../../src/domain/reservation/reservation.js';
import { given } from '../support/given.js';

const KEY = 'Patient-identifier:7:urn:oid:1.2.276.0.76.4.8|P-000123';

const claim = (ownerType: string, ownerId: string, now = '2025-03-04T09:00:00.000Z'): ReservationCommand => ({
  type: 'ClaimReservation',
  key: KEY,
  ownerType,
  ownerId,
  now,
});

const release = (
  ownerType: string,
  ownerId: string,
  now = '2025-03-05T09:00:00.000Z',
): ReservationCommand => ({
  type: 'ReleaseReservation',
  ownerType,
  ownerId,
  now,
});

const claimed = (ownerType: string, ownerId: string, at = '2025-03-04T09:00:00.000Z'): ReservationEvent => ({
  type: 'ReservationClaimed',
  data: { key: KEY, ownerType, ownerId, at },
});

const released = (ownerType: string, ownerId: string, at = '2025-03-05T09:00:00.000Z'): ReservationEvent => ({
  type: 'ReservationReleased',
  data: { key: KEY, ownerType, ownerId, at },
});

describe('reservation decider', () => {
  describe('ClaimReservation', () => {
    it('claims a free value for its owner', () => {
      given(reservationDecider, [])
        .when(claim('Patient', '12'))
        .then([claimed('Patient', '12')]);
    });

    it('decides nothing when the owner claims its own value again', () => {
      given(reservationDecider, [claimed('Patient', '12')])
        .when(claim('Patient', '12', '2025-03-06T09:00:00.000Z'))
        .then([]);
    });

    it('refuses a value claimed by another owner of the same type', () => {
      const error = given(reservationDecider, [claimed('Patient', '12')])
        .when(claim('Patient', '13'))
        .thenThrows('ReservationTaken', 'conflict');
      expect(error.message).to.equal('already reserved by Patient/12');
    });

    it('refuses a value claimed by an owner of another type with the same id', () => {
      given(reservationDecider, [claimed('Patient', '12')])
        .when(claim('Practitioner', '12'))
        .thenThrows('ReservationTaken', 'conflict');
    });

    it('lets another owner claim a released value', () => {
      given(reservationDecider, [claimed('Patient', '12'), released('Patient', '12')])
        .when(claim('Patient', '13', '2025-03-06T09:00:00.000Z'))
        .then([claimed('Patient', '13', '2025-03-06T09:00:00.000Z')]);
    });
  });

  describe('ReleaseReservation', () => {
    it('releases a value claimed by its owner', () => {
      given(reservationDecider, [claimed('Patient', '12')])
        .when(release('Patient', '12'))
        .then([released('Patient', '12')]);
    });

    it('decides nothing for a free value', () => {
      given(reservationDecider, []).when(release('Patient', '12')).then([]);
    });

    it('decides nothing for a value already released', () => {
      given(reservationDecider, [claimed('Patient', '12'), released('Patient', '12')])
        .when(release('Patient', '12'))
        .then([]);
    });

    it('decides nothing when another owner id asks to release', () => {
      given(reservationDecider, [claimed('Patient', '12')])
        .when(release('Patient', '13'))
        .then([]);
    });

    it('decides nothing when an owner of another type asks to release', () => {
      given(reservationDecider, [claimed('Patient', '12')])
        .when(release('Encounter', '12'))
        .then([]);
    });
  });

  describe('evolve', () => {
    it('starts free', () => {
      given(reservationDecider, []).thenState({ status: 'free' });
    });

    it('holds the key and owner once claimed', () => {
      given(reservationDecider, [claimed('Patient', '12')]).thenState({
        status: 'claimed',
        key: KEY,
        ownerType: 'Patient',
        ownerId: '12',
      });
    });

    it('is free again once released', () => {
      given(reservationDecider, [claimed('Patient', '12'), released('Patient', '12')]).thenState({
        status: 'free',
      });
    });
  });

  describe('keys and stream names', () => {
    it('names a reservation stream by the first 40 hex digits of the SHA-256 of its key', () => {
      // printf %s 'tenant-name:klinikum nord' | sha256sum | cut -c1-40
      expect(reservationStream('tenant-name:klinikum nord')).to.equal(
        'reservation-b9bf531732c7d6ce4e99b8d8b508fdddbc701f14',
      );
    });

    it('keeps identifier values out of the stream name', () => {
      const stream = reservationStream(KEY);
      expect(stream).to.match(/^reservation-[0-9a-f]{40}$/);
      expect(stream).to.not.include('P-000123');
      expect(reservationStream(KEY)).to.equal(stream);
      expect(reservationStream(`${KEY}4`)).to.not.equal(stream);
    });

    it('keys a tenant name case-insensitively and trimmed', () => {
      expect(tenantNameKey('  Klinikum NORD ')).to.equal('tenant-name:klinikum nord');
    });

    it('keys an identifier by resource type, tenant, system and value', () => {
      expect(identifierKey('Patient', 7, 'urn:oid:1.2.276.0.76.4.8', 'P-000123')).to.equal(KEY);
    });
  });
});
