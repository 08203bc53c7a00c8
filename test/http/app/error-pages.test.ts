/**
 * Error pages proofread (issue 12: a 403 page read "You may not open this this session's
 * scopes…"). Every error page the hospital launcher and the application host answer has a title
 * and a detail, and no doubled word in its visible text:
 * - every title and hint of `error-page.ts`, for every status those hosts answer;
 * - every error message written in the launcher's and the app host's code, found in the source
 *   and rendered as the app renders it (`toProblem`, then `sendErrorPage`);
 * - every refusal a real launcher and app host answer over HTTP.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Context } from 'koa';
import { DomainError, type DomainErrorKind } from '../../../src/domain/decider.js';
import {
  DEFAULT_HINT,
  FALLBACK_TITLE,
  HINTS,
  sendErrorPage,
  TITLES,
  TITLES_BY_CODE,
} from '../../../src/http/app/error-page.js';
import { HttpError, toProblem } from '../../../src/http/errors.js';
import {
  canonicalString,
  newNonce,
  REFUSAL_TEXT,
  signCanonical,
  signLaunch,
} from '../../../src/integration/launch-signature.js';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { launchThrough, launchUrlOf, TEST_LAUNCH_SECRET } from '../../support/launch.js';
import { ROOT } from '../../support/process.js';

/** A word written twice in a row ("this this"), across spaces and line breaks. */
const DOUBLED = /\b(\w+)\s+\1\b/i;

