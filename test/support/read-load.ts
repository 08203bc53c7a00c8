/**
 * A load of reads and read-your-writes that every quiet server answers correctly, for tests of
 * what a server answers while something happens beside it (a rebuild of its read models): each
 * answer is either the correct one or 503 with `Retry-After`; anything else is written down.
 */
import { expect } from 'chai';

/** What the load reads: known rows, and the credentials to read them with. */
export interface ReadLoadTarget {
  /** `{fhir_base_url}`, `{auth_url}` as reachable from the test. */
  readonly fhirUrl: string;
  readonly authUrl: string;
  /** `Basic …` of an API client with `system/*.*`. */
  readonly basic: string;
  /** `auth_session=…` of a session handed over. */
  readonly cookie: string;
  readonly patient: { readonly id: string; readonly system: string; readonly value: string };
  /** A session of the client's tenant. */
  readonly sessionId: number;
}

export interface ReadLoadResult {
  /** Answers that were the correct one, by kind of request. */
  readonly correct: Record<string, number>;
  /** Answers received while `during()` held (the load's whole run when not given). */
  readonly answeredDuring: number;
  /** 503 answers with Retry-After. */
  readonly unavailable: number;
  /** Every other answer: kind, status and the start of the body. */
  readonly wrong: string[];
}

type Check = (res: Response, body: any) => boolean;

/**
 * Starts `connections` loops, each sending in turn: GET Patient by id, a search by its
 * identifier, a session read (Basic), the session of a cookie, and a POST of a new Patient read
 * back at once (read-your-writes). Call the returned function to stop them and get the tally.
 * @param during whether what the test watches is under way (answers then are counted apart).
 */
export const startReadLoad = (
  target: ReadLoadTarget,
  connections: number,
  during: () => boolean = () => true,
): (() => Promise<ReadLoadResult>) => {
  let running = true;
  let answeredDuring = 0;
  const correct: Record<string, number> = {};
  let unavailable = 0;
  const wrong: string[] = [];
  const fhirHeaders = { Authorization: target.basic, Accept: 'application/fhir+json' };
  const judge = async (kind: string, res: Response, check: Check): Promise<any> => {
    const text = await res.text();
    if (during()) answeredDuring++;
    let body: any;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if (res.status === 503 && res.headers.get('retry-after')) unavailable++;
    else if (check(res, body)) {
      correct[kind] = (correct[kind] ?? 0) + 1;
      return body;
    } else wrong.push(`${kind}: ${res.status} ${text.slice(0, 200)}`);
    return undefined;
  };
  const rounds = async (loop: number) => {
    for (let i = 0; running; i++) {
      const { patient } = target;
      await judge(
        'read',
        await fetch(`${target.fhirUrl}/Patient/${patient.id}`, { headers: fhirHeaders }),
        (res, body) => res.status === 200 && body?.id === patient.id,
      );
      await judge(
        'search',
        await fetch(
          `${target.fhirUrl}/Patient?identifier=${encodeURIComponent(`${patient.system}|${patient.value}`)}`,
          { headers: fhirHeaders },
        ),
        (res, body) =>
          res.status === 200 && body?.entry?.length === 1 && body.entry[0].resource.id === patient.id,
      );
      await judge(
        'session',
        await fetch(`${target.authUrl}/sessions/${target.sessionId}`, {
          headers: { Authorization: target.basic },
        }),
        (res, body) => res.status === 200 && String(body?.id) === String(target.sessionId),
      );
      await judge(
        'cookie',
        await fetch(`${target.authUrl}/sessions/current`, { headers: { Cookie: target.cookie } }),
        (res, body) => res.status === 200 && String(body?.id) !== 'undefined',
      );
      const created = await judge(
        'write',
        await fetch(`${target.fhirUrl}/Patient`, {
          method: 'POST',
          headers: { ...fhirHeaders, 'Content-Type': 'application/fhir+json' },
          body: JSON.stringify({
            resourceType: 'Patient',
            identifier: [
              { system: 'urn:load:new', value: `l${loop}-${i}-${Math.random().toString(36).slice(2)}` },
            ],
          }),
        }),
        (res, body) => res.status === 201 && typeof body?.id === 'string',
      );
      if (created)
        await judge(
          'read-own-write',
          await fetch(`${target.fhirUrl}/Patient/${created.id}`, { headers: fhirHeaders }),
          (res, body) => res.status === 200 && body?.id === created.id,
        );
    }
  };
  const loops = Array.from({ length: connections }, (_, loop) => rounds(loop));
  return async () => {
    running = false;
    await Promise.all(loops);
    return { correct, answeredDuring, unavailable, wrong };
  };
};

/** Asserts a tally: no wrong answer, and every kind answered correctly at least `least` times. */
export const expectOnlyCorrectOr503 = (result: ReadLoadResult, least = 1): void => {
  expect(result.wrong, result.wrong.slice(0, 5).join('\n')).to.deep.equal([]);
  for (const kind of ['read', 'search', 'session', 'cookie', 'write', 'read-own-write'])
    expect(result.correct[kind] ?? 0, kind).to.be.at.least(least);
};
