/**
 * Text from outside systems made safe for the event log (issue 15 "Outside text is sanitised";
 * docs/architecture.md "Report export"): an acknowledgement code, an error message from a sink or
 * from the network stack. Postgres text cannot hold U+0000, and a read model that cannot store an
 * event stops; control characters make logs and pages unreadable; a filesystem path or a host
 * internal is none of the event log's business (it stays in the process log).
 */

/** Longest sanitised text, in UTF-16 code units (an ellipsis marks a cut). */
export const MAX_OUTSIDE_TEXT = 500;

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is replaced
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
/** An absolute POSIX or Windows path (two segments or more), e.g. `/var/lib/drop/506-v1.txt.tmp`. */
const PATH = /(?:[A-Za-z]:\\|\/)(?:[^\s/\\'"`:]+[/\\])+[^\s/\\'"`:]*/g;

/**
 * `text` with every control character shown as `\xNN` (`\u0000` → `\x00`), lone surrogates as
 * U+FFFD, absolute filesystem paths as `<path>`, cut to {@link MAX_OUTSIDE_TEXT}.
 * @returns a string any event, log line and page can hold.
 */
export const sanitizeOutsideText = (text: string, max = MAX_OUTSIDE_TEXT): string => {
  const clean = text
    .replace(PATH, '<path>')
    .replace(LONE_SURROGATE, '\ufffd')
    .replace(CONTROL, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
  return clean.length > max ? `${clean.slice(0, max - 1)}…` : clean;
};

/**
 * A readable, sanitised reason for a failed delivery: network errors by their code and address
 * (`fetch failed` alone says nothing), others by their message.
 */
export const deliveryError = (error: unknown): string => {
  const err = error as { message?: unknown; code?: unknown; cause?: unknown; name?: unknown } | null;
  const cause = (err?.cause ?? err) as { code?: unknown; address?: unknown; port?: unknown } | null;
  const code = typeof cause?.code === 'string' ? cause.code : undefined;
  const where =
    typeof cause?.address === 'string'
      ? ` by ${cause.address}${typeof cause.port === 'number' ? `:${cause.port}` : ''}`
      : '';
  const readable: Record<string, string> = {
    ECONNREFUSED: `connection refused${where}`,
    ECONNRESET: `connection reset${where}`,
    ETIMEDOUT: `connection timed out${where}`,
    ENOTFOUND: 'host not found',
    EHOSTUNREACH: `host unreachable${where}`,
    EACCES: 'permission denied writing the report',
    EPERM: 'permission denied writing the report',
    ENOSPC: 'no space left on the device',
    EROFS: 'read-only file system',
  };
  if (code && readable[code]) return sanitizeOutsideText(readable[code]);
  if (err?.name === 'TimeoutError') return 'no answer from the export sink in time';
  const message = error instanceof Error ? error.message : String(error);
  return sanitizeOutsideText(message);
};
