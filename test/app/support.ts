/**
 * Support of the real-browser tests (issue 5 "Tests in a real browser"): Debian chromium through
 * playwright-core, a tiny EHR web server on another site (127.0.0.1, while casebook is reached as
 * localhost), and helpers that create patients, Tasks, Questionnaires and sessions over the APIs.
 */

import { once } from 'node:events';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { AxeBuilder } from '@axe-core/playwright';
import { expect } from 'chai';
import { type Browser, type BrowserContext, chromium, type Page, type Response } from 'playwright-core';
import { GENERAL, type TestApp } from '../support/app.js';
import { fhir, ROLE_NEW } from '../support/fhir.js';

export const CHROMIUM = '/usr/bin/chromium';
export const ARTIFACTS = join(process.cwd(), 'test-artifacts');

/** Starts headless Debian chromium (no browser download). */
export const launchBrowser = (): Promise<Browser> =>
  chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });

/** `test-artifacts/<name>.png` (the directory is gitignored). */
export const screenshot = async (page: Page, name: string): Promise<string> => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
};

export const chromiumMissing = (): boolean => !existsSync(CHROMIUM);

// ---------------------------------------------------------------------------------------------
// Accessibility and screenshots at the two sizes of issue 32

/** The axe-core tags of WCAG 2.2 AA. */
export const WCAG = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'];
export const DESKTOP = { width: 1366, height: 768 };
export const PHONE = { width: 390, height: 844 };
/** Where {@link axeAtBothSizes} writes its screenshots (outside the repository). */
export const SHOTS = '/tmp/i32-shots';

/** axe-core's violations at WCAG 2.2 AA, as `rule: target — summary` lines. */
export const violations = async (page: Page): Promise<string[]> => {
  const result = await new AxeBuilder({ page }).withTags(WCAG).analyze();
  return result.violations.flatMap((v) =>
    v.nodes.map((n) => `${v.id}: ${n.target.join(' ')} — ${n.failureSummary}`),
  );
};

/**
 * axe-core's violations of the page's current state at phone size (390×844) and at desktop size
 * (1366×768), each line prefixed with the size; writes a viewport screenshot of each size to
 * `/tmp/i32-shots/<name>-<phone|desktop>.png` and puts the page's viewport back as it was.
 */
export const axeAtBothSizes = async (page: Page, name: string): Promise<string[]> => {
  mkdirSync(SHOTS, { recursive: true });
  const before = page.viewportSize();
  const found: string[] = [];
  for (const [size, viewport] of [
    ['phone', PHONE],
    ['desktop', DESKTOP],
  ] as const) {
    await page.setViewportSize(viewport);
    found.push(...(await violations(page)).map((v) => `${size}: ${v}`));
    await page.screenshot({ path: join(SHOTS, `${name}-${size}.png`) });
  }
  if (before) await page.setViewportSize(before);
  return found;
};

// ---------------------------------------------------------------------------------------------
// The EHR site

type Handler = (req: IncomingMessage, url: URL) => Promise<string> | string;

/** A tiny EHR web server on http://127.0.0.1:<port>: another site than casebook's localhost. */
export interface Ehr {
  readonly origin: string;
  /** Serves `handler`'s HTML at a fresh path; returns the page's URL. */
  page(handler: Handler): string;
  close(): Promise<void>;
}

const escapeText = (text: string): string =>
  text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );

/** A page of the fake clinical system (its empty icon keeps the browser from asking for /favicon.ico). */
export const html = (title: string, body: string): string =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>${escapeText(title)}</title></head><body>${body}</body></html>`;

export const link = (href: string, text: string, id = 'open-report'): string =>
  `<a id="${id}" href="${escapeText(href)}">${escapeText(text)}</a>`;

export const startEhr = async (): Promise<Ehr> => {
  const handlers = new Map<string, Handler>();
  let seq = 0;
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const handler = handlers.get(url.pathname);
    const send = (status: number, body: string) => {
      res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
      res.end(body);
    };
    if (url.pathname === '/done' || url.pathname === '/cancelled') {
      const title = url.pathname === '/done' ? 'Report done' : 'Report cancelled';
      send(200, html(title, `<h1 id="ehr-${url.pathname.slice(1)}">${title}</h1>`));
      return;
    }
    if (!handler) {
      send(404, html('Not found', '<h1>Not found</h1>'));
      return;
    }
    Promise.resolve()
      .then(() => handler(req, url))
      .then(
        (body) => send(200, body),
        (error: unknown) => send(500, html('EHR error', `<pre>${escapeText(String(error))}</pre>`)),
      );
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    page(handler) {
      const path = `/chart/${++seq}`;
      handlers.set(path, handler);
      return `${origin}${path}`;
    },
    close: async () => {
      server.closeAllConnections();
      server.close();
    },
  };
};

// ---------------------------------------------------------------------------------------------
// casebook over its APIs (as the GENERAL client), on the localhost site

import { unique } from '../support/app.js';

export { unique };

/** The public (localhost) URL of the application host: `http://localhost:<port>/app`. */
export const appUrl = (app: TestApp): string => app.casebook.config.appUrl;

