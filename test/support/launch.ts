/** Launch URLs of the hospital launcher for tests (docs/interface.md §4.6). */
import { signLaunch } from '../../src/integration/launch-signature.js';
import type { TestApp } from './app.js';

/** A shared secret for tests' signed launch links (LAUNCHER_SHARED_SECRET). */
export const TEST_LAUNCH_SECRET = 'test-launch-secret-0123456789-abcdefghij';

/**
 * `GET {launch_url}?…` on 127.0.0.1 with `params`, signed now (a fresh nonce each call) with the
 * app's first LAUNCHER_SHARED_SECRET; unsigned when it has none.
 */
export const launchUrlOf = (app: TestApp, params: Record<string, string>): string => {
  const [secret] = app.casebook.config.launcher.sharedSecrets;
  const query = secret ? signLaunch(params, secret, app.casebook.clock()) : new URLSearchParams(params);
  return `${app.baseUrl}/launch?${query.toString()}`;
};

/**
 * Launches as a browser would: the signed launch link, the handover, the app's launch URL.
 * @returns the Task the launch opened and the session cookie.
 */
export const launchThrough = async (
  app: TestApp,
  params: Record<string, string>,
): Promise<{ taskId: number; cookie: string }> => {
  const local = (url: string) => url.replace('//localhost:', '//127.0.0.1:');
  const launch = await fetch(launchUrlOf(app, params), { redirect: 'manual' });
  if (launch.status !== 303) throw new Error(`launch answered ${launch.status}: ${await launch.text()}`);
  const handover = new URL(launch.headers.get('location')!);
  const taskId = Number(/task=Task\/(\d+)/.exec(decodeURIComponent(handover.searchParams.get('next')!))![1]);
  const handed = await fetch(local(handover.href), { redirect: 'manual' });
  const cookie = /auth_session=[^;]+/.exec(handed.headers.get('set-cookie') ?? '')![0];
  return { taskId, cookie };
};
