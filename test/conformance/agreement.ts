/**
 * The one line each conformance runner prints for its suite (issue 35: "print agreement per
 * suite"), in the shape of the README's conformance table: suite, version, cases, agree.
 */

/** One suite's agreement, as printed and as the README's table holds it. */
export interface Agreement {
  readonly suite: string;
  readonly version: string;
  readonly cases: number;
  readonly agree: number;
  /** What the cases were checked for, and what did not agree (kept short). */
  readonly detail?: string;
}

/**
 * Prints `agreement` as `  conformance | <suite> | <version> | <cases> | <agree> (<percent>) | <detail>`.
 * @returns the line printed.
 */
export const printAgreement = (agreement: Agreement): string => {
  const percent = agreement.cases === 0 ? 0 : Math.round((100 * agreement.agree) / agreement.cases);
  const line = `  conformance | ${agreement.suite} | ${agreement.version} | ${agreement.cases} | ${agreement.agree} (${percent} %)${agreement.detail ? ` | ${agreement.detail}` : ''}`;
  console.log(line);
  return line;
};
