/**
 * Where exported report text goes (README.md "Configuration" `EXPORT_SINK`): an HTTP endpoint (POST
 * text/plain), an HL7 v2 receiver over MLLP (ORU^R01, waiting for the ACK), or a drop directory
 * (one .txt per report, written atomically). Only the plain text and the hospital identifiers
 * leave casebook.
 */
import { mkdir, rename, unlink, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ExportStatus } from '../../domain/export/export.js';
import { MAX_ANSWER_BYTES, postBounded } from '../delivery/http-post.js';
import { sanitizeOutsideText } from './outside-text.js';

export interface HospitalIdentifier {
  readonly system: string;
  readonly value: string;
}

/** One report to deliver. */
export interface Report {
  /** The plain-text narrative. */
  readonly text: string;
  /** Stable per response version: receivers drop repeats. */
  readonly idempotencyKey: string;
  readonly patientIdentifier?: HospitalIdentifier | undefined;
  readonly encounterIdentifier?: HospitalIdentifier | undefined;
  readonly responseId: number;
  readonly version: number;
  /** QuestionnaireResponse.authored, when given. */
  readonly authored?: string | undefined;
  /**
   * When the report version was queued (ISO 8601): the message time of an HL7 message, so every
   * attempt sends the same bytes.
   */
  readonly queuedAt?: string | undefined;
  /**
   * `final`, `corrected` (an amendment) or `retracted` (entered in error), issue 32: HL7 v2 OBR-25
   * and OBX-11 `F` / `C` / `W`; the HTTP sink's `X-Report-Status` header; the file sink's first
   * line `Status: …` for a correction or a retraction. Absent: `final`.
   */
  readonly status?: ExportStatus | undefined;
}

const HL7_RESULT_STATUS: Record<ExportStatus, string> = { final: 'F', corrected: 'C', retracted: 'W' };

export interface Sink {
  /** Scheme and host of the sink, for the event log (never credentials or paths). */
  readonly label: string;
  /**
   * Delivers one report; `signal` aborts it (the exporter is stopping).
   * @throws {Error} when the sink did not accept it, or the delivery was aborted.
   */
  deliver(report: Report, signal?: AbortSignal): Promise<void>;
  /**
   * Removes what this installation keeps of delivered reports, by idempotency key, where the sink
   * is the installation's own (a drop directory: its files); absent where what was sent is the
   * receiver's (HTTP, MLLP). For erasure (docs/architecture.md "Erasure"). A report not there is
   * no error.
   */
  forget?(idempotencyKeys: readonly string[]): Promise<number>;
}

/**
 * Removes the reports with these idempotency keys from the sink named by `exportSink`
 * (EXPORT_SINK) where it is the installation's own (a drop directory); nothing for other sinks or
 * none (docs/architecture.md "Erasure").
 * @returns how many files it removed.
 */
export const forgetExported = async (
  exportSink: string | undefined,
  keys: readonly string[],
): Promise<number> => {
  if (!exportSink || keys.length === 0) return 0;
  return (await openSink(exportSink).forget?.(keys)) ?? 0;
};

export interface SinkOptions {
  /** Bound of one delivery to any sink (HTTP, MLLP, file), milliseconds (default 10 s). */
  readonly timeoutMs?: number;
}

/**
 * Opens the sink named by `url` (`http(s)://…`, `mllp://host:port`, `file:///abs/dir`).
 * @throws {Error} for an unsupported or malformed URL.
 */
export const openSink = (url: string, options: SinkOptions = {}): Sink => {
  const parsed = new URL(url);
  const timeoutMs = options.timeoutMs ?? 10_000;
  switch (parsed.protocol) {
    case 'http:':
    case 'https:':
      return httpSink(parsed, timeoutMs);
    case 'mllp:':
      return mllpSink(parsed, timeoutMs);
    case 'file:':
      return fileSink(parsed, timeoutMs);
    default:
      throw new Error(`EXPORT_SINK: unsupported scheme ${parsed.protocol} (use http, https, mllp or file)`);
  }
};

/**
 * Most bytes of a sink's answer casebook reads (the HTTP answer and an MLLP acknowledgement): the
 * shared bound of every outside delivery (integration/delivery/http-post.ts).
 */
export const MAX_SINK_ANSWER_BYTES = MAX_ANSWER_BYTES;

const identifierHeader = (i: HospitalIdentifier) => {
  const raw = `${i.system}|${i.value}`;
  // Header values are bytes: anything outside printable ASCII is percent-encoded.
  return /^[\x20-\x7e]*$/.test(raw) ? raw : encodeURIComponent(raw);
};

