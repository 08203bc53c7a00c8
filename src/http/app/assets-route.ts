/**
 * Serving the browser bundles of src/http/app/assets.ts at `{app_url}/assets/<name>` (issue 32),
 * and the script URLs a page names.
 */
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { assets } from './assets.js';

/** The URL path of the assets under `{app_url}`. */
export const ASSETS_PATH = '/assets';

/** The report editor's bundles: its page script and the form engine's Web Worker. */
export interface EditorAssets {
  readonly scripts: string[];
  readonly worker: string | undefined;
}

/**
 * The URLs of the report editor's bundles. When they cannot be built the page goes without (it
 * works without script) and the cause is logged.
 */
export const editorAssets = async (casebook: Casebook): Promise<EditorAssets | undefined> => {
  try {
    const { entries } = await assets();
    const url = (name: string | undefined) =>
      name === undefined ? undefined : `${casebook.config.appUrl.replace(/\/+$/, '')}${ASSETS_PATH}/${name}`;
    const editor = url(entries.get('editor')?.name);
    return { scripts: editor ? [editor] : [], worker: url(entries.get('engine-worker')?.name) };
  } catch (error) {
    casebook.logger.error({ err: error }, 'the browser bundle does not build; pages are served without it');
    return undefined;
  }
};

/** The read-only report view's script (the Print button), or undefined when the bundles do not build. */
export const reportViewAssets = async (casebook: Casebook): Promise<string[] | undefined> => {
  try {
    const name = (await assets()).entries.get('report-view')?.name;
    return name ? [`${casebook.config.appUrl.replace(/\/+$/, '')}${ASSETS_PATH}/${name}`] : undefined;
  } catch (error) {
    casebook.logger.error({ err: error }, 'the browser bundle does not build; pages are served without it');
    return undefined;
  }
};

/**
 * GET {app_url}/assets/:name: a bundle by its hashed name, cacheable for a year (a new build has a
 * new name). Static code without data, so no session is needed; 404 for any other name.
 */
export const serveAsset = async (ctx: Context): Promise<void> => {
  const asset = (await assets()).byName.get(String(ctx.params.name ?? ''));
  if (!asset) return;
  ctx.status = 200;
  ctx.type = asset.contentType;
  ctx.set('Cache-Control', 'public, max-age=31536000, immutable');
  ctx.body = Buffer.from(asset.body);
};