/** The launch entry point URL with `params` (spec §4.2). */
export const launchUrl = (app: TestApp, params: Record<string, string> | string): string =>
  `${appUrl(app)}/external/v1${typeof params === 'string' ? params : `?${new URLSearchParams(params)}`}`;

/** The handover URL (on the localhost site) that activates `token` and goes on to `next`. */
export const handoverUrl = (app: TestApp, token: string, next: string): string =>
  `${app.casebook.config.authUrl}/sessions/$handover?${new URLSearchParams({ token, next })}`;

/** POSTs a resource as the GENERAL client and returns its id (asserting 201). */
export const create = async (app: TestApp, body: Record<string, unknown>): Promise<string> => {
  const res = await fhir(app, 'POST', `/${body.resourceType}`, { body });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return res.body.id as string;
};

export const newPatient = (app: TestApp, family = 'Doe'): Promise<string> =>
  create(app, {
    resourceType: 'Patient',
    identifier: [{ system: 'urn:test:mrn', value: unique('mrn') }],
    name: [{ family, given: ['Jane'] }],
    gender: 'female',
    birthDate: '1970-01-01',
  });

export const TASK_SYSTEM = 'urn:test:task';

/** A Task for `patientId` (draft unless told), with a unique identifier in TASK_SYSTEM. */
export const newTask = async (
  app: TestApp,
  patientId: string,
  extra: Record<string, unknown> = {},
): Promise<{ id: string; identifier: string }> => {
  const identifier = unique('order');
  const id = await create(app, {
    resourceType: 'Task',
    identifier: [{ system: TASK_SYSTEM, value: identifier }],
    status: 'draft',
    intent: 'order',
    description: 'Chest CT report',
    for: { reference: `Patient/${patientId}` },
    ...extra,
  });
  return { id, identifier };
};

/**
 * The test form: a required question, a boolean, an enableWhen-dependent item (shown when the
 * boolean is true) and a coding with answerOptions.
 */
export const chestCtQuestionnaire = (url: string) => ({
  resourceType: 'Questionnaire',
  url,
  version: '1',
  name: 'ChestCtBrowserTest',
  title: 'Chest CT (browser test)',
  status: 'active',
  item: [
    { linkId: 'findings', text: 'Findings', type: 'string', required: true },
    { linkId: 'contrast', text: 'Contrast given', type: 'boolean' },
    {
      linkId: 'contrast-agent',
      text: 'Contrast agent',
      type: 'string',
      enableWhen: [{ question: 'contrast', operator: '=', answerBoolean: true }],
    },
    {
      linkId: 'severity',
      text: 'Severity',
      type: 'coding',
      answerOption: [
        { valueCoding: { system: 'urn:test:severity', code: 'mild', display: 'Mild' } },
        { valueCoding: { system: 'urn:test:severity', code: 'severe', display: 'Severe' } },
      ],
    },
  ],
});

/** POST /sessions as the GENERAL client (spec §2.1); answers the 201 body (spec §2.3). */
export const newSession = async (
  app: TestApp,
  body: Record<string, unknown>,
  auth = GENERAL,
): Promise<any> => {
  const res = await fetch(`${app.authUrl}/sessions`, {
    method: 'POST',
    headers: { Authorization: auth, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const session = (await res.json()) as any;
  expect(res.status, JSON.stringify(session)).to.equal(201);
  return session;
};

/** A session body: a new Practitioner (fhirContext, role new) and the given patient/scope/etc. */
export const sessionBody = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  fhirContext: [
    { type: 'Practitioner', identifier: { system: 'urn:test:staff', value: unique('dr') }, role: ROLE_NEW },
  ],
  scope: 'user/*.* patient/*.*',
  ...extra,
});

export const deleteSession = async (app: TestApp, id: number | string, auth = GENERAL): Promise<number> =>
  (await fetch(`${app.authUrl}/sessions/${id}`, { method: 'DELETE', headers: { Authorization: auth } }))
    .status;

// ---------------------------------------------------------------------------------------------
// Browser helpers

/** Main-frame document responses of `page`, in order (redirect responses included). */
export const recordNavigations = (page: Page): Response[] => {
  const seen: Response[] = [];
  page.on('response', (r) => {
    if (r.request().isNavigationRequest() && r.frame() === page.mainFrame()) seen.push(r);
  });
  return seen;
};

/** Waits until the page stops navigating (a bounce page re-requests by itself). */
export const settle = async (page: Page, navigations: Response[]): Promise<void> => {
  let count = -1;
  let stable = 0;
  for (let i = 0; i < 40 && stable < 3; i++) {
    await page.waitForLoadState('load').catch(() => undefined);
    await page.waitForTimeout(150);
    if (navigations.length === count) stable++;
    else {
      stable = 0;
      count = navigations.length;
    }
  }
};

/** Opens `url` in `page`, lets bounces finish; answers the last main-frame response. */
export const open = async (page: Page, url: string): Promise<{ final: Response; all: Response[] }> => {
  const all = recordNavigations(page);
  await page.goto(url);
  await settle(page, all);
  expect(all.length, `no response for ${url}`).to.be.greaterThan(0);
  return { final: all.at(-1)!, all };
};

/** A fresh context whose browser holds the session (handover with `next`); answers its page. */
export const signIn = async (
  browser: Browser,
  app: TestApp,
  session: any,
  next: string,
): Promise<{ context: BrowserContext; page: Page; final: Response; all: Response[] }> => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const { final, all } = await open(page, handoverUrl(app, session.handover_token, next));
  return { context, page, final, all };
};

