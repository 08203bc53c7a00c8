/**
 * `casebook` — the command line (docs/architecture.md "Layers" cli/): serve, project, replay, tenants, clients,
 * seed, events, verify, keys. Commands that print data print JSON.
 */

import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import cliProgress from 'cli-progress';
import { Command, Option } from 'commander';
import { type Casebook, lockDataDir, openCasebook } from '../casebook.js';
import { erasePatient, erasureAuditEntity } from '../commands/erasure.js';
import { requeueExport } from '../commands/export.js';
import { generateSecret } from '../commands/secrets.js';
import {
  applySeed,
  bootstrapDemo,
  DEMO_QUESTIONNAIRE,
  readSeed,
  upsertQuestionnaire,
} from '../commands/seed.js';
import { createTenant, registerClient } from '../commands/tenants.js';
import { loadConfig } from '../config.js';
import {
  AUDIT_EVENT_RECORDED,
  AUDIT_EVENTS_RECORDED,
  type AuditEventRecordedData,
} from '../domain/audit/audit.js';
import { DomainError } from '../domain/decider.js';
import { newId } from '../domain/ids.js';
import { parsePosition, positionToString, type RecordedEvent } from '../eventstore/port.js';
import { Sealer } from '../eventstore/sealer.js';
import { loadKek, parseKek, replaceKekFile, rotateKeys } from '../eventstore/shredding/index.js';
import { logHead, parseHead, type VerifyResult, verifyAgainst, verifyLog } from '../eventstore/verify.js';
import { auditEventOf, auditEventsIn } from '../fhir/audit-event.js';
import type { BacklogDecision } from '../integration/export/exporter.js';
import { forgetExported } from '../integration/export/sinks.js';
import { signLaunch } from '../integration/launch-signature.js';
import { replayUntil } from '../projections/investigation.js';
import { patientEvents } from '../queries/patient-events.js';

const print = (value: unknown) => console.log(JSON.stringify(value, null, 2));

/** Parses an ISO 8601 instant given for `name`. @throws {Error} when it is not one. */
const instant = (name: string) => (value: string) => {
  if (Number.isNaN(Date.parse(value))) throw new Error(`${name} must be an ISO 8601 instant, not ${value}`);
  return new Date(value).toISOString();
};

const collect = (value: string, previous: string[]) => [...previous, value];

/** Runs `fn` with casebook open and closes it after, turning refusals into one-line errors. */
const withCasebook = async (
  fn: (casebook: Casebook) => Promise<void>,
  options: { project?: boolean } = {},
) => {
  const casebook = await openCasebook(loadConfig(), { project: options.project ?? true, export: false });
  try {
    await fn(casebook);
  } finally {
    await casebook.close();
  }
};

/** Who runs this command line, as its events and AuditEvents name it. */
const cliActor = (): string => `cli:${process.env.USER ?? 'operator'}`;

const cliContext = (casebook: Casebook, tenantId: number | null) =>
  casebook.context({ tenantId, actor: { type: 'system', id: cliActor() } });

const eventJson = (e: RecordedEvent) => ({
  id: e.id,
  stream: e.streamName,
  revision: Number(e.revision),
  position: positionToString(e.position),
  type: e.type,
  data: e.data,
  // Its patient was erased: the data is gone for good, the rest stays (docs/architecture.md "Erasure").
  ...(e.erased ? { erased: true } : {}),
  metadata: e.metadata,
});

/**
 * An event of `audit export`: an audit batch (only its records about the patient, see
 * queries/patient-events.ts) shows their AuditEvent resources next to the records, a single
 * AuditEventRecorded of an older log its one resource.
 */
const auditExportJson = (e: RecordedEvent) => {
  const json = eventJson(e);
  if (e.type === AUDIT_EVENTS_RECORDED)
    return { ...json, auditEvents: auditEventsIn(e).map((a) => a.resource) };
  return e.type === AUDIT_EVENT_RECORDED
    ? { ...json, auditEvent: auditEventOf(e.data as AuditEventRecordedData) }
    : json;
};

export const program = new Command('casebook')
  .description('casebook: event-sourced backend for clinical structured reporting')
  .showHelpAfterError();

