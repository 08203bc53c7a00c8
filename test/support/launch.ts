/** Launch URLs of the hospital launcher for tests (docs/interface.md §4.6). */
import type { TestApp } from './app.js';

/** `GET {launch_url}?…` on 127.0.0.1 with `params`. */
export const launchUrlOf = (app: TestApp, params: Record<string, string>): string =>
  `${app.baseUrl}/launch?${new URLSearchParams(params).toString()}`;
