/**
 * The report export deciders (issue 15): queueing once, outcomes per attempt, abandonment and
 * requeue; the installation created once; the sink and its first backlog choice.
 */
import { describe, it } from 'mocha';
import {
  type ExportCommand,
  type ExportEvent,
  exportDecider,
  exportKey,
  type ReportExportFailedData,
  type ReportExportQueuedData,
} from '../../src/domain/export/export.js';
import { type ExportSinkEvent, exportSinkDecider } from '../../src/domain/export/export-sink.js';
import { installationDecider } from '../../src/domain/export/installation.js';
import { given } from '../support/given.js';

const AT = '2026-03-01T10:00:00.000Z';
const INSTALLATION = '0b6f3c1e-1d2a-4c5b-9e8f-7a6b5c4d3e2f';

const queuedData: ReportExportQueuedData = {
  responseId: 6,
  version: 1,
  key: exportKey(INSTALLATION, 6, 1),
  installationId: INSTALLATION,
  text: 'Chest CT\n\nFindings: Small nodule',
  sha256: 'f'.repeat(64),
  byteLength: 32,
  at: AT,
};
const queued: ExportEvent = { type: 'ReportExportQueued', data: queuedData };
const failure = (attempt: number): ReportExportFailedData => ({
  responseId: 6,
  version: 1,
  attempt,
  error: 'HTTP 503 from the export sink',
  nextAttemptAt: AT,
  at: AT,
});
const failed = (attempt: number): ExportEvent => ({ type: 'ReportExportFailed', data: failure(attempt) });
const abandoned: ExportEvent = {
  type: 'ReportExportAbandoned',
  data: { responseId: 6, version: 1, attempt: 2, reason: 'gave up after 2 attempts', at: AT },
};
const requeue: ExportCommand = { type: 'RequeueExport', data: { responseId: 6, by: 'cli:it', at: AT } };
const requeued: ExportEvent = {
  type: 'ReportExportRequeued',
  data: { responseId: 6, version: 1, by: 'cli:it', at: AT },
};
const delivery = (attempt: number): ExportCommand => ({
  type: 'RecordDelivery',
  data: {
    responseId: 6,
    version: 1,
    sink: 'http://receiver',
    attempt,
    key: queuedData.key,
    sha256: queuedData.sha256,
    at: AT,
  },
});

describe('export decider', () => {
  it('queues a version once: the text recorded first is the text for good', () => {
    given(exportDecider, []).when({ type: 'QueueExport', data: queuedData }).then([queued]);
    given(exportDecider, [queued])
      .when({ type: 'QueueExport', data: { ...queuedData, text: 'other', sha256: '0'.repeat(64) } })
      .then([]);
  });

  it('records a failure per attempt, and the same attempt twice as nothing', () => {
    given(exportDecider, [queued])
      .when({ type: 'RecordFailure', data: failure(1) })
      .then([failed(1)]);
    given(exportDecider, [queued, failed(1)])
      .when({ type: 'RecordFailure', data: failure(1) })
      .then([]);
  });

  it('abandons with the failure that reached the limit, in one decision', () => {
    given(exportDecider, [queued, failed(1)])
      .when({ type: 'RecordFailure', data: failure(2), abandon: 'gave up after 2 attempts' })
      .then([failed(2), abandoned]);
  });

  it('records no failure after an abandonment until a requeue', () => {
    given(exportDecider, [queued, failed(1), failed(2), abandoned])
      .when({ type: 'RecordFailure', data: failure(3) })
      .then([]);
    given(exportDecider, [queued, failed(1), failed(2), abandoned, requeued])
      .when({ type: 'RecordFailure', data: failure(3) })
      .then([failed(3)]);
  });

  it('requeues abandoned versions only; refuses when none is abandoned', () => {
    given(exportDecider, [queued, failed(1), failed(2), abandoned])
      .when(requeue)
      .then([requeued]);
    given(exportDecider, [queued, failed(1)])
      .when(requeue)
      .thenThrows('ExportNotAbandoned', 'conflict');
  });

  it('records a delivery once, with the key and hash of what was sent', () => {
    const exportedData = {
      responseId: 6,
      version: 1,
      sink: 'http://receiver',
      attempt: 2,
      key: queuedData.key,
      sha256: queuedData.sha256,
      at: AT,
    };
    const exported: ExportEvent = { type: 'ReportExported', data: exportedData };
    given(exportDecider, [queued, failed(1)])
      .when(delivery(2))
      .then([exported]);
    given(exportDecider, [queued, failed(1), exported])
      .when(delivery(3))
      .then([]);
  });
});

describe('installation decider', () => {
  it('creates the installation once; a racing second creation decides nothing', () => {
    const created = { type: 'InstallationCreated' as const, data: { installationId: INSTALLATION, at: AT } };
    given(installationDecider, []).when({ type: 'CreateInstallation', data: created.data }).then([created]);
    given(installationDecider, [created])
      .when({ type: 'CreateInstallation', data: { installationId: 'another', at: AT } })
      .then([]);
  });
});

describe('export sink decider', () => {
  const configured: ExportSinkEvent = { type: 'ExportSinkConfigured', data: { sink: 'http://a', at: AT } };
  const decided: ExportSinkEvent & { type: 'ExportBacklogDecided' } = {
    type: 'ExportBacklogDecided',
    data: { choice: 'skip', source: 'EXPORT_BACKLOG', at: AT },
  };
  it('records a sink when it is new, and the first backlog choice for it only', () => {
    const sink = { sink: 'http://a', at: AT };
    given(exportSinkDecider, []).when({ type: 'ConfigureSink', data: sink }).then([configured]);
    given(exportSinkDecider, [configured]).when({ type: 'ConfigureSink', data: sink }).then([]);
    given(exportSinkDecider, [configured])
      .when({ type: 'DecideBacklog', data: decided.data })
      .then([decided]);
    given(exportSinkDecider, [configured, decided])
      .when({ type: 'DecideBacklog', data: { ...decided.data, choice: 'all' } })
      .then([]);
  });
});