program
  .command('serve')
  .description('run the HTTP hosts (auth, app, FHIR, launch) and, unless --no-project, the projection runner')
  .option('--no-project', 'do not run the projection runner in this process')
  .option('--no-export', 'do not run the report exporter in this process')
  .option(
    '--no-seal',
    'do not seal the event log in this process (docs/architecture.md "Tamper-evident log")',
  )
  .action(async (options: { project: boolean; export: boolean; seal: boolean }) => {
    const config = loadConfig();
    const casebook = await openCasebook(config, {
      project: options.project,
      export: options.export,
      seal: options.seal,
      background: true,
    });
    if (config.seedFile) {
      const report = await applySeed(casebook, readSeed(config.seedFile));
      casebook.logger.info(
        { tenants: report.tenants.length, clients: report.clients.length },
        'seed applied',
      );
    } else {
      const demo = await bootstrapDemo(casebook);
      if (demo) {
        console.log('\nEmpty event store: created the demo tenant "Demo Hospital" and its API client.');
        console.log('Client credentials (shown once; copy them now):\n');
        console.log(`  export CASEBOOK_CLIENT_ID=${demo.clientId}`);
        console.log(`  export CASEBOOK_CLIENT_SECRET=${demo.clientSecret}\n`);
      }
    }
    await listen(casebook);
  });

/**
 * Serves casebook's HTTP hosts until SIGINT/SIGTERM, then closes everything.
 * @param closed runs once casebook is closed, before the process exits.
 */
const listen = async (casebook: Casebook, closed?: () => void): Promise<void> => {
  const { config } = casebook;
  // Loaded here, not at the top: the HTTP hosts (Koa, the SDC's FHIRPath, prom-client) add ~170 ms
  // to the start of every other command (replay, verify, tenants…).
  const { createHttpApp } = await import('../http/app.js');
  const server: Server = createHttpApp(casebook).listen(config.port, config.host);
  await once(server, 'listening');
  casebook.logger.info(
    {
      port: config.port,
      store: casebook.store.kind,
      auth: config.authUrl,
      fhir: config.fhirUrl,
      app: config.appUrl,
    },
    'casebook listening',
  );
  const shutdown = async () => {
    server.close();
    server.closeAllConnections();
    await casebook.close();
    closed?.();
    process.exit(0);
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
};

program
  .command('hospital-demo')
  .description(
    'casebook as a hospital would run it (issue 6): the launcher configured, the demo report, and a demo HTTP sink that prints every exported report',
  )
  .option('--sink-port <port>', 'port of the demo sink on 127.0.0.1', '8099')
  .action(async (o: { sinkPort: string }) => {
    const launcherSecret = generateSecret();
    const sharedSecret = generateSecret();
    // A fresh data directory per run (its secrets are new each run), removed when the demo stops.
    const temporary = process.env.DATA_DIR
      ? undefined
      : mkdtempSync(join(tmpdir(), 'casebook-hospital-demo-'));
    const config = loadConfig({
      ...process.env,
      DATA_DIR: process.env.DATA_DIR ?? temporary,
      EXPORT_SINK: `http://127.0.0.1:${o.sinkPort}/reports`,
      LAUNCHER_CLIENT_ID: 'hospital-launcher',
      LAUNCHER_CLIENT_SECRET: launcherSecret,
      LAUNCHER_SHARED_SECRET: sharedSecret,
    });
    const DEMO_LAUNCH = {
      patient: 'P-1001',
      encounter: 'E-2001',
      user: 'dr-grey',
      dob: '1815-12-10',
      sex: 'F',
    };
    /** A launch URL signed now, as the EHR signs one each time a clinician clicks. */
    const signedLaunchUrl = () => {
      const url = new URL(config.launchUrl);
      url.search = signLaunch(DEMO_LAUNCH, sharedSecret, new Date()).toString();
      return url.toString();
    };
    // The demo hospital: `/` is the EHR's patient page (each click signs a fresh launch link), and
    // `/reports` is the hospital system that receives the reports, printed as they arrive.
    const sink = createServer((req, res) => {
      if (req.method === 'GET' && req.url === '/') {
        res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' }).end(
          `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Demo EHR</title></head>
<body style="font-family:system-ui;margin:2rem"><h1>Demo EHR — patient P-1001</h1>
<p>Encounter E-2001 · Ada Lovelace, born 1815-12-10</p>
<p><a href="/launch" style="font-size:1.2rem">Write the chest X-ray report in casebook</a></p></body></html>`,
        );
        return;
      }
      if (req.method === 'GET' && req.url === '/launch') {
        res.writeHead(303, { Location: signedLaunchUrl(), 'Cache-Control': 'no-store' }).end();
        return;
      }
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => {
        body += chunk;
      });
      req.on('end', () => {
        const rule = '─'.repeat(72);
        console.log(`\n${rule}\nReport received by the demo sink (${req.headers['content-type']})`);
        console.log(`  patient:   ${req.headers['x-patient-identifier'] ?? '-'}`);
        console.log(`  encounter: ${req.headers['x-encounter-identifier'] ?? '-'}`);
        console.log(`  key:       ${req.headers['idempotency-key'] ?? '-'}\n${rule}\n${body}\n${rule}`);
        res.writeHead(204).end();
      });
    });
    sink.listen(Number(o.sinkPort), '127.0.0.1');
    await once(sink, 'listening');
    const casebook = await openCasebook(config);
    await applySeed(casebook, {
      tenants: [
        {
          name: 'Demo Hospital',
          ehr_managed: false,
          allowed_scopes: ['patient/*.*', 'user/*.*'],
          redirect_origins: [],
          clients: [
            {
              client_id: 'hospital-launcher',
              client_secret: launcherSecret,
              scopes: ['system/*.*'],
              projects: ['demo'],
            },
          ],
          questionnaires: [{ project: 'demo', resource: DEMO_QUESTIONNAIRE }],
        },
      ],
    });
    await listen(casebook, () => {
      if (temporary) rmSync(temporary, { recursive: true, force: true });
    });
    console.log(
      `\ncasebook hospital demo: data in ${config.dataDir}${temporary ? ' (removed when the demo stops)' : ''}, reports go to ${config.exportSink}`,
    );
    console.log('\nOpen the demo EHR in a browser; its link signs a fresh launch URL on every click:\n');
    console.log(`  http://127.0.0.1:${o.sinkPort}/\n`);
    console.log('Or open this signed launch URL directly (valid for 5 minutes, once):\n');
    console.log(`  ${signedLaunchUrl()}\n`);
    console.log('Pick "Chest X-ray report", fill it in and submit: the demo sink prints the report here.\n');
  });

