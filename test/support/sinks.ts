/**
 * Real export sinks for tests (issue 15): an HTTP receiver and an MLLP listener on 127.0.0.1 whose
 * behaviour the test changes while they run (answer, fail, hang), recording every delivery; and
 * `sinkKinds`, the HTTP, MLLP and file (drop directory) sinks behind one interface, to run a
 * scenario on each.
 */
import { once } from 'node:events';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface HttpDelivery {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly key: string;
  /** When the request body was complete (epoch ms). */
  readonly at: number;
  readonly accepted: boolean;
}

/**
 * An HTTP receiver. `state.status` answers every request (200 = accepted) after `state.delayMs`;
 * `state.hang(body)` true leaves that request unanswered; `state.onAccepted` runs after a delivery is recorded as
 * accepted and before the answer is sent.
 */
export const httpReceiver = async () => {
  const deliveries: HttpDelivery[] = [];
  const hanging: ServerResponse[] = [];
  const state: {
    status: number;
    hang: (body: string) => boolean;
    onAccepted?: ((delivery: HttpDelivery) => Promise<void> | void) | undefined;
    /** Milliseconds each request waits before it is answered (a slow hospital system). */
    delayMs: number;
  } = { status: 200, hang: () => false, delayMs: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (state.delayMs > 0) await new Promise((r) => setTimeout(r, state.delayMs));
      if (state.hang(body)) {
        hanging.push(res);
        return;
      }
      const delivery: HttpDelivery = {
        headers: req.headers,
        body,
        key: String(req.headers['idempotency-key'] ?? ''),
        at: Date.now(),
        accepted: state.status < 300,
      };
      deliveries.push(delivery);
      if (delivery.accepted) await state.onAccepted?.(delivery);
      res.statusCode = state.status;
      res.end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/reports`,
    port,
    state,
    deliveries,
    accepted: () => deliveries.filter((d) => d.accepted),
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
};

/**
 * An MLLP listener answering each message with `MSA|<state.code>|<control id>|<state.text>`
 * (an HL7 ACK), recording the messages.
 */
export const mllpListener = async () => {
  const messages: string[] = [];
  /** Every message with its MSH-10 control id (the key) and whether it was answered AA. */
  const deliveries: { message: string; key: string; code: string; accepted: boolean; at: number }[] = [];
  const state = { code: 'AA', text: '' };
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const start = buffer.indexOf(0x0b);
        const end = buffer.indexOf(0x1c, start + 1);
        if (start < 0 || end < 0 || buffer[end + 1] !== 0x0d) return;
        const message = buffer.subarray(start + 1, end).toString('utf8');
        buffer = buffer.subarray(end + 2);
        messages.push(message);
        const controlId = message.split('\r')[0]!.split('|')[9];
        deliveries.push({
          message,
          key: hl7Unescape(controlId ?? ''),
          code: state.code,
          accepted: state.code === 'AA',
          at: Date.now(),
        });
        const ack = `MSH|^~\\&|RECEIVER|HOSPITAL|CASEBOOK|CASEBOOK|20260301100000||ACK^R01^ACK|ack-1|P|2.5\rMSA|${state.code}|${controlId}|${state.text}`;
        socket.write(
          Buffer.concat([Buffer.from([0x0b]), Buffer.from(ack, 'utf8'), Buffer.from([0x1c, 0x0d])]),
        );
      }
    });
    socket.on('error', () => undefined);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `mllp://127.0.0.1:${port}`,
    state,
    messages,
    deliveries,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
};

/** An HL7 v2 field value with its escapes (`\F\`, `\S\`, `\T\`, `\R\`, `\E\`) undone. */
const hl7Unescape = (value: string): string =>
  value.replace(/\\([FSTRE])\\/g, (_, c: string) => ({ F: '|', S: '^', T: '&', R: '~', E: '\\' })[c]!);

/** What a sink under test received: the key as the receiver sees it, the bytes and the report text. */
export interface Received {
  /** HTTP: the Idempotency-Key header; MLLP: MSH-10; file: the file name (`_` after the installation back to `:`). */
  readonly key: string;
  /** The bytes as they arrived: the HTTP body, the HL7 message (no framing), the file's content. */
  readonly body: string;
  /** The report text in them (MLLP: OBX-5 of each line, unescaped, joined by newlines). */
  readonly text: string;
  readonly accepted: boolean;
}

/**
 * A real sink of one kind (issue 15 "Tests": HTTP, MLLP and file), with one way to fail an attempt
 * and to let the next ones succeed.
 */
export interface SinkUnderTest {
  readonly kind: 'http' | 'mllp' | 'file';
  /** The EXPORT_SINK value. */
  readonly url: string;
  /** How `fail` fails an attempt, for the test's title. */
  readonly failure: string;
  /** Attempts from now on fail (HTTP 503, MLLP AE, file: the drop directory's path is a regular file). */
  fail(): void;
  /** Attempts from now on succeed. Synchronous: nothing of an in-process exporter runs in between. */
  recover(): void;
  /** What arrived, accepted or not (file: the captured failed attempts, then the files in place). */
  received(): Received[];
  accepted(): Received[];
  /**
   * The bytes of a failed attempt under `key`, which the sink failed (`fail`). HTTP and MLLP saw
   * them already. A failing drop directory sees no bytes, so the file sink then lets the directory
   * be written but puts a directory where `<key>.txt` goes: the next attempt writes `<key>.txt.tmp`
   * and fails to rename it; `nextFailure` resolves when that attempt has been recorded as failed.
   */
  failedAttempt(key: string, nextFailure: () => Promise<unknown>): Promise<Received>;
  close(): void;
}

const httpSinkUnderTest = async (): Promise<SinkUnderTest> => {
  const receiver = await httpReceiver();
  const received = () =>
    receiver.deliveries.map((d) => ({ key: d.key, body: d.body, text: d.body, accepted: d.accepted }));
  return {
    kind: 'http',
    url: receiver.url,
    failure: 'HTTP 503, then 200',
    fail: () => {
      receiver.state.status = 503;
    },
    recover: () => {
      receiver.state.status = 200;
    },
    ...receivedBy('HTTP', received),
    close: receiver.close,
  };
};

/** `received`, what of it was accepted, and the first failed attempt under a key. */
const receivedBy = (kind: string, received: () => Received[]) => ({
  received,
  accepted: () => received().filter((d) => d.accepted),
  failedAttempt: async (key: string) => {
    const first = received().find((d) => d.key === key && !d.accepted);
    if (!first) throw new Error(`no failed ${kind} attempt under ${key}`);
    return first;
  },
});

const mllpSinkUnderTest = async (): Promise<SinkUnderTest> => {
  const listener = await mllpListener();
  const received = () =>
    listener.deliveries.map((d) => ({
      key: d.key,
      body: d.message,
      text: d.message
        .split('\r')
        .filter((s) => s.startsWith('OBX|'))
        .map((s) => hl7Unescape(s.split('|')[5] ?? ''))
        .join('\n'),
      accepted: d.accepted,
    }));
  return {
    kind: 'mllp',
    url: listener.url,
    failure: 'MSA AE, then AA',
    fail: () => {
      listener.state.code = 'AE';
      listener.state.text = 'receiver busy';
    },
    recover: () => {
      listener.state.code = 'AA';
      listener.state.text = '';
    },
    ...receivedBy('MLLP', received),
    close: listener.close,
  };
};

const fileSinkUnderTest = async (): Promise<SinkUnderTest> => {
  const root = mkdtempSync(join(tmpdir(), 'casebook-export-sink-'));
  const dir = join(root, 'drop');
  const nameOf = (key: string) => `${key.replace(/[^A-Za-z0-9._-]/g, '_')}.txt`;
  const keyOf = (name: string) =>
    name
      .replace(/\.txt$/, '')
      .replace(/^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})_/, '$1:');
  const failed: Received[] = [];
  const accepted = (): Received[] => {
    if (!existsSync(dir) || !statSync(dir).isDirectory()) return [];
    return readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith('.txt'))
      .map((e) => {
        const body = readFileSync(join(dir, e.name), 'utf8');
        return { key: keyOf(e.name), body, text: body, accepted: true };
      });
  };
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  return {
    kind: 'file',
    url: pathToFileURL(dir).href,
    failure:
      'the drop directory is a regular file (then a directory in place of <key>.txt), then a directory',
    fail: () => {
      rmSync(dir, { recursive: true, force: true });
      writeFileSync(dir, 'not a directory');
    },
    recover: () => {
      if (existsSync(dir) && !statSync(dir).isDirectory()) rmSync(dir);
      // Blockers (directories where a report file goes) and their temporary files go too.
      if (existsSync(dir))
        for (const e of readdirSync(dir, { withFileTypes: true }))
          if (e.isDirectory() || e.name.endsWith('.tmp')) rmSync(join(dir, e.name), { recursive: true });
    },
    received: () => [...failed, ...accepted()],
    accepted,
    failedAttempt: async (key, nextFailure) => {
      const name = join(dir, nameOf(key));
      // One synchronous step: the drop directory appears with the blocker already in it.
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(name, { recursive: true });
      await nextFailure();
      const tmp = `${name}.tmp`;
      for (let i = 0; !(existsSync(tmp) && statSync(tmp).size > 0); i++) {
        if (i > 400) throw new Error(`no temporary file of a failed attempt under ${key}`);
        await sleep(25);
      }
      const body = readFileSync(tmp, 'utf8');
      const attempt = { key, body, text: body, accepted: false };
      failed.push(attempt);
      return attempt;
    },
    close: () => rmSync(root, { recursive: true, force: true }),
  };
};

/** The three kinds of sink, each started fresh by `open`. */
export const sinkKinds: readonly { kind: SinkUnderTest['kind']; open: () => Promise<SinkUnderTest> }[] = [
  { kind: 'http', open: httpSinkUnderTest },
  { kind: 'mllp', open: mllpSinkUnderTest },
  { kind: 'file', open: fileSinkUnderTest },
];
