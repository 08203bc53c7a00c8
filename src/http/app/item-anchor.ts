/**
 * The DOM id of an item's wrapper (issue 32): one rule for the server's markup
 * (src/http/app/render.ts) and the browser's repeat instances (src/http/app/browser/editor.ts).
 */

/**
 * The DOM id of the wrapper of the engine node `key` (src/sdc/engine/tree.ts, `nodule[1]/size`):
 * every character other than letters, digits and `-` written as `_<hex>_`, so two keys never
 * share an id — a repeat instance's fields get ids of their own.
 */
export const itemAnchor = (key: string): string =>
  `item-${key.replace(/[^A-Za-z0-9-]/g, (c) => `_${c.codePointAt(0)!.toString(16)}_`)}`;