program
  .command('launch-url')
  .description(
    'print a launch URL signed with the first LAUNCHER_SHARED_SECRET (docs/interface.md §4.6), as the hospital EHR builds it',
  )
  .requiredOption('--patient <number>', "the hospital's patient number")
  .requiredOption('--encounter <number>', 'the encounter number')
  .option('--user <login>', 'the staff login the session is opened for')
  .option('--supervisor <login>', 'a supervising staff login')
  .option('--dob <YYYY-MM-DD>', 'date of birth')
  .option('--sex <code>', 'male, female, other, unknown (or M, F, O, U)')
  .action(
    (o: {
      patient: string;
      encounter: string;
      user?: string;
      supervisor?: string;
      dob?: string;
      sex?: string;
    }) => {
      const config = loadConfig();
      const [secret] = config.launcher.sharedSecrets;
      if (!secret) throw new Error('LAUNCHER_SHARED_SECRET is not set: nothing to sign the launch URL with');
      const params = Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Record<
        string,
        string
      >;
      const url = new URL(config.launchUrl);
      url.search = signLaunch(params, secret, new Date()).toString();
      console.log(url.toString());
    },
  );

program
  .command('project')
  .description('run only the projection runner (one active instance per database; others stand by)')
  .action(async () => {
    const casebook = await openCasebook(loadConfig(), { project: true, export: false });
    const shutdown = async () => {
      await casebook.close();
      process.exit(0);
    };
    process.once('SIGINT', shutdown);
    process.once('SIGTERM', shutdown);
  });

