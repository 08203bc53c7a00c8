/**
 * Numbers JSON.parse would change (issue 33): a JSON body is text, and a number in it is whatever
 * digits the client wrote, while JavaScript reads it into a double. `1e400` becomes Infinity,
 * which JSON.stringify writes as `null` (a FHIR decimal silently lost); `9007199254740993`
 * becomes 9007199254740992 (an identifier-like integer silently changed); `1e-400` becomes 0.
 * Such a number is refused while the body is parsed, before anything reads it
 * (src/http/edge/body.ts), rather than stored as something the client did not send.
 *
 * What is kept: every decimal a double carries (`0.1`, `1.000000000000000000E-245`, FHIR's own
 * examples) and every integer literal a double holds exactly (up to 2^53, and larger ones that are
 * exact, such as 10^18). FHIR's 64-bit `integer64` is a JSON string in R5, so no FHIR integer
 * needs more; element types (32-bit `integer`, `positiveInt`…) are checked on the resource
 * (src/fhir/primitives.ts).
 */

/** A number literal of a JSON text that JavaScript cannot read as written. */
export interface LossyNumber {
  /** The literal as written (at most 40 characters of it). */
  readonly literal: string;
  /** Where it is: object keys and array indexes from the root. */
  readonly path: readonly (string | number)[];
  /** Why it cannot be carried, as a phrase. */
  readonly reason: string;
}

/** Why a JSON number literal does not survive JSON.parse, or undefined when it does. */
export const lossOf = (literal: string): string | undefined => {
  const n = Number(literal);
  if (!Number.isFinite(n)) return 'is beyond the largest number JSON can carry (about 1.8e308)';
  if (n === 0)
    return /[1-9]/.test(literal.replace(/[eE].*$/, '')) ? 'is too small to be told from 0' : undefined;
  if (/[.eE]/.test(literal) || Number.isSafeInteger(n)) return undefined;
  // An integer literal beyond 2^53: kept only when the double holds it exactly.
  return BigInt(literal) === BigInt(n)
    ? undefined
    : 'is an integer a JSON number cannot hold exactly (beyond 2^53; FHIR integer64 values are strings)';
};

interface Frame {
  readonly array: boolean;
  /** Array: the index of the current element. */
  index: number;
  /** Object: the current member's key, as its JSON text (decoded only for a report). */
  keyStart: number;
  keyEnd: number;
}

const isNumberStart = (c: number) => c === 0x2d || (c >= 0x30 && c <= 0x39);
const isNumberPart = (c: number) =>
  (c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;

/**
 * The first number literal of a valid JSON text that JSON.parse would not read as written
 * ({@link lossOf}), with its path; undefined when there is none. One pass over the text, without
 * recursion; parse the text first (this scan assumes valid JSON).
 */
export const findLossyNumber = (text: string): LossyNumber | undefined => {
  const frames: Frame[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const start = i;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
      if (expectKey) {
        const top = frames.at(-1)!;
        top.keyStart = start;
        top.keyEnd = i + 1;
        expectKey = false;
      }
    } else if (c === 0x7b) {
      frames.push({ array: false, index: 0, keyStart: 0, keyEnd: 0 });
      expectKey = true;
    } else if (c === 0x5b) frames.push({ array: true, index: 0, keyStart: 0, keyEnd: 0 });
    else if (c === 0x7d || c === 0x5d) frames.pop();
    else if (c === 0x2c) {
      const top = frames.at(-1);
      if (top?.array) top.index++;
      else expectKey = true;
    } else if (isNumberStart(c)) {
      let end = i + 1;
      while (end < text.length && isNumberPart(text.charCodeAt(end))) end++;
      const literal = text.slice(i, end);
      const reason = lossOf(literal);
      if (reason)
        return {
          literal: literal.length > 40 ? `${literal.slice(0, 40)}…` : literal,
          path: frames.map((f) =>
            f.array ? f.index : (JSON.parse(text.slice(f.keyStart, f.keyEnd)) as string),
          ),
          reason,
        };
      i = end - 1;
    }
  }
  return undefined;
};
