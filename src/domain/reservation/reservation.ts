/**
 * Reservations enforce uniqueness race-free (docs/architecture.md "The write pipeline"): a value (a tenant name,
 * a Patient identifier in a tenant) is claimed by appending to a stream named after the value
 * with the expected state `no_stream` (or the released revision), never by checking a read model.
 */

import { createHash } from 'node:crypto';
import { comparableText } from '../clinical/identifier.js';
import { type Decider, DomainError, type Event } from '../decider.js';

export type ReservationEvent =
  | Event<'ReservationClaimed', { key: string; ownerType: string; ownerId: string; at: string }>
  | Event<'ReservationReleased', { key: string; ownerType: string; ownerId: string; at: string }>;

export type Reservation =
  | { readonly status: 'free' }
  | {
      readonly status: 'claimed';
      readonly key: string;
      readonly ownerType: string;
      readonly ownerId: string;
    };

export type ReservationCommand =
  | {
      readonly type: 'ClaimReservation';
      readonly key: string;
      readonly ownerType: string;
      readonly ownerId: string;
      readonly now: string;
    }
  | {
      readonly type: 'ReleaseReservation';
      readonly ownerType: string;
      readonly ownerId: string;
      readonly now: string;
    };

export const reservationDecider: Decider<ReservationCommand, Reservation, ReservationEvent> = {
  initialState: { status: 'free' },
  evolve: (state, event) => {
    switch (event.type) {
      case 'ReservationClaimed':
        return {
          status: 'claimed',
          key: event.data.key,
          ownerType: event.data.ownerType,
          ownerId: event.data.ownerId,
        };
      case 'ReservationReleased':
        return { status: 'free' };
      default: {
        const _exhaustive: never = event;
        return state;
      }
    }
  },
  decide: (command, state) => {
    switch (command.type) {
      case 'ClaimReservation':
        if (state.status === 'claimed') {
          if (state.ownerType === command.ownerType && state.ownerId === command.ownerId) return [];
          throw new DomainError(
            'conflict',
            'ReservationTaken',
            `already reserved by ${state.ownerType}/${state.ownerId}`,
          );
        }
        return [
          {
            type: 'ReservationClaimed',
            data: {
              key: command.key,
              ownerType: command.ownerType,
              ownerId: command.ownerId,
              at: command.now,
            },
          },
        ];
      case 'ReleaseReservation':
        if (
          state.status !== 'claimed' ||
          state.ownerType !== command.ownerType ||
          state.ownerId !== command.ownerId
        )
          return [];
        return [
          {
            type: 'ReservationReleased',
            data: { key: state.key, ownerType: state.ownerType, ownerId: state.ownerId, at: command.now },
          },
        ];
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};

/**
 * Stream name of the reservation of `key`. The key is hashed so stream names stay short and
 * carry no identifier values (which may be patient numbers) into logs.
 */
export const reservationStream = (key: string): string =>
  `reservation-${createHash('sha256').update(key).digest('hex').slice(0, 40)}`;

/** Reservation key of a tenant name (case-insensitive, trimmed). */
export const tenantNameKey = (name: string): string => `tenant-name:${name.trim().toLowerCase()}`;

/**
 * Reservation key of a resource identifier within a tenant: `<type>-identifier:<tenant>:<system>|<value>`,
 * system and value in NFC, so identifiers differing only in Unicode normalisation share one
 * reservation (docs/interface.md §2.5).
 */
export const identifierKey = (
  resourceType: string,
  tenantId: number,
  system: string,
  value: string,
): string => `${resourceType}-identifier:${tenantId}:${comparableText(system)}|${comparableText(value)}`;
