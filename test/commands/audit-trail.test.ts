/**
 * The audit trail's writer (issue 14; docs/architecture.md "Audit trail"): group commit — many
 * concurrent records share one append, one `AuditEventsRecorded` event per tenant of a batch — each
 * record durable when its promise resolves; a failed append rejects its whole batch and the next
 * batch still goes through; the audit export of one patient keeps only that patient's records of a
 * batch. The decider is tested given/when/then. On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import { AuditTrail } from '../../src/commands/audit.js';
import {
  AUDIT_EVENTS_RECORDED,
  type AuditEventsRecordedData,
  type AuditRecord,
  auditDecider,
} from '../../src/domain/audit/audit.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { auditEventsIn } from '../../src/fhir/audit-event.js';
import { patientEvents } from '../../src/queries/patient-events.js';
import { testCommandContext } from '../support/commands.js';
import { closeAfterEach, openStore, testDatabases } from '../support/databases.js';
import { given } from '../support/given.js';

const record = (patientId: number, tenantId: number | null = 1): AuditRecord => ({
  id: uuid(),
  tenantId,
  interaction: 'read',
  action: 'R',
  recorded: '2026-03-01T10:00:00.000Z',
  status: 200,
  agent: { kind: 'client', clientId: 'ehr-backend' },
  entities: [{ reference: `Patient/${patientId}`, patientId }],
});

describe('audit decider', () => {
  it('records a batch as one AuditEventsRecorded event, and an empty batch as nothing', () => {
    const records = [record(1), record(2)];
    given(auditDecider, [])
      .when({ type: 'RecordAuditEvents', records })
      .then([{ type: 'AuditEventsRecorded', data: { records } }]);
    given(auditDecider, []).when({ type: 'RecordAuditEvents', records: [] }).then([]);
  });

  it('counts the records of batches and of single events of an older log alike', () => {
    given(auditDecider, [
      { type: 'AuditEventsRecorded', data: { records: [record(1), record(2)] } },
      { type: 'AuditEventRecorded', data: { record: record(3) } },
    ]).thenState({ recorded: 3 });
  });
});

for (const db of testDatabases) {
  describe(`audit trail on ${db.name}`, () => {
    const cleanups = closeAfterEach();

    const open = async () => {
      const { opened, store } = await openStore(db, cleanups);
      const appends: number[] = [];
      const context = (over: EventStore = store) =>
        testCommandContext(over, opened.sql, appends, {
          tenantId: null,
          actor: { type: 'system', id: 'casebook-audit' },
          requestId: null,
        });
      const batches = async () => (await store.readAll()).filter((e) => e.type === AUDIT_EVENTS_RECORDED);
      return { store, context, appends, batches };
    };

    it('group-commits concurrent records: fewer appends than records, each record in the log once when it resolves', async () => {
      const { context, appends, batches } = await open();
      const trail = new AuditTrail(() => context());
      const records = Array.from({ length: 40 }, (_, i) => record(i + 1, i % 2 === 0 ? 1 : 2));
      const seen: string[][] = [];
      await Promise.all(
        records.map(async (r) => {
          await trail.record(r);
          // Durable when it resolves: the record is already readable in the log.
          const logged = (await batches()).flatMap((e) => auditEventsIn(e).map((a) => a.resource.id));
          seen.push(logged);
          expect(logged).to.include(r.id);
        }),
      );
      await trail.drain();
      const events = await batches();
      const ids = events.flatMap((e) => (e.data as AuditEventsRecordedData).records.map((r) => r.id));
      expect([...ids].sort()).to.deep.equal(records.map((r) => r.id).sort());
      expect(appends.length).to.be.below(records.length);
      // One event per tenant of a batch, carrying that tenant; one stream per event, written once.
      for (const e of events) {
        const tenants = new Set((e.data as AuditEventsRecordedData).records.map((r) => r.tenantId));
        expect([...tenants]).to.deep.equal([e.metadata.tenantId]);
        expect(e.streamName).to.match(/^audit-[0-9a-f-]{36}$/);
        expect(e.revision).to.equal(0n);
      }
      expect(new Set(events.map((e) => e.streamName)).size).to.equal(events.length);
      expect(seen).to.have.length(40);
    });

    it('rejects every record of a batch whose append failed, writes none of them, and goes on with the next', async () => {
      const { store, context, batches } = await open();
      let failNext = true;
      // The real store, with one append refused as an unreachable database would.
      const flaky = Object.create(store) as EventStore;
      flaky.appendMany = async (requests, options) => {
        if (failNext) {
          failNext = false;
          throw new Error('connection terminated');
        }
        return store.appendMany(requests, options);
      };
      const trail = new AuditTrail(() => context(flaky));
      const first = [record(1), record(2), record(3)];
      const outcomes = await Promise.allSettled(first.map((r) => trail.record(r)));
      expect(outcomes.map((o) => o.status)).to.deep.equal(['rejected', 'rejected', 'rejected']);
      expect(await batches()).to.deep.equal([]);
      const later = record(4);
      await trail.record(later);
      const ids = (await batches()).flatMap((e) => auditEventsIn(e).map((a) => a.resource.id));
      expect(ids).to.deep.equal([later.id]);
    });

    it("exports of a batch only the records about the patient asked for, and none of another tenant's", async () => {
      const { context, batches } = await open();
      const trail = new AuditTrail(() => context());
      const mine = [record(5), record(5)];
      await Promise.all([...mine, record(6), record(6), record(5, 2)].map((r) => trail.record(r)));
      expect((await batches()).length).to.be.at.least(1);
      const { store } = context();
      const exported = [];
      for await (const e of patientEvents(store, 1, 5)) exported.push(e);
      const records = exported.flatMap((e) => (e.data as AuditEventsRecordedData).records);
      expect(records.map((r) => r.id).sort()).to.deep.equal(mine.map((r) => r.id).sort());
      expect(exported.every((e) => e.type === AUDIT_EVENTS_RECORDED && e.metadata.tenantId === 1)).to.equal(
        true,
      );
    });
  });
}
