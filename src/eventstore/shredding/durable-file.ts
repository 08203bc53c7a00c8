/**
 * Files that must survive a crash whole or not at all (docs/architecture.md "Erasure"): the key
 * store of the embedded default and the KEK it makes. A reader never sees half a file, and a
 * second writer never overwrites a key file another one made.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, linkSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/** Flushes a directory's entries (a rename or link in it) to disk; a no-op where directories cannot be opened. */
const syncDirectory = (dir: string): void => {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // Some platforms (Windows) cannot fsync a directory; the rename is still atomic there.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
};

/** Writes `data` to a new temporary file beside `path` (mode `mode`, fsynced) and returns its name. */
const writeTemporary = (path: string, data: string | Buffer, mode: number): string => {
  const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  const fd = openSync(tmp, 'wx', mode);
  try {
    writeSync(fd, typeof data === 'string' ? Buffer.from(data, 'utf8') : data);
    fsyncSync(fd);
  } catch (error) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw error;
  }
  closeSync(fd);
  return tmp;
};

/**
 * Replaces `path` with `data` atomically: a temporary file beside it, fsynced, renamed over it, and
 * the directory fsynced. A crash leaves the old file or the new one, never a mix.
 * @param mode permissions of the new file (default 0600: key material).
 * @throws the file system's error (the temporary file is removed).
 */
export const writeFileAtomic = (path: string, data: string | Buffer, mode = 0o600): void => {
  const tmp = writeTemporary(path, data, mode);
  try {
    renameSync(tmp, path);
  } catch (error) {
    rmSync(tmp, { force: true });
    throw error;
  }
  syncDirectory(dirname(path));
};

/**
 * Creates `path` holding `data` unless it exists, atomically: the file is written and fsynced under
 * a temporary name and then hard-linked to `path`, which fails when another process made `path`
 * first — so a reader never sees it half written, and two processes starting at once never
 * overwrite each other's file (a rename would).
 * @returns true when this call made the file, false when it existed.
 * @throws the file system's error.
 */
export const createFileExclusive = (path: string, data: string | Buffer, mode = 0o600): boolean => {
  const tmp = writeTemporary(path, data, mode);
  try {
    linkSync(tmp, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  } finally {
    rmSync(tmp, { force: true });
  }
  syncDirectory(dirname(path));
  return true;
};
