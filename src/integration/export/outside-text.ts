/**
 * Text that comes from outside casebook (an HL7 acknowledgement, a sink's error, a system call's
 * message) is made safe before it goes into an event (issue 15): valid UTF-8 without control
 * characters (PostgreSQL text refuses NUL; a read model must never stop on it), bounded in length,
 * and without server internals (filesystem paths) — those stay in the pino log.
 */

/** Longest outside text kept in an event, characters. */
export const MAX_OUTSIDE_TEXT = 500;

const hex = (c: string) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;

/**
 * `text` with every C0/C1 control character written as a visible `\xNN` escape, lone surrogates
 * replaced by U+FFFD, and at most `max` characters (an ellipsis marks a cut).
 */
export const sanitizeOutsideText = (text: string, max = MAX_OUTSIDE_TEXT): string => {
  const clean = text
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is escaped
    .replace(/[\u0000-\u001f\u007f-\u009f]/g, hex)
    .replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
  return clean.length <= max ? clean : `${clean.slice(0, max - 1)}…`;
};

/** Absolute paths (POSIX or Windows) in a message: server internals, never stored in events. */
const PATHS = /(?<=^|[\s'"`(=])(?:[A-Za-z]:\\|\/)(?:[^\s'"`,;:()]+[/\\]?)+/g;

const SYSTEM_REASONS: Record<string, string> = {
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  ENOSPC: 'no space left on the device',
  EROFS: 'read-only file system',
  ENOENT: 'the directory does not exist',
  EISDIR: 'a directory is in the way',
  ENOTDIR: 'the drop directory is not a directory',
  EEXIST: 'the drop directory is not a directory',
  EDQUOT: 'disk quota exceeded',
  EMFILE: 'too many open files',
};

/** The `code` and connection endpoint of a Node.js system error, looking through `cause`. */
const systemError = (error: unknown): { code?: string; address?: string; port?: number } | undefined => {
  for (let e: unknown = error, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const candidate = e as { code?: unknown; address?: unknown; port?: unknown; cause?: unknown };
    if (typeof candidate.code === 'string' && /^E[A-Z]+$/.test(candidate.code))
      return {
        code: candidate.code,
        ...(typeof candidate.address === 'string' ? { address: candidate.address } : {}),
        ...(typeof candidate.port === 'number' ? { port: candidate.port } : {}),
      };
    const nested = (e as { errors?: unknown }).errors;
    if (Array.isArray(nested) && nested.length > 0) e = nested[0];
    else e = candidate.cause;
  }
  return undefined;
};

/**
 * The reason a delivery failed, fit for an event: a readable sentence (`connection refused by
 * 127.0.0.1:2575`, `permission denied writing to the drop directory`) instead of `fetch failed` or
 * a message with a server path; sanitised with {@link sanitizeOutsideText}. `target` names the sink
 * (scheme and host) for network errors.
 */
export const failureReason = (error: unknown, target: string): string => {
  const sys = systemError(error);
  const where = sys?.address ? `${sys.address}${sys.port ? `:${sys.port}` : ''}` : target;
  switch (sys?.code) {
    case 'ECONNREFUSED':
      return `connection refused by ${where}`;
    case 'ECONNRESET':
      return `connection reset by ${where}`;
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `no route to ${where}`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `host name of ${target} not found`;
    case 'ETIMEDOUT':
      return `connection to ${where} timed out`;
    case 'EPIPE':
      return `connection closed by ${where} while sending`;
    default:
      if (sys?.code && SYSTEM_REASONS[sys.code])
        return `${SYSTEM_REASONS[sys.code]} (${sys.code}) writing to the drop directory`;
  }
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError'))
    return `no answer from ${target} within the timeout`;
  const message = error instanceof Error ? error.message : String(error);
  if (message === 'fetch failed') return `could not reach ${target}`;
  return sanitizeOutsideText(message.replace(PATHS, '<path>'));
};