const exportCommand = program
  .command('export')
  .description(
    'run only the report exporter to EXPORT_SINK (one active instance per database; others stand by); reports older than the sink configuration wait for --all, --skip-backlog or --since',
  )
  .option('--all', 'send the backlog too (after new reports)')
  .option('--skip-backlog', 'send no report written before the sink was configured')
  .option(
    '--since <instant>',
    'of the backlog, send only reports written at or after this instant',
    instant('--since'),
  )
  .action(async (o: { all?: boolean; skipBacklog?: boolean; since?: string }) => {
    const config = loadConfig();
    if (!config.exportSink) throw new Error('EXPORT_SINK is not set: nothing to export to');
    const chosen = [o.all && '--all', o.skipBacklog && '--skip-backlog', o.since && '--since'].filter(
      Boolean,
    );
    if (chosen.length > 1) throw new Error(`choose one of ${chosen.join(', ')}`);
    const backlog: BacklogDecision | undefined = o.all
      ? { choice: 'all', source: 'casebook export --all' }
      : o.skipBacklog
        ? { choice: 'skip', source: 'casebook export --skip-backlog' }
        : o.since
          ? { choice: 'since', since: o.since, source: 'casebook export --since' }
          : undefined;
    const casebook = await openCasebook(config, {
      project: false,
      export: true,
      ...(backlog ? { backlog } : {}),
    });
    const held = (await casebook.exporter?.heldBacklog()) ?? 0;
    if (held > 0) {
      await casebook.close();
      console.error(
        `casebook: ${held} report version(s) were written before the export sink was configured; choose what to do with them: --all (send them after new reports), --skip-backlog (send none) or --since <instant> (or set EXPORT_BACKLOG=all|skip|since:<instant>)`,
      );
      process.exit(2);
    }
    const shutdown = async () => {
      await casebook.close();
      process.exit(0);
    };
    process.once('SIGINT', shutdown);
    process.once('SIGTERM', shutdown);
  });

exportCommand
  .command('retry')
  .description(
    'requeue the abandoned export of a report (ReportExportRequeued): the exporter tries it again at once, with a fresh attempt budget',
  )
  .requiredOption('--report <id>', 'QuestionnaireResponse id', (v) => Number.parseInt(v, 10))
  .option('--tenant <id>', 'data tenant id (checked against the report)', (v) => Number.parseInt(v, 10))
  .action((o: { report: number; tenant?: number }) =>
    withCasebook(
      async (casebook) => {
        if (!Number.isInteger(o.report) || o.report <= 0)
          throw new Error('--report must be a QuestionnaireResponse id');
        const [row] = await casebook.sql.query<{ tenant_id: number }>(
          `SELECT tenant_id FROM rm_export_outbox WHERE response_id = $1 LIMIT 1`,
          [o.report],
        );
        if (!row || (o.tenant !== undefined && Number(row.tenant_id) !== o.tenant))
          throw new Error(
            `QuestionnaireResponse/${o.report} has no export${o.tenant !== undefined ? ` in tenant ${o.tenant}` : ''}`,
          );
        const versions = await requeueExport(
          cliContext(casebook, Number(row.tenant_id)),
          o.report,
          cliActor(),
        );
        print({ requeued: versions.map((v) => `QuestionnaireResponse/${o.report}/_history/${v}`) });
      },
      { project: false },
    ),
  );

program
  .command('erase')
  .description(
    'erase a patient for good (docs/architecture.md "Erasure"): destroys its data key, turns its read-model rows into tombstones (410 Gone) and records a PHI-free PatientErased; idempotent',
  )
  .requiredOption('--tenant <id>', 'data tenant id', (v) => Number.parseInt(v, 10))
  .requiredOption('--patient <id>', 'the Patient id', (v) => Number.parseInt(v, 10))
  .requiredOption('--reason <text>', 'why (recorded with the erasure)')
  .option('--force', 'erase inside the retention period (the reason says why)')
  .action((o: { tenant: number; patient: number; reason: string; force?: boolean }) =>
    withCasebook(async (casebook) => {
      if (!Number.isInteger(o.tenant) || o.tenant <= 0) throw new Error('--tenant must be a tenant id');
      if (!Number.isInteger(o.patient) || o.patient <= 0) throw new Error('--patient must be a Patient id');
      const forced = o.force === true;
      // The erasure's AuditEvent (who, when, why: docs/interface.md §4.3 rule 17), appended with it.
      const outcome = await erasePatient(
        cliContext(casebook, o.tenant),
        casebook.keys,
        { patientId: o.patient, reason: o.reason, force: forced },
        {
          audit: () => ({
            id: newId(),
            tenantId: o.tenant,
            interaction: 'operation',
            action: 'D',
            recorded: casebook.clock().toISOString(),
            status: 200,
            agent: { kind: 'system', name: cliActor() },
            entities: [erasureAuditEntity(o.patient, o.reason, forced)],
          }),
        },
      );
      const files = await forgetExported(casebook.config.exportSink, outcome.exportKeys);
      print({
        erased: `Patient/${o.patient}`,
        already: outcome.already,
        resources: outcome.erased.map((r) => `${r.resourceType}/${r.id}`),
        exportFilesRemoved: files,
      });
    }),
  );