const ENTITIES: Record<string, string> = {
  '&amp;': '&',
  '&lt;': '<',
  '&gt;': '>',
  '&quot;': '"',
  '&#39;': "'",
};
const textOf = (html: string) =>
  html
    .replace(/<(script|style)\b[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<[^>]+>/g, ' ')
    .replace(/&(amp|lt|gt|quot|#39);/g, (e) => ENTITIES[e]!)
    .replace(/\s+/g, ' ')
    .trim();

/**
 * Checks one error page: a non-empty title and detail, and no doubled word in the text a reader
 * sees (the body, and the window title on its own).
 * @returns the title and the detail.
 */
const proofread = (html: string, label: string): { title: string; detail: string } => {
  const title = textOf(/<h1>([\s\S]*?)<\/h1>/.exec(html)?.[1] ?? '');
  const detail = textOf(/<p class="detail">([\s\S]*?)<\/p>/.exec(html)?.[1] ?? '');
  expect(title, `${label}: title`).not.to.equal('');
  expect(detail, `${label}: detail`).to.match(/^\S.*[.!?]$/);
  const body = textOf(/<body[^>]*>([\s\S]*)<\/body>/.exec(html)?.[1] ?? html);
  const windowTitle = textOf(/<title>([\s\S]*?)<\/title>/.exec(html)?.[1] ?? '');
  for (const text of [body, windowTitle])
    expect(DOUBLED.exec(text)?.[0], `${label}: doubled word in "${text}"`).to.equal(undefined);
  return { title, detail };
};

/** Renders an error page as the app host does for `error`. */
const render = (error: unknown): { status: number; html: string } => {
  const problem = toProblem(error);
  if (!problem) throw new Error(`not an error the app host renders: ${String(error)}`);
  const headers: Record<string, string> = {};
  const ctx = {
    status: 0,
    type: '',
    body: '',
    set: (name: string, value: string) => {
      headers[name] = value;
    },
  };
  sendErrorPage(ctx as unknown as Context, problem.status, problem.detail, problem.code);
  expect(ctx.type).to.equal('text/html; charset=utf-8');
  return { status: ctx.status, html: ctx.body };
};

// ---------------------------------------------------------------------------------------------
// Error messages written in the code of the launcher and the app host
// ---------------------------------------------------------------------------------------------

/** The code behind {launch_url} and {app_url}: its error messages reach those error pages. */
const SOURCES = [
  ...readdirSync(join(ROOT, 'src/http/app'))
    .filter((f) => f.endsWith('.ts'))
    .map((f) => `src/http/app/${f}`),
  'src/http/launch/router.ts',
  'src/http/auth/sessions.ts',
  'src/integration/launcher.ts',
  'src/commands/launch.ts',
];

/** Reads the string literal at `start`; `${…}` becomes X1, X2… @returns its text and end index. */
const readLiteral = (src: string, start: number): [string, number] => {
  const quote = src[start]!;
  let text = '';
  let holes = 0;
  let i = start + 1;
  while (src[i] !== quote) {
    if (src[i] === '\\') {
      text += src[i + 1] === 'n' ? '\n' : src[i + 1];
      i += 2;
    } else if (quote === '`' && src[i] === '$' && src[i + 1] === '{') {
      let depth = 1;
      for (i += 2; depth > 0; i++) depth += src[i] === '{' ? 1 : src[i] === '}' ? -1 : 0;
      text += `X${++holes}`;
    } else text += src[i++];
  }
  return [text, i];
};

/** The string literals among the arguments of the call whose `(` is at `open`. */
const literalArguments = (src: string, open: number): string[] => {
  const literals: string[] = [];
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    const c = src[i]!;
    if (c === '(') depth++;
    else if (c === ')' && --depth === 0) break;
    else if (c === "'" || c === '"' || c === '`') {
      const [text, end] = readLiteral(src, i);
      if (depth === 1) literals.push(text);
      i = end;
    }
  }
  return literals;
};

/** Every error the code above can throw with a written message, as the error it is. */
const writtenErrors = (): { where: string; error: Error }[] => {
  const found: { where: string; error: Error }[] = [];
  for (const file of SOURCES) {
    const src = readFileSync(join(ROOT, file), 'utf8');
    for (const m of src.matchAll(/new (DomainError|HttpError|LaunchError)\(|\bnotConfigured\(/g)) {
      const open = m.index + m[0].length - 1;
      const where = `${file}:${src.slice(0, m.index).split('\n').length}`;
      const literals = literalArguments(src, open);
      const status = Number(/^\(\s*(\d{3})/.exec(src.slice(open, open + 40))?.[1]);
      if (m[1] === 'DomainError' && literals.length >= 3)
        found.push({
          where,
          error: new DomainError(literals[0] as DomainErrorKind, literals[1]!, literals[2]!),
        });
      else if (m[1] === 'HttpError' && literals.length >= 2)
        found.push({ where, error: new HttpError(status, literals[0]!, literals[1]!) });
      // The launch router turns a LaunchError into HttpError(status, 'LaunchFailed', message).
      else if (m[1] === 'LaunchError' && literals.length >= 1)
        found.push({ where, error: new HttpError(status, 'LaunchFailed', literals[0]!) });
      else if (m[0] === 'notConfigured(' && literals.length >= 1)
        found.push({
          where,
          error: new HttpError(
            503,
            'LauncherNotConfigured',
            `the launcher is not configured: ${literals[0]}`,
          ),
        });
    }
  }
  for (const text of Object.values(REFUSAL_TEXT))
    found.push({ where: 'REFUSAL_TEXT', error: new HttpError(401, 'LaunchNotTrusted', text) });
  return found;
};

describe('error pages of the launcher and the app host, proofread', () => {
  /** Every status the app host and the launcher answer with an error page. */
  const STATUSES = [400, 401, 403, 404, 405, 409, 410, 412, 413, 415, 422, 500, 502, 503];

  it('has a title of its own for every status, and title, detail and hint for every code', () => {
    for (const status of STATUSES) {
      const { html } = render(new HttpError(status, 'SomeError', 'something happened'));
      const { title } = proofread(html, `status ${status}`);
      expect(TITLES[status], `a title for status ${status}`).to.be.a('string');
      expect(title, `status ${status}`).to.equal(TITLES[status]);
      if (status !== 500) expect(title, `status ${status}`).not.to.equal(FALLBACK_TITLE);
      expect(textOf(html)).to.include(`${DEFAULT_HINT} (Status ${status}.)`);
    }
    for (const [code, title] of Object.entries(TITLES_BY_CODE)) {
      const { html } = render(new HttpError(400, code, 'something happened'));
      expect(proofread(html, code).title).to.equal(title);
      expect(textOf(html)).to.include(HINTS[code] ?? DEFAULT_HINT);
    }
  });

  it('renders every error message of the launcher and app host code without a doubled word', () => {
    const errors = writtenErrors();
    // The sweep found them all (a broken parser finds none and would prove nothing).
    expect(errors.length, errors.map((e) => e.where).join('\n')).to.be.at.least(40);
    for (const { where, error } of errors) {
      const { status, html } = render(error);
      expect(STATUSES, where).to.include(status);
      const { detail } = proofread(html, `${where} (${error.message})`);
      expect(detail.toLowerCase(), where).to.include(error.message.slice(0, 12).toLowerCase());
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Over HTTP: every refusal of a real launcher and app host
// ---------------------------------------------------------------------------------------------

const LAUNCHER_ENV = {
  LAUNCHER_CLIENT_ID: 'ehr-backend',
  LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
  LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
};
const OTHER_SECRET = 'another-launch-secret-0123456789-abcdefg';

const [pglite] = testDatabases.filter((d) => d.name === 'pglite');

describe('error pages over HTTP, proofread', function () {
  this.timeout(120_000);
  let app: TestApp;
  let seq = 0;
  const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
  const launcher = () => ({ patient: unique('P'), encounter: unique('E'), user: 'dr-proof' });

  before(async () => {
    app = await startTestApp(pglite!, { env: LAUNCHER_ENV });
    await seed(app);
  });
  after(() => app?.close());

  /** Fetches `path` (or a URL) and proofreads the error page it answers with `status`. */
  const expectPage = async (
    label: string,
    target: string,
    status: number,
    init: RequestInit = {},
    on: TestApp = app,
  ) => {
    const url = target.startsWith('http') ? target : `${on.baseUrl}${target}`;
    const res = await fetch(url.replace('//localhost:', '//127.0.0.1:'), { redirect: 'manual', ...init });
    const html = await res.text();
    expect(res.status, `${label}: ${html}`).to.equal(status);
    expect(res.headers.get('content-type'), label).to.equal('text/html; charset=utf-8');
    return proofread(html, label);
  };

  /** A launch query of `pairs` (repeats allowed) signed with `secret` at `at`. */
  const signedPairs = (pairs: [string, string][], at = app.casebook.clock(), secret = TEST_LAUNCH_SECRET) => {
    const all: [string, string][] = [
      ...pairs,
      ['ts', String(Math.floor(at.getTime() / 1000))],
      ['nonce', newNonce()],
    ];
    const grouped: Record<string, string[]> = {};
    for (const [name, value] of all) grouped[name] = [...(grouped[name] ?? []), value];
    const query = new URLSearchParams(all);
    query.append('sig', signCanonical(canonicalString(grouped), secret));
    return `/launch?${query.toString()}`;
  };
  const signed = (params: Record<string, string>) => signedPairs(Object.entries(params));

  it('the launcher refuses untrusted links: 401 with the reason', async () => {
    const now = app.casebook.clock();
    const shifted = (seconds: number) => new Date(now.getTime() + seconds * 1000);
    const tampered = new URLSearchParams(signLaunch(launcher(), TEST_LAUNCH_SECRET, now));
    tampered.set('patient', 'P-mallory');
    const cases: [string, string][] = [
      ['unsigned', `/launch?${new URLSearchParams(launcher())}`],
      ['malformed', `/launch?${new URLSearchParams({ ...launcher(), ts: 'x', nonce: 'short', sig: 'y' })}`],
      ['another key', `/launch?${signLaunch(launcher(), OTHER_SECRET, now)}`],
      ['tampered', `/launch?${tampered}`],
      ['expired', `/launch?${signLaunch(launcher(), TEST_LAUNCH_SECRET, shifted(-301))}`],
      ['future', `/launch?${signLaunch(launcher(), TEST_LAUNCH_SECRET, shifted(301))}`],
    ];
    const details = new Set<string>();
    for (const [label, path] of cases) {
      const page = await expectPage(label, path, 401);
      expect(page.title).to.equal(TITLES_BY_CODE.LaunchNotTrusted);
      details.add(page.detail);
    }
    expect(details.size, [...details].join('\n')).to.equal(5); // a tampered link has a bad signature
    const once = launchUrlOf(app, launcher());
    expect((await fetch(once, { redirect: 'manual' })).status).to.equal(303);
    const replayed = await expectPage('replayed', once, 401);
    expect(replayed.detail).to.match(/already used/);
  });

  it('the launcher refuses invalid parameters (400) and an encounter of another patient (409)', async () => {
    const { patient, encounter, user } = launcher();
    const cases: [string, string][] = [
      ['no patient', signed({ encounter, user })],
      ['no encounter', signed({ patient, user })],
      [
        'patient twice',
        signedPairs([
          ['patient', patient],
          ['patient', 'P-2'],
          ['encounter', encounter],
          ['user', user],
        ]),
      ],
      ['patient too long', signed({ patient: 'P'.repeat(129), encounter, user })],
      ['control character', signed({ patient: 'P\u0007', encounter, user })],
      ['dob not a date', signed({ patient, encounter, user, dob: 'yesterday' })],
      ['dob not a real date', signed({ patient, encounter, user, dob: '2001-02-30' })],
      ['dob in the future', signed({ patient, encounter, user, dob: '2999-01-01' })],
      ['no user', signed({ patient, encounter })],
      ['unknown sex', signed({ patient, encounter, user, sex: 'Q' })],
    ];
    for (const [label, path] of cases) await expectPage(label, path, 400);
    expect(
      (await fetch(`${app.baseUrl}${signed({ patient, encounter, user })}`, { redirect: 'manual' })).status,
    ).to.equal(303);
    const moved = await expectPage(
      'encounter of another patient',
      signed({ patient: unique('P'), encounter, user }),
      409,
    );
    expect(moved).to.deep.include({ title: TITLES_BY_CODE.EncounterOfAnotherPatient });
    expect(moved.detail).to.equal(`Encounter ${encounter} belongs to another patient.`);
  });

  it('the status page after submit refuses bad references, no session and unknown reports', async () => {
    const { cookie, taskId } = await launchThrough(app, launcher());
    await expectPage('bad reference', '/launch/submitted?response=x&task=Task/1', 400);
    await expectPage(
      'no session',
      `/launch/submitted?response=QuestionnaireResponse/1&task=Task/${taskId}`,
      401,
    );
    await expectPage(
      'unknown session',
      '/launch/submitted?response=QuestionnaireResponse/1&task=Task/1',
      401,
      {
        headers: { Cookie: 'auth_session=not-a-session' },
      },
    );
    await expectPage(
      'unknown report',
      `/launch/submitted?response=QuestionnaireResponse/999999&task=Task/${taskId}`,
      404,
      { headers: { Cookie: cookie } },
    );
  });

  it('the app host refuses launches, tasks and forms it cannot open', async () => {
    const { cookie, taskId } = await launchThrough(app, launcher());
    const withCookie = { headers: { Cookie: cookie } };
    // A form post of the app's own pages carries its Origin (src/http/edge/same-origin.ts).
    const form = (body: Record<string, string>, origin = new URL(app.casebook.config.appUrl).origin) => ({
      method: 'POST',
      headers: {
        Cookie: cookie,
        'Content-Type': 'application/x-www-form-urlencoded',
        Origin: origin,
      },
      body: new URLSearchParams(body).toString(),
    });
    const cases: [string, string, number, RequestInit?][] = [
      ['no cookie after the bounce', `/app/external/v1?task=Task/${taskId}&cb_bounce=1`, 401],
      [
        'unknown session',
        `/app/external/v1?task=Task/${taskId}`,
        401,
        { headers: { Cookie: 'auth_session=nope' } },
      ],
      ['no task', '/app/external/v1', 400, withCookie],
      ['malformed task', '/app/external/v1?task=Patient/1', 400, withCookie],
      ['task twice', `/app/external/v1?task=Task/${taskId}&task=Task/${taskId}`, 400, withCookie],
      ['unknown task', '/app/external/v1?task=Task/999999', 404, withCookie],
      ['malformed task identifier', '/app/external/v1?task:identifier=no-bar', 400, withCookie],
      ['unknown task identifier', '/app/external/v1?task:identifier=urn:x%7Cnone', 404, withCookie],
      ['unknown task page', '/app/tasks/999999/forms', 404, withCookie],
      ['task id not a number', '/app/tasks/abc/report', 404, withCookie],
      ['no route', '/app/nowhere', 404, withCookie],
      ['method not allowed', '/app/external/v1', 405, { ...withCookie, method: 'DELETE' }],
      ['no form chosen', `/app/tasks/${taskId}/forms`, 400, form({})],
      ['unknown form', `/app/tasks/${taskId}/forms`, 404, form({ questionnaire: '999999' })],
      ['cross-site post', `/app/tasks/${taskId}/forms`, 403, form({}, 'https://evil.example')],
      ['unknown action', `/app/tasks/${taskId}/report`, 400, form({ action: 'publish' })],
      ['no response yet', `/app/tasks/${taskId}/report`, 422, withCookie],
    ];
    for (const [label, path, status, init] of cases) await expectPage(label, path, status, init ?? {});
  });

  it('the launcher says when it is not configured (503)', async () => {
    const unsigned = await startTestApp(pglite!, {});
    const noClient = await startTestApp(pglite!, { env: { LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET } });
    try {
      const a = await expectPage('no secret', '/launch?patient=P&encounter=E&user=u', 503, {}, unsigned);
      const b = await expectPage('no client', launchUrlOf(noClient, launcher()), 503, {}, noClient);
      for (const page of [a, b]) expect(page.title).to.equal(TITLES_BY_CODE.LauncherNotConfigured);
    } finally {
      await unsigned.close();
      await noClient.close();
    }
  });
});
