/**
 * The pure ValueSet expansion behind ValueSet/$expand (issue 4): compose includes less excludes,
 * an existing expansion, filter, count, offset, the deterministic identifier and the refusal of
 * ValueSets that take a whole code system.
 */
import { expect } from 'chai';
import { DomainError } from '../../src/domain/decider.js';
import { expandValueSet } from '../../src/sdc/expand.js';

const SNOMED = 'http://snomed.info/sct';
const LOCAL = 'https://radiology.example.org/CodeSystem/lobes';
const NOW = '2026-03-01T10:00:00.000Z';

const lobes = {
  resourceType: 'ValueSet',
  id: '12',
  url: 'https://radiology.example.org/ValueSet/lung-lobes',
  status: 'active',
  compose: {
    include: [
      {
        system: SNOMED,
        concept: [
          { code: '45653009', display: 'Right upper lobe' },
          { code: '72481006', display: 'Right middle lobe' },
          { code: '266005', display: 'Right lower lobe' },
          { code: '44714003', display: 'Left upper lobe' },
          { code: '31094006', display: 'Left lower lobe' },
        ],
      },
      {
        system: LOCAL,
        version: '1',
        concept: [{ code: 'lingula' }, { code: 'RUL', display: 'duplicate code, other system' }],
      },
    ],
    exclude: [{ system: SNOMED, concept: [{ code: '72481006' }] }],
  },
};

const codes = (expanded: { expansion: { contains?: readonly { code: string }[] } }) =>
  (expanded.expansion.contains ?? []).map((c) => c.code);