program
  .command('replay')
  .description(
    'drop every read model and rebuild it from the event log; with --until, build the read models as they stood then into a separate schema instead',
  )
  .option('--until <instant|position>', 'an ISO 8601 instant, or a position (commit/prepare) of the log')
  .option('--into <schema>', 'the schema --until builds into (default replay_<time of the run>)')
  .action((o: { until?: string; into?: string }) =>
    withCasebook(
      async (casebook) => {
        // The progress bar on stderr: stdout carries the JSON result.
        const bar = new cliProgress.SingleBar(
          {
            format: 'replay [{bar}] {value} events | {eta_formatted} left',
            etaBuffer: 50,
            stream: process.stderr,
          },
          cliProgress.Presets.shades_classic,
        );
        const total = await countEvents(casebook);
        const progress = (n: number) => {
          if (total === undefined || n > total) bar.setTotal(n);
          bar.update(n);
        };
        if (o.until !== undefined) {
          const until = /^\d+\/\d+$/.test(o.until) ? parsePosition(o.until) : instant('--until')(o.until);
          const schema = o.into ?? `replay_${new Date().toISOString().replace(/\D/g, '').slice(0, 14)}`;
          bar.start(total ?? 0, 0);
          const applied = await replayUntil(
            casebook,
            schema,
            typeof until === 'string' ? new Date(until) : until,
            progress,
          );
          bar.stop();
          print({ schema, until: typeof until === 'string' ? until : positionToString(until), applied });
          return;
        }
        bar.start(total ?? 0, 0);
        // Built beside the live read models, which keep answering, and swapped in once complete.
        const { read, stopped } = await casebook.runner.rebuild(progress);
        // Every event of the log is reflected now, but the rebuild reads only the types some read
        // model handles: the log's size is what was replayed.
        const replayed = (await countEvents(casebook)) ?? read;
        progress(replayed);
        bar.stop();
        const states = await casebook.runner.states();
        print({
          replayed,
          read,
          projections: Object.fromEntries(states.map((s) => [s.name, s.status])),
          // A read model whose rebuild stopped on an event was kept as it was.
          ...(stopped.size ? { stopped: Object.fromEntries(stopped) } : {}),
        });
        if (stopped.size) process.exitCode = 1;
      },
      { project: false },
    ),
  );

/** Events in the log, when the store can count them cheaply (the SQL stores). */
const countEvents = async (casebook: Casebook): Promise<number | undefined> => {
  if (casebook.store.kind === 'kurrentdb') return undefined;
  const rows = await casebook.sql.query<{ n: string }>(`SELECT count(*)::text AS n FROM es_events`);
  return Number(rows[0]?.n ?? 0);
};

const tenants = program.command('tenants').description('data tenants');
tenants
  .command('create')
  .description('create a data tenant')
  .requiredOption('--name <name>', 'tenant name (unique)')
  .option('--ehr-managed', 'an EHR-managed tenant (docs/interface.md §5.3 rule 2)', false)
  .option('--allowed-scopes <scopes>', 'space-separated scopes sessions may get', 'patient/*.* user/*.*')
  .option('--redirect-origin <origin>', 'an origin redirects may go to (repeatable)', collect, [])
  .action((o: { name: string; ehrManaged: boolean; allowedScopes: string; redirectOrigin: string[] }) =>
    withCasebook(async (casebook) => {
      const { tenantId } = await createTenant(cliContext(casebook, null), {
        name: o.name,
        ehrManaged: o.ehrManaged,
        allowedScopes: o.allowedScopes.split(/\s+/).filter(Boolean),
        redirectOrigins: o.redirectOrigin,
      });
      const rows = await casebook.sql.query(
        `SELECT id, name, ehr_managed, allowed_scopes, redirect_origins FROM rm_tenants WHERE id = $1`,
        [tenantId],
      );
      print(rows[0]);
    }),
  );