/** The path of a URL (no query). */
export const pathOf = (url: string): string => new URL(url).pathname;

/**
 * Answers item `linkId` in the report editor whatever its widget: text inputs are filled, selects
 * and radios pick the option with form value `value` (booleans `true`/`false`, codings their
 * code), a lone checkbox is set for a boolean.
 */
export const answer = async (page: Page, linkId: string, value: string | boolean): Promise<void> => {
  const item = page.locator(`[data-linkid="${linkId}"]`).first();
  const name = `q:${linkId}`;
  const select = item.locator(`select[name="${name}"]`);
  if ((await select.count()) > 0) {
    await select.first().selectOption(String(value));
    return;
  }
  const inputs = item.locator(`input[name="${name}"], textarea[name="${name}"]`);
  const count = await inputs.count();
  expect(count, `no field ${name} in item ${linkId}`).to.be.greaterThan(0);
  const type = await inputs.first().getAttribute('type');
  if (type === 'radio') {
    await item.locator(`input[name="${name}"][value="${String(value)}"]`).check();
    return;
  }
  if (type === 'checkbox' && typeof value === 'boolean') {
    await inputs.first().setChecked(value);
    return;
  }
  await inputs.first().fill(String(value));
};

/** Clears a text answer. */
export const clearAnswer = async (page: Page, linkId: string): Promise<void> => {
  await page.locator(`[data-linkid="${linkId}"] [name="q:${linkId}"]`).first().fill('');
};

/**
 * Clicks `button[name=action][value=<action>]` (or any selector) and answers the main-frame
 * response of the form POST, after the page has loaded the result.
 */
export const clickAndNavigate = async (
  page: Page,
  selector: string,
): Promise<{ first: Response; all: Response[] }> => {
  const all = recordNavigations(page);
  await page.locator(selector).first().click();
  for (let i = 0; i < 100 && all.length === 0; i++) await page.waitForTimeout(50);
  await settle(page, all);
  expect(all.length, `clicking ${selector} navigated nowhere`).to.be.greaterThan(0);
  return { first: all[0]!, all };
};

// ---------------------------------------------------------------------------------------------
// The CT chest form (test/support/ct-chest.ts) in a running casebook

import { CT_CHEST_VALUE_SETS, ctChestQuestionnaire } from '../support/ct-chest.js';

/**
 * Stores the CT chest form's ValueSets and the form itself (as the GENERAL client) and answers the
 * Questionnaire's id. Call once per app: the ValueSets' canonical URLs are fixed.
 */
export const storeCtChest = async (app: TestApp): Promise<string> => {
  for (const valueSet of CT_CHEST_VALUE_SETS) await create(app, valueSet);
  return create(app, ctChestQuestionnaire(`https://forms.example.org/Questionnaire/${unique('ct-chest')}`));
};

/**
 * Opens a draft Task in `page` (a browser holding a session) and picks the form `questionnaireId`:
 * the page ends in the report editor, with the engine's first answer applied.
 */
export const startReportIn = async (
  page: Page,
  app: TestApp,
  taskId: string,
  questionnaireId: string,
): Promise<void> => {
  const { final } = await open(page, launchUrl(app, { task: `Task/${taskId}` }));
  expect(final.status()).to.equal(200);
  const picked = await clickAndNavigate(page, `button[name=questionnaire][value="${questionnaireId}"]`);
  expect(picked.all.at(-1)!.status()).to.equal(200);
  expect(pathOf(page.url())).to.equal(`/app/tasks/${taskId}/report`);
  await engineIdle(page);
};

/** Waits until the editor shows the engine's answer to the current fields (`data-engine="idle"`). */
export const engineIdle = async (page: Page): Promise<void> => {
  await page.waitForSelector('#report-form[data-engine="idle"]', { timeout: 10_000 });
};