describe('expandValueSet', () => {
  it('lists the included concepts with their system, less the excluded ones', () => {
    const expanded = expandValueSet(lobes, { now: NOW });
    expect(expanded.expansion.contains).to.deep.equal([
      { system: SNOMED, code: '45653009', display: 'Right upper lobe' },
      { system: SNOMED, code: '266005', display: 'Right lower lobe' },
      { system: SNOMED, code: '44714003', display: 'Left upper lobe' },
      { system: SNOMED, code: '31094006', display: 'Left lower lobe' },
      { system: LOCAL, version: '1', code: 'lingula' },
      { system: LOCAL, version: '1', code: 'RUL', display: 'duplicate code, other system' },
    ]);
    expect(expanded.expansion).to.include({ timestamp: NOW, total: 6, offset: 0 });
    expect(expanded.expansion).not.to.have.property('parameter');
    expect(expanded).to.include({ resourceType: 'ValueSet', id: '12', url: lobes.url });
    expect(expanded.compose).to.deep.equal(lobes.compose);
  });

  it('filters case-insensitively on display or code, then pages with offset and count', () => {
    const byDisplay = expandValueSet(lobes, { filter: 'LEFT', now: NOW });
    expect(codes(byDisplay)).to.deep.equal(['44714003', '31094006']);
    expect(byDisplay.expansion.total).to.equal(2);
    expect(byDisplay.expansion.parameter).to.deep.equal([{ name: 'filter', valueString: 'LEFT' }]);

    expect(codes(expandValueSet(lobes, { filter: 'ling', now: NOW }))).to.deep.equal(['lingula']);
    expect(codes(expandValueSet(lobes, { filter: 'rul', now: NOW }))).to.deep.equal(['RUL']);

    const paged = expandValueSet(lobes, { filter: 'lobe', count: 2, offset: 1, now: NOW });
    expect(codes(paged)).to.deep.equal(['266005', '44714003']);
    expect(paged.expansion).to.include({ total: 4, offset: 1 });
    expect(paged.expansion.parameter).to.deep.equal([
      { name: 'filter', valueString: 'lobe' },
      { name: 'count', valueInteger: 2 },
      { name: 'offset', valueInteger: 1 },
    ]);
  });

  it('answers the total alone for count=0 and nothing past the end', () => {
    const counted = expandValueSet(lobes, { count: 0, now: NOW });
    expect(counted.expansion.total).to.equal(6);
    expect(counted.expansion).not.to.have.property('contains');
    expect(expandValueSet(lobes, { filter: 'no such lobe', now: NOW }).expansion).to.include({ total: 0 });
    expect(expandValueSet(lobes, { offset: 50, now: NOW }).expansion).not.to.have.property('contains');
  });

  it('derives the identifier from the ValueSet and the options, never from the clock', () => {
    const a = expandValueSet(lobes, { filter: 'left', count: 5, now: NOW });
    const b = expandValueSet(structuredClone(lobes), {
      filter: 'left',
      count: 5,
      now: '2030-01-01T00:00:00Z',
    });
    expect(a.expansion.identifier).to.match(
      /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    expect(b.expansion.identifier).to.equal(a.expansion.identifier);
    expect(b.expansion.timestamp).to.equal('2030-01-01T00:00:00Z');
    expect(expandValueSet(lobes, { filter: 'right', count: 5, now: NOW }).expansion.identifier).not.to.equal(
      a.expansion.identifier,
    );
  });

  it('lists each system and code once', () => {
    const twice = {
      resourceType: 'ValueSet',
      status: 'active',
      compose: {
        include: [
          { system: SNOMED, concept: [{ code: '1', display: 'One' }] },
          {
            system: SNOMED,
            concept: [
              { code: '1', display: 'Again' },
              { code: '2', display: 'Two' },
            ],
          },
        ],
      },
    };
    expect(expandValueSet(twice, { now: NOW }).expansion.contains).to.deep.equal([
      { system: SNOMED, code: '1', display: 'One' },
      { system: SNOMED, code: '2', display: 'Two' },
    ]);
  });

  it('drops a whole system named by an exclude without concepts', () => {
    const vs = structuredClone(lobes);
    vs.compose.exclude = [{ system: LOCAL } as (typeof vs.compose.exclude)[number]];
    expect(codes(expandValueSet(vs, { now: NOW }))).to.deep.equal([
      '45653009',
      '72481006',
      '266005',
      '44714003',
      '31094006',
    ]);
  });

  it('expands an existing expansion, flattening its hierarchy', () => {
    const expanded = {
      resourceType: 'ValueSet',
      status: 'active',
      expansion: {
        timestamp: '2020-01-01',
        contains: [
          {
            abstract: true,
            display: 'Upper lobes',
            contains: [
              { system: SNOMED, code: '45653009', display: 'Right upper lobe' },
              { system: SNOMED, code: '44714003', display: 'Left upper lobe' },
            ],
          },
          { system: SNOMED, code: '31094006', display: 'Left lower lobe' },
        ],
      },
    };
    const result = expandValueSet(expanded, { filter: 'left', now: NOW });
    expect(result.expansion.contains).to.deep.equal([
      { system: SNOMED, code: '44714003', display: 'Left upper lobe' },
      { system: SNOMED, code: '31094006', display: 'Left lower lobe' },
    ]);
    expect(result.expansion).to.include({ total: 2, timestamp: NOW });
  });

  it('refuses a ValueSet that takes a whole code system with 422 not-supported', () => {
    const whole = {
      resourceType: 'ValueSet',
      url: 'https://radiology.example.org/ValueSet/all-snomed',
      status: 'active',
      compose: { include: [{ system: SNOMED }] },
    };
    let error: unknown;
    try {
      expandValueSet(whole, { now: NOW });
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(DomainError);
    const domain = error as DomainError;
    expect(domain.kind).to.equal('unprocessable');
    expect(domain.fhir.issueCode).to.equal('not-supported');
    expect(domain.expression).to.equal('ValueSet.compose.include[0]');
    expect(domain.message).to.equal(
      `ValueSet https://radiology.example.org/ValueSet/all-snomed: compose.include takes the whole code system ${SNOMED}; casebook holds no code systems, so it expands only listed concepts (compose.include.concept)`,
    );
  });

  it('refuses includes of other ValueSets and filters', () => {
    for (const include of [
      { valueSet: ['https://example.org/ValueSet/x'] },
      { system: SNOMED, filter: [{ property: 'concept', op: 'is-a', value: '1' }] },
    ])
      expect(() =>
        expandValueSet(
          { resourceType: 'ValueSet', status: 'active', compose: { include: [include] } },
          { now: NOW },
        ),
      )
        .to.throw(DomainError)
        .with.property('kind', 'unprocessable');
  });

  it('expands a ValueSet that defines nothing to nothing', () => {
    const result = expandValueSet({ resourceType: 'ValueSet', status: 'draft' }, { now: NOW });
    expect(result.expansion).to.include({ total: 0, offset: 0 });
    expect(result.expansion).not.to.have.property('contains');
  });
});
