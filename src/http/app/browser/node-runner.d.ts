/**
 * The browser bundle swaps src/sdc/run-within-budget.ts (Node's `vm` runner) for
 * src/sdc/run-within-budget.browser.ts (src/http/app/assets.ts), but the engine this project
 * typechecks imports the Node file by name. These two declarations type exactly what that file
 * uses, so the browser project typechecks without Node's types; the bundle's build (platform
 * browser) is what refuses any other Node module.
 */
declare module 'node:vm' {
  interface Context {
    task: (() => unknown) | undefined;
  }
  export class Script {
    constructor(code: string, options?: { filename?: string });
    runInContext(context: Context, options?: { timeout?: number }): unknown;
  }
  export function createContext<T extends object>(sandbox: T): T & Context;
  const vm: { createContext: typeof createContext; Script: typeof Script };
  export default vm;
}

declare const process: {
  cpuUsage(previous?: { user: number; system: number }): { user: number; system: number };
};