const httpSink = (url: URL, timeoutMs: number): Sink => {
  // Credentials in the URL go in the Authorization header, not into the request line.
  const target = new URL(url.href);
  const username = decodeURIComponent(target.username);
  const password = decodeURIComponent(target.password);
  target.username = '';
  target.password = '';
  return {
    label: `${url.protocol}//${url.host}`,
    deliver: async (report, signal) => {
      const headers: Record<string, string> = {
        'Content-Type': 'text/plain; charset=utf-8',
        'Idempotency-Key': report.idempotencyKey,
        'X-Report-Status': report.status ?? 'final',
      };
      if (username || password)
        headers.Authorization = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
      if (report.patientIdentifier)
        headers['X-Patient-Identifier'] = identifierHeader(report.patientIdentifier);
      if (report.encounterIdentifier)
        headers['X-Encounter-Identifier'] = identifierHeader(report.encounterIdentifier);
      const status = await postBounded(target, { headers, body: report.text, timeoutMs, signal });
      if (status < 200 || status > 299) throw new Error(`HTTP ${status} from the export sink`);
    },
  };
};

const fileSink = (url: URL, timeoutMs: number): Sink => {
  const dir = fileURLToPath(url);
  /** The file of a report: `<key>.txt`, the key's characters outside `A-Za-z0-9._-` as `_`. */
  const fileOf = (key: string) => join(dir, `${key.replace(/[^A-Za-z0-9._-]/g, '_')}.txt`);
  /** Writes `<key>.txt` atomically; stops between steps once `signal` is aborted. */
  const write = async (report: Report, signal: AbortSignal) => {
    await mkdir(dir, { recursive: true });
    signal.throwIfAborted();
    // The key names the file: unique across installations, stable across attempts.
    const name = fileOf(report.idempotencyKey);
    const tmp = `${name}.tmp`;
    // A correction or a retraction says so on its first line; a final report is the text alone.
    const status = report.status ?? 'final';
    const text = status === 'final' ? report.text : `Status: ${status}\n\n${report.text}`;
    await writeFile(tmp, text, { encoding: 'utf8', signal });
    // A write that finished after the timeout is not put in place: the attempt was already failed.
    signal.throwIfAborted();
    await rename(tmp, name);
  };
  return {
    label: 'file://',
    // Bounded like the HTTP and MLLP sinks (EXPORT_TIMEOUT_MS, and the exporter's stop): a hung
    // file system (a stale NFS mount, a FIFO in the drop directory) fails the attempt and frees the
    // delivery slot. A system call already blocked cannot be cancelled; it ends, unseen, in the
    // background, and its file is not renamed into place. The reason names no path.
    deliver: async (report, signal) => {
      if (signal?.aborted) throw new Error('the delivery was aborted');
      const controller = new AbortController();
      let fail: (error: Error) => void = () => undefined;
      const bounded = new Promise<never>((_, reject) => {
        fail = reject;
      });
      const end = (error: Error) => {
        // Rejected before the write is aborted, so the attempt fails with this reason.
        fail(error);
        controller.abort(error);
      };
      const timer = setTimeout(
        () => end(new Error(`the drop directory did not finish the write within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const stop = () => end(new Error('the delivery was aborted'));
      signal?.addEventListener('abort', stop, { once: true });
      const written = write(report, controller.signal);
      // After the timeout nobody waits for the write; its late failure is expected.
      written.catch(() => undefined);
      try {
        await Promise.race([written, bounded]);
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', stop);
      }
    },
    forget: async (keys) => {
      let removed = 0;
      for (const key of keys)
        for (const path of [fileOf(key), `${fileOf(key)}.tmp`])
          try {
            await unlink(path);
            removed++;
          } catch (error) {
            if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
          }
      return removed;
    },
  };
};

// ---------------------------------------------------------------------------------------------
// HL7 v2 over MLLP
// ---------------------------------------------------------------------------------------------

const VT = 0x0b;
const FS = 0x1c;
const CR = 0x0d;

/** Escapes HL7 v2 delimiters in a field value (`\` first). */
export const hl7Escape = (value: string): string =>
  value
    .replace(/\\/g, '\\E\\')
    .replace(/\|/g, '\\F\\')
    .replace(/\^/g, '\\S\\')
    .replace(/&/g, '\\T\\')
    .replace(/~/g, '\\R\\')
    .replace(/[\r\n]/g, ' ');

/** HL7 DTM (YYYYMMDDHHMMSS, UTC) of an ISO date-time; dates pass as YYYYMMDD. */
const hl7Time = (iso: string | Date): string => {
  if (typeof iso === 'string' && /^\d{4}(-\d{2}(-\d{2})?)?$/.test(iso)) return iso.replace(/-/g, '');
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return d
    .toISOString()
    .replace(/[-:T]/g, '')
    .replace(/\.\d+Z$/, '');
};

const cx = (i: HospitalIdentifier | undefined) =>
  i ? `${hl7Escape(i.value)}^^^&${hl7Escape(i.system)}&URI` : '';

/** The ORU^R01 message of a report, segments separated by CR (no framing). */
export const buildOru = (report: Report, now: Date = new Date()): string => {
  const lines = report.text.split('\n');
  // OBR-25 and OBX-11: a correction (C) or a retraction (W) of what was sent, never a second original.
  const resultStatus = HL7_RESULT_STATUS[report.status ?? 'final'];
  const observed = report.authored ? hl7Time(report.authored) : '';
  const pv1 = ['PV1', '1', 'U', ...Array<string>(16).fill(''), cx(report.encounterIdentifier)];
  const obr = [
    'OBR',
    '1',
    '',
    hl7Escape(`QuestionnaireResponse/${report.responseId}/_history/${report.version}`),
    'REPORT^Structured report^L',
    '',
    '',
    observed,
    ...Array<string>(17).fill(''),
    resultStatus,
  ];
  const segments = [
    [
      'MSH',
      '^~\\&',
      'CASEBOOK',
      'CASEBOOK',
      '',
      '',
      hl7Time(now),
      '',
      'ORU^R01^ORU_R01',
      hl7Escape(report.idempotencyKey),
      'P',
      '2.5',
    ].join('|'),
    ['PID', '1', '', cx(report.patientIdentifier)].join('|'),
    pv1.join('|'),
    obr.join('|'),
    ...lines.map((line, i) =>
      [
        'OBX',
        String(i + 1),
        'TX',
        'REPORT^Structured report^L',
        '1',
        hl7Escape(line),
        '',
        '',
        '',
        '',
        '',
        resultStatus,
      ].join('|'),
    ),
  ];
  return segments.join('\r');
};

/** Wraps a message in MLLP framing: VT message FS CR. */
export const mllpFrame = (message: string): Buffer =>
  Buffer.concat([Buffer.from([VT]), Buffer.from(message, 'utf8'), Buffer.from([FS, CR])]);

const mllpSink = (url: URL, timeoutMs: number): Sink => {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = Number(url.port);
  if (!host || !Number.isInteger(port) || port <= 0)
    throw new Error('EXPORT_SINK: mllp needs mllp://host:port');
  return {
    label: `mllp://${url.host}`,
    deliver: (report, signal) =>
      new Promise<void>((resolve, reject) => {
        const socket = connect({ host, port });
        let received = Buffer.alloc(0);
        let settled = false;
        const finish = (error?: Error) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          socket.destroy();
          if (error) reject(error);
          else resolve();
        };
        const timer = setTimeout(
          () => finish(new Error(`no MLLP acknowledgement within ${timeoutMs} ms`)),
          timeoutMs,
        );
        socket.on('connect', () =>
          socket.write(mllpFrame(buildOru(report, report.queuedAt ? new Date(report.queuedAt) : undefined))),
        );
        socket.on('data', (chunk: Buffer) => {
          received = Buffer.concat([received, chunk]);
          const start = received.indexOf(VT);
          const end = received.indexOf(FS, start + 1);
          if (start < 0 || end < 0) {
            // No acknowledgement yet: wait for more, up to a bound (the receiver's bytes are held here).
            if (received.length > MAX_SINK_ANSWER_BYTES)
              finish(
                new Error(
                  `the HL7 receiver sent more than ${MAX_SINK_ANSWER_BYTES} bytes without an acknowledgement`,
                ),
              );
            return;
          }
          const ack = received.subarray(start + 1, end).toString('utf8');
          const msa = ack.split(/\r\n?|\n/).find((s) => s.startsWith('MSA|'));
          const fields = msa?.split('|') ?? [];
          const code = fields[1];
          if (code === 'AA' || code === 'CA') finish();
          else {
            // The receiver's words are outside text: made safe and bounded before they reach an event.
            const text = fields[3] ? `: ${sanitizeOutsideText(fields[3], 200)}` : '';
            finish(
              new Error(
                code === undefined
                  ? 'HL7 receiver answered without an MSA segment'
                  : `HL7 receiver answered ${sanitizeOutsideText(code, 20)}${text}`,
              ),
            );
          }
        });
        socket.on('error', (error) => finish(error));
        signal?.addEventListener('abort', () => finish(new Error('the delivery was aborted')), {
          once: true,
        });
        socket.on('close', () => finish(new Error('MLLP connection closed before the acknowledgement')));
      }),
  };
};
