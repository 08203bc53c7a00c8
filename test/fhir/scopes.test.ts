import { expect } from 'chai';
import {
  downscope,
  formatScope,
  type Permission,
  parseScope,
  parseScopeList,
  type ResourceScope,
  ScopeSyntaxError,
  scopesFor,
} from '../../src/fhir/scopes.js';

const parse = (text: string): ResourceScope[] => parseScopeList(text).scopes;
const texts = (scopes: ResourceScope[]): string[] => scopes.map(formatScope);

interface Tenant {
  allowed: string;
  ehrManaged?: boolean;
  projects?: string[];
  hasPatientContext?: boolean;
}

/** given(tenant).whenRequesting(scopes).thenStores([v2 texts]) — spec §5.3 downscoping. */
const given = (tenant: Tenant) => ({
  whenRequesting: (requested: string) => ({
    thenStores: (expected: string[]) => {
      const result = downscope({
        requested: parse(requested),
        tenantAllowed: parse(tenant.allowed),
        ehrManaged: tenant.ehrManaged ?? false,
        projects: tenant.projects ?? [],
        hasPatientContext: tenant.hasPatientContext ?? true,
      });
      expect(texts(result)).to.deep.equal(expected);
    },
  }),
});

const expectSyntaxError = (text: string, reason: RegExp): void => {
  let caught: unknown;
  try {
    parseScope(text);
  } catch (error) {
    caught = error;
  }
  expect(caught, `parseScope('${text}') should throw`).to.be.instanceOf(ScopeSyntaxError);
  const error = caught as ScopeSyntaxError;
  expect(error.scope).to.equal(text);
  expect(error.reason).to.match(reason);
  expect(error.message).to.equal(`invalid scope '${text}': ${error.reason}`);
  expect(error.name).to.equal('ScopeSyntaxError');
};