tenants
  .command('list')
  .description('list data tenants')
  .action(() =>
    withCasebook(async (casebook) => {
      print(
        await casebook.sql.query(
          `SELECT id, name, ehr_managed, allowed_scopes, redirect_origins FROM rm_tenants ORDER BY id`,
        ),
      );
    }),
  );

const clients = program.command('clients').description('API clients');
clients
  .command('create')
  .description('create an API client of a tenant; prints its secret once')
  .requiredOption('--tenant <id>', 'data tenant id', (v) => Number.parseInt(v, 10))
  .requiredOption('--client-id <id>', 'client_id')
  .option('--secret <secret>', 'client_secret (at least 16 characters); generated when omitted')
  .option('--scopes <scopes>', "the client's own scopes, space-separated", 'system/*.*')
  .option('--project <project>', 'a service-account project (repeatable)', collect, [])
  .action((o: { tenant: number; clientId: string; secret?: string; scopes: string; project: string[] }) =>
    withCasebook(async (casebook) => {
      const secret = o.secret ?? generateSecret();
      await registerClient(cliContext(casebook, o.tenant), {
        clientId: o.clientId,
        tenantId: o.tenant,
        secret,
        scopes: o.scopes.split(/\s+/).filter(Boolean),
        projects: o.project,
      });
      print({
        client_id: o.clientId,
        client_secret: secret,
        tenant_id: o.tenant,
        scopes: o.scopes.split(/\s+/),
        projects: o.project,
      });
    }),
  );
clients
  .command('list')
  .description('list API clients (never their secrets)')
  .action(() =>
    withCasebook(async (casebook) => {
      print(
        await casebook.sql.query(
          `SELECT client_id, tenant_id, scopes, projects, created_at FROM rm_api_clients ORDER BY client_id`,
        ),
      );
    }),
  );

const questionnaires = program
  .command('questionnaires')
  .description('Questionnaires (report templates) of a project');
questionnaires
  .command('create')
  .description('create a Questionnaire from a JSON file, or update the one with the same url and version')
  .requiredOption('--tenant <id>', 'data tenant id', (v) => Number.parseInt(v, 10))
  .requiredOption(
    '--project <project>',
    'the service-account project it belongs to (docs/interface.md §5.3 rule 3)',
  )
  .requiredOption('--file <path>', 'a Questionnaire resource (JSON)')
  .action((o: { tenant: number; project: string; file: string }) =>
    withCasebook(async (casebook) => {
      const resource = JSON.parse(readFileSync(o.file, 'utf8')) as Record<string, unknown>;
      print(await upsertQuestionnaire(cliContext(casebook, o.tenant), o.tenant, o.project, resource));
    }),
  );
questionnaires
  .command('list')
  .description('list the Questionnaires of a tenant')
  .requiredOption('--tenant <id>', 'data tenant id', (v) => Number.parseInt(v, 10))
  .action((o: { tenant: number }) =>
    withCasebook(async (casebook) => {
      const rows = await casebook.sql.query(
        `SELECT id, project, content->>'url' AS url, content->>'version' AS version, content->>'title' AS title, version_id
         FROM rm_resources WHERE resource_type = 'Questionnaire' AND tenant_id = $1 AND NOT deleted ORDER BY id`,
        [o.tenant],
      );
      print(rows);
    }),
  );

program
  .command('seed <file>')
  .description('apply a seed file (README.md "Configuration"); idempotent')
  .action((file: string) =>
    withCasebook(async (casebook) => {
      print(await applySeed(casebook, readSeed(file)));
    }),
  );

