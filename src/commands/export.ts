/**
 * Commands of the report export (issue 15): the installation id, requeueing an abandoned report,
 * and the sink's configuration and backlog choice. The exporter's own outcomes are recorded in
 * `integration/export/exporter.ts` through the same handler.
 */
import { v4 as uuidv4 } from 'uuid';
import { exportDecider, exportStream } from '../domain/export/export.js';
import {
  EXPORT_SINK_STREAM,
  type ExportBacklogDecidedData,
  type ExportSinkState,
  exportSinkDecider,
} from '../domain/export/export-sink.js';
import { INSTALLATION_STREAM, installationDecider } from '../domain/export/installation.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';

/**
 * The installation id of this store, created on first use (InstallationCreated, expected
 * `no_stream`: two processes racing create one, the loser reads the winner's).
 */
export const installationId = async (ctx: CommandContext): Promise<string> => {
  const { result } = await execute(ctx, async (uow) => {
    await uow.decide(INSTALLATION_STREAM, installationDecider, {
      type: 'CreateInstallation',
      data: { installationId: uuidv4(), at: uow.now },
    });
    const state = await uow.load(INSTALLATION_STREAM, installationDecider);
    return state.installationId!;
  });
  return result;
};

/**
 * Requeues the abandoned export of a QuestionnaireResponse (`casebook export retry`): its next
 * attempt is due at once, with a fresh attempt budget.
 * @returns the versions requeued.
 * @throws {DomainError} `ExportNotAbandoned` when nothing of it is abandoned.
 */
export const requeueExport = async (
  ctx: CommandContext,
  responseId: number,
  by: string,
): Promise<number[]> => {
  const { events } = await execute(ctx, (uow) =>
    uow.decide(exportStream(responseId), exportDecider, {
      type: 'RequeueExport',
      data: { responseId, by, at: uow.now },
    }),
  );
  return events.map((e) => (e.data as { version: number }).version);
};

/** Records the sink the exporter runs against, when it differs from the last one recorded. */
export const configureSink = async (ctx: CommandContext, sink: string): Promise<ExportSinkState> => {
  const { result } = await execute(ctx, async (uow) => {
    await uow.decide(EXPORT_SINK_STREAM, exportSinkDecider, {
      type: 'ConfigureSink',
      data: { sink, at: uow.now },
    });
    return uow.load(EXPORT_SINK_STREAM, exportSinkDecider);
  });
  return result;
};

/** Records the backlog choice for the current sink (the first choice stands). */
export const decideBacklog = async (
  ctx: CommandContext,
  choice: Omit<ExportBacklogDecidedData, 'at'>,
): Promise<ExportSinkState> => {
  const { result } = await execute(ctx, async (uow) => {
    await uow.decide(EXPORT_SINK_STREAM, exportSinkDecider, {
      type: 'DecideBacklog',
      data: { ...choice, at: uow.now },
    });
    return uow.load(EXPORT_SINK_STREAM, exportSinkDecider);
  });
  return result;
};
