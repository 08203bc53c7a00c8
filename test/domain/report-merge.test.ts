import { expect } from 'chai';
import { type MergeItem, mergeAnswers } from '../../src/domain/report/merge.js';

const q = (linkId: string, value?: string): MergeItem =>
  value === undefined ? { linkId } : { linkId, answer: [{ valueString: value }] };
const group = (linkId: string, ...item: MergeItem[]): MergeItem => ({ linkId, item });

describe('three-way merge of report answers (issue 32)', () => {
  it('applies what only the user changed, keeps what only they changed, and lists collisions (theirs kept)', () => {
    const base = [q('indication', 'Cough'), q('impression', 'Pending')];
    const mine = [q('indication', 'Fever'), q('impression', 'Pending'), q('referrer', 'Dr Mine')];
    const theirs = [q('indication', 'Dyspnoea'), q('impression', 'No nodule')];
    const { items, changes } = mergeAnswers(base, mine, theirs);
    expect(items).to.deep.equal([
      q('indication', 'Dyspnoea'),
      q('impression', 'No nodule'),
      q('referrer', 'Dr Mine'),
    ]);
    expect(changes.map((c) => [c.path, c.outcome])).to.deep.equal([
      ['indication#1', 'collision'],
      ['impression#1', 'theirs'],
      ['referrer#1', 'applied'],
    ]);
  });

  it('takes a removal by the user when the other side left the item alone', () => {
    const { items, changes } = mergeAnswers(
      [q('a', 'x'), q('b', 'y')],
      [q('b', 'y')],
      [q('a', 'x'), q('b', 'z')],
    );
    expect(items).to.deep.equal([q('b', 'z')]);
    expect(changes.map((c) => c.outcome)).to.deep.equal(['applied', 'theirs']);
  });

  it('matches repeat instances by occurrence inside groups; the same change on both sides is no conflict', () => {
    const base = [group('nodule', q('size', '5')), group('nodule', q('size', '8'))];
    const mine = [group('nodule', q('size', '6')), group('nodule', q('size', '8'))];
    const theirs = [group('nodule', q('size', '6')), group('nodule', q('size', '9'))];
    const { items, changes } = mergeAnswers(base, mine, theirs);
    expect(items).to.deep.equal([group('nodule', q('size', '6')), group('nodule', q('size', '9'))]);
    expect(changes.map((c) => [c.path, c.outcome])).to.deep.equal([['nodule#2/size#1', 'theirs']]);
  });
});
