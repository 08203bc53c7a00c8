/** FHIR media types at the HTTP edge, shared by the data server and the form backend. */
import type { Context } from 'koa';
import { HttpError } from '../errors.js';

export const FHIR_JSON = 'application/fhir+json';

/**
 * Refuses a request body that is not FHIR JSON (issue 3: accept application/fhir+json and
 * application/json). Shared by the data server and the form backend.
 * @throws {HttpError} 415.
 */
export const requireFhirJson = (ctx: Context): void => {
  if (!ctx.is('application/fhir+json', 'application/json'))
    throw new HttpError(
      415,
      'UnsupportedMediaType',
      'send the resource as application/fhir+json (or application/json)',
    );
};
