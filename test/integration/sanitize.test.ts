/** Outside text made safe for the event log (issue 15 "Outside text is sanitised"). */
import { expect } from 'chai';
import {
  deliveryError,
  MAX_OUTSIDE_TEXT,
  sanitizeOutsideText,
} from '../../src/integration/export/sanitize.js';

describe('outside text for the event log', () => {
  it('shows control characters as \\xNN and lone surrogates as U+FFFD', () => {
    expect(sanitizeOutsideText('A\u0000E\u0007\u007f\u0085 ok')).to.equal('A\\x00E\\x07\\x7f\\x85 ok');
    expect(sanitizeOutsideText('a\ud800b\udc00c \ud83d\ude00')).to.equal('a\ufffdb\ufffdc \ud83d\ude00');
  });

  it('hides filesystem paths and bounds the length', () => {
    expect(
      sanitizeOutsideText("EPERM: operation not permitted, open '/var/lib/casebook/drop/506-v1.txt.tmp'"),
    ).to.equal("EPERM: operation not permitted, open '<path>'");
    expect(sanitizeOutsideText('C:\\drop\\reports\\506.txt is locked')).to.equal('<path> is locked');
    const long = sanitizeOutsideText('x'.repeat(5000));
    expect(long).to.have.length(MAX_OUTSIDE_TEXT);
    expect(long.endsWith('…')).to.equal(true);
  });

  it('names network failures by what happened, not "fetch failed"', () => {
    const refused = Object.assign(new TypeError('fetch failed'), {
      cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), {
        code: 'ECONNREFUSED',
        address: '127.0.0.1',
        port: 9,
      }),
    });
    expect(deliveryError(refused)).to.equal('connection refused by 127.0.0.1:9');
    const eperm = Object.assign(new Error("EPERM: operation not permitted, open '/srv/drop/1-v1.txt.tmp'"), {
      code: 'EPERM',
    });
    expect(deliveryError(eperm)).to.equal('permission denied writing the report');
    expect(deliveryError(new Error('HL7 receiver answered A\u0000E'))).to.equal(
      'HL7 receiver answered A\\x00E',
    );
  });
});