program
  .command('events')
  .description('the event log')
  .command('export')
  .description('print events with their metadata as JSON lines')
  .addOption(new Option('--stream <name>', 'one stream, e.g. session-1'))
  .addOption(new Option('--from <position>', 'only $all events after this position (commit/prepare)'))
  .addOption(
    new Option('--tenant <id>', 'only events of this tenant').argParser((v) => Number.parseInt(v, 10)),
  )
  .action((o: { stream?: string; from?: string; tenant?: number }) =>
    withCasebook(
      async (casebook) => {
        const keep = (e: RecordedEvent) => o.tenant === undefined || e.metadata.tenantId === o.tenant;
        if (o.stream) {
          for (const e of await casebook.store.readStream(o.stream))
            if (keep(e)) console.log(JSON.stringify(eventJson(e)));
          return;
        }
        let from = o.from ? parsePosition(o.from) : undefined;
        for (;;) {
          const page = await casebook.store.readAll({ ...(from ? { from } : {}), maxCount: 1000 });
          if (page.length === 0) break;
          for (const e of page) if (keep(e)) console.log(JSON.stringify(eventJson(e)));
          from = page.at(-1)!.position;
        }
      },
      { project: false },
    ),
  );

program
  .command('audit')
  .description('the audit trail (docs/architecture.md "Audit trail")')
  .command('export')
  .description(
    'print, as JSON lines in log order, every event that touched a patient (its resources, sessions, launches, exports) and every AuditEvent about it',
  )
  .requiredOption('--tenant <id>', 'data tenant id', (v) => Number.parseInt(v, 10))
  .requiredOption('--patient <id>', 'Patient id', (v) => Number.parseInt(v, 10))
  .option('--since <instant>', 'only events recorded at or after this instant', instant('--since'))
  .option('--until <instant>', 'only events recorded at or before this instant', instant('--until'))
  .action((o: { tenant: number; patient: number; since?: string; until?: string }) =>
    withCasebook(
      async (casebook) => {
        if (!Number.isInteger(o.tenant) || !Number.isInteger(o.patient))
          throw new Error('--tenant and --patient must be integers');
        // The progress bar only on a terminal: the JSON lines on stdout stay clean for a file or a pipe.
        const bar = process.stderr.isTTY
          ? new cliProgress.SingleBar(
              { format: 'audit export [{bar}] {value}/{total} events read', stream: process.stderr },
              cliProgress.Presets.shades_classic,
            )
          : undefined;
        bar?.start((await countEvents(casebook)) ?? 0, 0);
        let written = 0;
        for await (const event of patientEvents(casebook.store, o.tenant, o.patient, {
          ...(o.since ? { since: o.since } : {}),
          ...(o.until ? { until: o.until } : {}),
          onProgress: (read) => bar?.update(read),
        })) {
          process.stdout.write(`${JSON.stringify(auditExportJson(event))}\n`);
          written++;
        }
        bar?.stop();
        if (process.stderr.isTTY) console.error(`${written} events of Patient/${o.patient}`);
      },
      { project: false },
    ),
  );

program
  .command('verify')
  .description(
    'walk the event log against its seals: exit 0 with the event count and head hash, or exit 1 naming the first altered, removed or inserted position',
  )
  .option('--seal', 'seal the log up to its head first (as a serving process would)')
  .option(
    '--head',
    'print the head of the log (position, hash, events, time) as JSON, signed with CASEBOOK_SEAL_KEY when set',
  )
  .option(
    '--against <head>',
    'prove that the log still extends a head printed earlier (a file, or the JSON itself)',
  )
  .option(
    '--max-unsealed-age <seconds>',
    'fail when an event older than this was never sealed (default 600; 0 accepts none, "none" never fails)',
  )
  .action((o: { seal?: boolean; head?: boolean; against?: string; maxUnsealedAge?: string }) =>
    withCasebook(
      async (casebook) => {
        const env = process.env;
        if (o.head) {
          const head = await logHead(casebook.store, casebook.clock(), env.CASEBOOK_SEAL_KEY || undefined);
          console.log(JSON.stringify(head));
          return;
        }
        const maxUnsealedAgeMs =
          o.maxUnsealedAge === undefined
            ? undefined
            : o.maxUnsealedAge === 'none'
              ? Number.POSITIVE_INFINITY
              : /^\d{1,9}$/.test(o.maxUnsealedAge)
                ? Number(o.maxUnsealedAge) * 1000
                : undefined;
        if (o.maxUnsealedAge !== undefined && maxUnsealedAgeMs === undefined)
          throw new Error('--max-unsealed-age must be a number of seconds or "none"');
        const walkOptions = {
          now: casebook.clock(),
          ...(maxUnsealedAgeMs !== undefined ? { maxUnsealedAgeMs } : {}),
        };
        const sealer = new Sealer(casebook.store, casebook.sql, casebook.logger);
        await sealer.migrate();
        if (o.seal) await sealer.sealAll();
        let result: VerifyResult;
        if (o.against !== undefined) {
          const text = o.against.trim().startsWith('{') ? o.against : readFileSync(o.against, 'utf8');
          const head = parseHead(text, env.CASEBOOK_SEAL_PUBLIC_KEY || undefined);
          result = await verifyAgainst(casebook.store, head);
          // Leaves and seals may still name the event when only the events were edited.
          if (!result.ok) {
            const walk = await verifyLog(casebook.store, casebook.sql, walkOptions);
            if (!walk.ok) result = { ...result, problem: walk.problem! };
          }
        } else result = await verifyLog(casebook.store, casebook.sql, walkOptions);
        if (!result.ok) {
          const p = result.problem!;
          console.error(`casebook verify: ${p.kind} at position ${p.position}: ${p.detail}`);
          process.exitCode = 1;
          return;
        }
        console.log(
          o.against !== undefined
            ? `verified: the log extends the head at ${result.headPosition} (${result.events} events, hash ${result.headHash})`
            : `verified ${result.events} events (${result.sealed} sealed, ${result.unsealed} not yet sealed); head ${result.headPosition ?? 'none'} hash ${result.headHash}`,
        );
      },
      { project: false },
    ),
  );

