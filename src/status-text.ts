/**
 * Reason phrases of the HTTP statuses casebook answers (RFC 9110 §15), one table for the
 * problem+json `title` (src/http/errors.ts) and an AuditEvent's outcome detail
 * (src/fhir/audit-event.ts).
 */
export const STATUS_TEXT: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  410: 'Gone',
  412: 'Precondition Failed',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** The reason phrase of `status`, or `Error` for one casebook does not answer. */
export const statusText = (status: number): string => STATUS_TEXT[status] ?? 'Error';