describe('fhir/scopes', () => {
  describe('parseScope', () => {
    it('parses a v2 scope into context, type and canonical permissions', () => {
      expect(parseScope('patient/Observation.rs')).to.deep.equal({
        context: 'patient',
        resourceType: 'Observation',
        permissions: ['r', 's'],
        filters: [],
      });
    });

    it('converts v1 read to rs, write to cud (without read) and * to cruds', () => {
      expect(formatScope(parseScope('user/Patient.read')!)).to.equal('user/Patient.rs');
      expect(formatScope(parseScope('user/Patient.write')!)).to.equal('user/Patient.cud');
      expect(formatScope(parseScope('system/*.*')!)).to.equal('system/*.cruds');
    });

    it('accepts v2 letters in any order and normalises them to c r u d s', () => {
      expect(parseScope('user/Encounter.sdurc')!.permissions).to.deep.equal(['c', 'r', 'u', 'd', 's']);
      expect(formatScope(parseScope('user/Encounter.sr')!)).to.equal('user/Encounter.rs');
      expect(formatScope(parseScope('patient/*.uc')!)).to.equal('patient/*.cu');
    });

    it('returns null for every well-known non-resource SMART scope', () => {
      for (const text of [
        'openid',
        'fhirUser',
        'profile',
        'launch',
        'launch/patient',
        'launch/encounter',
        'offline_access',
        'online_access',
      ]) {
        expect(parseScope(text), text).to.equal(null);
      }
    });

    it('parses Questionnaire filters in the given order, URL-decoded', () => {
      expect(
        parseScope('user/Questionnaire.rs?url=https%3A%2F%2Fexample.org%2FQ%2Fct&project=radiology'),
      ).to.deep.equal({
        context: 'user',
        resourceType: 'Questionnaire',
        permissions: ['r', 's'],
        filters: [
          ['url', 'https://example.org/Q/ct'],
          ['project', 'radiology'],
        ],
      });
    });

    it('keeps repeated project filters', () => {
      expect(parseScope('user/Questionnaire.r?project=a&project=b')!.filters).to.deep.equal([
        ['project', 'a'],
        ['project', 'b'],
      ]);
    });

    it('accepts an unencoded url value that contains no separators', () => {
      expect(parseScope('user/Questionnaire.r?url=https://example.org/Q/ct')!.filters).to.deep.equal([
        ['url', 'https://example.org/Q/ct'],
      ]);
    });

    it('refuses an action that is neither v1 nor a set of v2 letters', () => {
      expectSyntaxError('patient/Patient.foo', /invalid action 'foo'/);
      expectSyntaxError('patient/Patient.READ', /invalid action 'READ'/);
      expectSyntaxError('patient/Patient.rx', /invalid action 'rx'/);
    });

    it('refuses a repeated permission letter', () => {
      expectSyntaxError('patient/Patient.rr', /permission 'r' appears more than once/);
    });

    it('refuses an unknown context', () => {
      expectSyntaxError('banana/Patient.read', /unknown context 'banana'/);
      expectSyntaxError('*/Patient.read', /unknown context '\*'/);
    });

    it('refuses a resource type that is not capitalised', () => {
      expectSyntaxError('patient/patient.read', /invalid resource type 'patient'/);
      expectSyntaxError('patient/P.read', /invalid resource type 'P'/);
      expectSyntaxError('patient/Pat1ent.read', /invalid resource type 'Pat1ent'/);
    });

    it('refuses a scope without an action', () => {
      expectSyntaxError('patient/Patient', /missing '\.<action>'/);
      expectSyntaxError('patient/Patient.', /missing action/);
    });

    it('refuses anything that is neither a resource scope nor a known SMART scope', () => {
      expectSyntaxError('banana', /neither a resource scope/);
      expectSyntaxError('OpenID', /neither a resource scope/);
      expectSyntaxError('launch/practitioner', /unknown context 'launch'/);
    });

    it('refuses filters on non-Questionnaire scopes, including *', () => {
      expectSyntaxError(
        'user/Patient.rs?project=radiology',
        /filters are only supported on Questionnaire scopes/,
      );
      expectSyntaxError('user/*.rs?project=radiology', /filters are only supported on Questionnaire scopes/);
    });

    it('refuses unknown Questionnaire filters', () => {
      expectSyntaxError('user/Questionnaire.rs?status=active', /unknown Questionnaire filter 'status'/);
    });

    it('refuses a url filter carrying |version, encoded or not', () => {
      expectSyntaxError('user/Questionnaire.rs?url=https://example.org/Q|1.0', /without '\|version'/);
      expectSyntaxError(
        'user/Questionnaire.rs?url=https%3A%2F%2Fexample.org%2FQ%7C1.0',
        /without '\|version'/,
      );
    });

    it('refuses malformed filter lists', () => {
      expectSyntaxError('user/Questionnaire.rs?', /empty filter list/);
      expectSyntaxError('user/Questionnaire.rs?project', /not of the form name=value/);
      expectSyntaxError('user/Questionnaire.rs?project=a&&url=b', /not of the form name=value/);
      expectSyntaxError('user/Questionnaire.rs?=a', /not of the form name=value/);
      expectSyntaxError('user/Questionnaire.rs?project=', /empty value/);
      expectSyntaxError('user/Questionnaire.rs?project=%E0%A4%A', /malformed percent-encoding/);
    });
  });

  describe('parseScopeList', () => {
    it('splits a string on any whitespace and drops empty tokens', () => {
      const { scopes, ignored } = parseScopeList(
        '  openid\tuser/Patient.read \n\n patient/Observation.rs  launch ',
      );
      expect(texts(scopes)).to.deep.equal(['user/Patient.rs', 'patient/Observation.rs']);
      expect(ignored).to.deep.equal(['openid', 'launch']);
    });

    it('accepts an array whose elements may hold several scopes', () => {
      const { scopes, ignored } = parseScopeList(['user/Patient.read fhirUser', 'user/Encounter.r', '']);
      expect(texts(scopes)).to.deep.equal(['user/Patient.rs', 'user/Encounter.r']);
      expect(ignored).to.deep.equal(['fhirUser']);
    });

    it('gives the same scopes for a string and the equivalent array', () => {
      expect(parseScopeList('user/Patient.rs user/*.write')).to.deep.equal(
        parseScopeList(['user/Patient.rs', 'user/*.write']),
      );
    });

    it('returns nothing for undefined, an empty string and an empty array', () => {
      expect(parseScopeList(undefined)).to.deep.equal({ scopes: [], ignored: [] });
      expect(parseScopeList('   ')).to.deep.equal({ scopes: [], ignored: [] });
      expect(parseScopeList([])).to.deep.equal({ scopes: [], ignored: [] });
    });

    it('throws ScopeSyntaxError naming the first invalid token', () => {
      expect(() => parseScopeList('user/Patient.rs banana/Patient.read patient/patient.read'))
        .to.throw(ScopeSyntaxError)
        .with.property('scope', 'banana/Patient.read');
    });
  });

  describe('formatScope', () => {
    it('writes v2 text without a query when there are no filters', () => {
      expect(
        formatScope({ context: 'user', resourceType: 'Patient', permissions: ['r', 's'], filters: [] }),
      ).to.equal('user/Patient.rs');
    });

    it('URL-encodes filter values with encodeURIComponent', () => {
      expect(
        formatScope({
          context: 'user',
          resourceType: 'Questionnaire',
          permissions: ['r', 's'],
          filters: [
            ['project', 'radiology'],
            ['url', 'https://example.org/Q/ct?a=b&c'],
          ],
        }),
      ).to.equal(
        'user/Questionnaire.rs?project=radiology&url=https%3A%2F%2Fexample.org%2FQ%2Fct%3Fa%3Db%26c',
      );
    });

    it('round-trips through parseScope', () => {
      const text = 'patient/Questionnaire.crs?project=r%26d&specialty=a%20b%2Bc&version=1.0';
      expect(formatScope(parseScope(text)!)).to.equal(text);
    });
  });

  describe('downscope', () => {
    describe('intersection with the tenant allowed scopes', () => {
      it('narrows user/*.cruds to an allowed user/Patient.rs', () => {
        given({ allowed: 'user/Patient.rs' }).whenRequesting('user/*.cruds').thenStores(['user/Patient.rs']);
      });

      it('narrows a requested type to the permissions of an allowed *', () => {
        given({ allowed: 'user/*.rs' }).whenRequesting('user/Patient.cruds').thenStores(['user/Patient.rs']);
      });

      it('grants nothing when the contexts differ', () => {
        given({ allowed: 'patient/Patient.rs' }).whenRequesting('user/Patient.rs').thenStores([]);
      });

      it('grants nothing when the types differ', () => {
        given({ allowed: 'user/Encounter.rs' }).whenRequesting('user/Patient.rs').thenStores([]);
      });

      it('drops a scope whose permissions do not overlap', () => {
        given({ allowed: 'user/Patient.rs' }).whenRequesting('user/Patient.cud').thenStores([]);
      });

      it('unites the matches of one requested scope over all allowed scopes', () => {
        given({ allowed: 'user/Patient.r user/Encounter.rs user/Observation.cu patient/Condition.r' })
          .whenRequesting('user/*.read')
          .thenStores(['user/Encounter.rs', 'user/Patient.r']);
      });

      it('keeps v1 write without read', () => {
        given({ allowed: 'user/*.*' })
          .whenRequesting('user/Observation.write')
          .thenStores(['user/Observation.cud']);
      });
    });

    describe('system/ context', () => {
      it('is downgraded to user/ in a regular tenant, requested and allowed alike', () => {
        given({ allowed: 'system/Observation.rs' })
          .whenRequesting('system/Observation.read')
          .thenStores(['user/Observation.rs']);
      });

      it('matches an allowed user/ scope once downgraded', () => {
        given({ allowed: 'user/Observation.cruds' })
          .whenRequesting('system/Observation.read')
          .thenStores(['user/Observation.rs']);
      });

      it('is kept in an EHR-managed tenant', () => {
        given({ allowed: 'system/Observation.cruds', ehrManaged: true })
          .whenRequesting('system/Observation.read')
          .thenStores(['system/Observation.rs']);
      });

      it('does not match an allowed user/ scope in an EHR-managed tenant', () => {
        given({ allowed: 'user/Observation.cruds', ehrManaged: true })
          .whenRequesting('system/Observation.read')
          .thenStores([]);
      });
    });

    describe('patient/ context', () => {
      it('is dropped when the session has no patient', () => {
        given({ allowed: 'patient/*.cruds user/*.cruds', hasPatientContext: false })
          .whenRequesting('patient/Observation.rs user/Observation.r')
          .thenStores(['user/Observation.r']);
      });

      it('is kept when the session has a patient', () => {
        given({ allowed: 'patient/*.cruds', hasPatientContext: true })
          .whenRequesting('patient/Observation.rs')
          .thenStores(['patient/Observation.rs']);
      });
    });

    describe('EHR-managed tenants (rule 2)', () => {
      const ehr = {
        allowed: 'user/*.cruds patient/*.cruds system/*.cruds',
        ehrManaged: true,
        projects: ['radiology'],
      };

      it('caps Patient to read by id', () => {
        given(ehr).whenRequesting('user/Patient.cruds').thenStores(['user/Patient.r']);
      });

      it('caps Encounter, Practitioner and DocumentReference to read by id', () => {
        given(ehr)
          .whenRequesting('user/Encounter.rs user/Practitioner.write user/DocumentReference.read')
          .thenStores(['user/DocumentReference.r', 'user/Encounter.r']);
      });

      it('lets other resource scopes pass through', () => {
        given(ehr).whenRequesting('user/Observation.cruds').thenStores(['user/Observation.cruds']);
      });

      it('expands * to QuestionnaireResponse, Questionnaire and the read-only context resources', () => {
        given(ehr)
          .whenRequesting('user/*.cruds')
          .thenStores([
            'user/DocumentReference.r',
            'user/Encounter.r',
            'user/Patient.r',
            'user/Practitioner.r',
            'user/Questionnaire.rs?project=radiology',
            'user/QuestionnaireResponse.cruds',
          ]);
      });

      it('expands * within its own permissions', () => {
        given(ehr).whenRequesting('user/*.write').thenStores(['user/QuestionnaireResponse.cud']);
        given(ehr)
          .whenRequesting('user/*.s')
          .thenStores(['user/Questionnaire.s?project=radiology', 'user/QuestionnaireResponse.s']);
      });

      it('expands * within its own context', () => {
        given({ ...ehr, hasPatientContext: true })
          .whenRequesting('patient/*.r')
          .thenStores([
            'patient/DocumentReference.r',
            'patient/Encounter.r',
            'patient/Patient.r',
            'patient/Practitioner.r',
            'patient/Questionnaire.r?project=radiology',
            'patient/QuestionnaireResponse.r',
          ]);
      });

      it('applies the caps to system/ scopes too', () => {
        given(ehr).whenRequesting('system/Patient.cruds').thenStores(['system/Patient.r']);
      });

      it('does not cap context resources in a regular tenant', () => {
        given({ allowed: 'user/*.cruds' })
          .whenRequesting('user/Patient.cruds')
          .thenStores(['user/Patient.cruds']);
      });
    });

    describe('Questionnaire and projects (rule 3)', () => {
      const tenant = { allowed: 'user/*.cruds', projects: ['radiology', 'cardiology'] };

      it('adds one Questionnaire scope per project beside a regular tenant * scope', () => {
        given(tenant)
          .whenRequesting('user/*.cruds')
          .thenStores([
            'user/*.cruds',
            'user/Questionnaire.rs?project=cardiology',
            'user/Questionnaire.rs?project=radiology',
          ]);
      });

      it('adds no Questionnaire scope for a * scope without r or s', () => {
        given(tenant).whenRequesting('user/*.write').thenStores(['user/*.cud']);
      });

      it('adds Questionnaire scopes only for r and s of a * scope', () => {
        given(tenant)
          .whenRequesting('user/*.cr')
          .thenStores([
            'user/*.cr',
            'user/Questionnaire.r?project=cardiology',
            'user/Questionnaire.r?project=radiology',
          ]);
      });

      it('splits an unfiltered Questionnaire scope into one scope per project', () => {
        given(tenant)
          .whenRequesting('user/Questionnaire.read')
          .thenStores([
            'user/Questionnaire.rs?project=cardiology',
            'user/Questionnaire.rs?project=radiology',
          ]);
      });

      it('keeps a project filter naming one of the account projects', () => {
        given(tenant)
          .whenRequesting('user/Questionnaire.rs?project=radiology')
          .thenStores(['user/Questionnaire.rs?project=radiology']);
      });

      it('ignores a foreign project beside an own one', () => {
        given(tenant)
          .whenRequesting('user/Questionnaire.rs?project=oncology&project=radiology')
          .thenStores(['user/Questionnaire.rs?project=radiology']);
      });

      it('drops a scope whose project filters are all foreign rather than widening it', () => {
        given(tenant)
          .whenRequesting('user/Questionnaire.rs?project=oncology&project=dermatology')
          .thenStores([]);
      });

      it('grants no template access without projects', () => {
        given({ allowed: 'user/*.cruds', projects: [] })
          .whenRequesting('user/*.cruds user/Questionnaire.rs user/Questionnaire.rs?project=radiology')
          .thenStores(['user/*.cruds']);
      });

      it('grants no template access without projects in an EHR-managed tenant', () => {
        given({ allowed: 'user/*.cruds', ehrManaged: true, projects: [] })
          .whenRequesting('user/*.cruds')
          .thenStores([
            'user/DocumentReference.r',
            'user/Encounter.r',
            'user/Patient.r',
            'user/Practitioner.r',
            'user/QuestionnaireResponse.cruds',
          ]);
      });

      it('keeps url, identifier, version and specialty filters after the project filter', () => {
        given(tenant)
          .whenRequesting(
            'user/Questionnaire.rs?url=https%3A%2F%2Fex.org%2FQ&version=2.1&specialty=ct&identifier=x',
          )
          .thenStores([
            'user/Questionnaire.rs?project=cardiology&url=https%3A%2F%2Fex.org%2FQ&version=2.1&specialty=ct&identifier=x',
            'user/Questionnaire.rs?project=radiology&url=https%3A%2F%2Fex.org%2FQ&version=2.1&specialty=ct&identifier=x',
          ]);
      });

      it('moves the kept project filter first', () => {
        given(tenant)
          .whenRequesting('user/Questionnaire.r?specialty=ct&project=radiology')
          .thenStores(['user/Questionnaire.r?project=radiology&specialty=ct']);
      });

      it('appends the allowed scope filters to the requested ones', () => {
        given({ allowed: 'user/Questionnaire.rs?specialty=ct', projects: ['radiology'] })
          .whenRequesting('user/Questionnaire.cruds?version=2')
          .thenStores(['user/Questionnaire.rs?project=radiology&version=2&specialty=ct']);
      });

      it('takes the type and filters of an allowed Questionnaire scope for a requested *', () => {
        given({ allowed: 'user/Questionnaire.rs?project=radiology', projects: ['radiology', 'cardiology'] })
          .whenRequesting('user/*.cruds')
          .thenStores(['user/Questionnaire.rs?project=radiology']);
      });

      it('keeps only the projects both the request and the tenant name', () => {
        const allowed = {
          allowed: 'user/Questionnaire.rs?project=radiology',
          projects: ['radiology', 'cardiology'],
        };
        given(allowed).whenRequesting('user/Questionnaire.rs?project=cardiology').thenStores([]);
        given(allowed)
          .whenRequesting('user/Questionnaire.rs?project=cardiology&project=radiology')
          .thenStores(['user/Questionnaire.rs?project=radiology']);
      });

      it('keeps explicit Questionnaire permissions beyond rs (rule 3 limits projects, not actions)', () => {
        given(tenant)
          .whenRequesting('user/Questionnaire.cud?project=radiology')
          .thenStores(['user/Questionnaire.cud?project=radiology']);
      });
    });

    describe('merging and sorting', () => {
      it('unites the permissions of scopes equal in context, type and filters', () => {
        given({ allowed: 'user/*.cruds', projects: ['radiology'] })
          .whenRequesting(
            'user/Patient.r user/Patient.write user/Questionnaire.s user/Questionnaire.r?project=radiology',
          )
          .thenStores(['user/Patient.crud', 'user/Questionnaire.rs?project=radiology']);
      });

      it('merges an explicit Questionnaire scope with the one a * scope adds', () => {
        given({ allowed: 'user/*.cruds', projects: ['radiology'] })
          .whenRequesting('user/*.r user/Questionnaire.s?project=radiology')
          .thenStores(['user/*.r', 'user/Questionnaire.rs?project=radiology']);
      });

      it('does not merge scopes that differ in filters or context', () => {
        given({ allowed: 'user/*.cruds patient/*.cruds', projects: ['radiology'] })
          .whenRequesting('patient/Observation.r user/Observation.s user/Questionnaire.r?version=1')
          .thenStores([
            'patient/Observation.r',
            'user/Observation.s',
            'user/Questionnaire.r?project=radiology&version=1',
          ]);
      });

      it('sorts by v2 text whatever the request order', () => {
        const request = 'user/Task.r user/Observation.r user/*.s user/Condition.r';
        const reversed = request.split(' ').reverse().join(' ');
        const expected = ['user/*.s', 'user/Condition.r', 'user/Observation.r', 'user/Task.r'];
        given({ allowed: 'user/*.cruds' }).whenRequesting(request).thenStores(expected);
        given({ allowed: 'user/*.cruds' }).whenRequesting(reversed).thenStores(expected);
      });

      it('stores nothing for an empty request', () => {
        given({ allowed: 'user/*.cruds', projects: ['radiology'] })
          .whenRequesting('')
          .thenStores([]);
      });
    });
  });

  describe('scopesFor', () => {
    const stored = parse(
      'user/*.rs user/Patient.r user/Observation.cud user/Questionnaire.rs?project=radiology patient/Observation.r',
    );
    const grants = (resourceType: string, permission: Permission): string[] =>
      texts(scopesFor(stored, { resourceType, permission }));

    it('returns the explicit and * scopes that carry the permission on that type', () => {
      expect(grants('Observation', 'r')).to.deep.equal(['user/*.rs', 'patient/Observation.r']);
      expect(grants('Observation', 'c')).to.deep.equal(['user/Observation.cud']);
      expect(grants('Patient', 's')).to.deep.equal(['user/*.rs']);
    });

    it('never lets a * scope grant Questionnaire', () => {
      expect(grants('Questionnaire', 'r')).to.deep.equal(['user/Questionnaire.rs?project=radiology']);
      expect(
        texts(scopesFor(parse('system/*.cruds'), { resourceType: 'Questionnaire', permission: 's' })),
      ).to.deep.equal([]);
    });

    it('returns nothing when no scope carries the permission', () => {
      expect(grants('Patient', 'd')).to.deep.equal([]);
      expect(grants('Task', 'c')).to.deep.equal([]);
    });
  });
});