const keys = program
  .command('keys')
  .description('the key store of crypto-shredding (docs/architecture.md "Erasure")');
keys
  .command('rotate')
  .description(
    're-wrap every data key and identifier secret under a new KEK (CASEBOOK_NEW_KEK or --new-kek-file) without touching the log; run it with casebook stopped, then start casebook with the new KEK. Prints how many keys were re-wrapped',
  )
  .option('--new-kek-file <file>', 'a file holding the new KEK (openssl rand -base64 32 > file)')
  .action(async (o: { newKekFile?: string }) => {
    const config = loadConfig();
    const env = process.env.CASEBOOK_NEW_KEK || undefined;
    if (o.newKekFile && env)
      throw new Error('give the new KEK in CASEBOOK_NEW_KEK or --new-kek-file, not both');
    if (!o.newKekFile && !env)
      throw new Error(
        'keys rotate needs the new KEK: set CASEBOOK_NEW_KEK (openssl rand -base64 32) or --new-kek-file',
      );
    const newFile = o.newKekFile ? resolve(o.newKekFile) : undefined;
    const newName = newFile ? `--new-kek-file (${newFile})` : 'CASEBOOK_NEW_KEK';
    const newText = newFile ? readFileSync(newFile, 'utf8') : env!;
    const newKek = parseKek(newText, newName);
    const settings = {
      dataDir: config.dataDir,
      databaseUrl: config.databaseUrl,
      keyStoreUrl: config.keys.storeUrl,
      keyStoreSchema: config.keys.storeSchema,
    };
    const old = loadKek({ ...settings, kek: config.keys.kek, kekFile: config.keys.kekFile }, { make: false });
    if (old.kek.id === newKek.id)
      throw new Error(`the new KEK is the KEK in use (${newKek.id}): nothing to rotate`);
    // The embedded default's data directory is one process's: not while a server holds it.
    const embedded = !config.databaseUrl && !config.keys.storeUrl && config.dataDir !== 'memory://';
    const unlock = embedded ? lockDataDir(config.dataDir) : undefined;
    try {
      const rewrapped = await rotateKeys(settings, old.kek, newKek);
      // The embedded default's own KEK file is replaced; a configured KEK is the operator's to change.
      if (old.origin === 'data directory') replaceKekFile(old.path!, newText, newName);
      print({
        rewrapped,
        from: old.kek.id,
        to: newKek.id,
        next:
          old.origin === 'data directory'
            ? `the new KEK replaced the old in ${old.path}; back it up apart from the data`
            : `start casebook with the new KEK in ${old.origin}`,
      });
    } finally {
      unlock?.();
    }
  });

program.parseAsync(process.argv).catch((error: unknown) => {
  if (error instanceof DomainError) console.error(`casebook: ${error.message}`);
  else console.error(`casebook: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
