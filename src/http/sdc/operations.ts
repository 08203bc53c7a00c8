/**
 * Every form-backend operation (issue 4; docs/interface.md §4.4–4.5): the table the form-backend
 * router mounts and the CapabilityStatement lists (issue 13: discoverable operations).
 */
import { register as assemble } from './assemble.js';
import { register as expand } from './expand.js';
import { register as extract } from './extract.js';
import { register as narrative } from './narrative.js';
import { register as populate } from './populate.js';
import type { RegisterOperation } from './router.js';
import { register as validate } from './validate.js';

/** One FHIR operation: where it lives, its OperationDefinition canonical, and its routes. */
export interface FhirOperation {
  readonly resourceType: string;
  /** The name without `$`. */
  readonly name: string;
  /** The canonical URL of its OperationDefinition. */
  readonly definition: string;
  readonly documentation: string;
  /** Mounts its routes (type and instance level) on the form-backend router. */
  readonly register: RegisterOperation;
}

export const SDC_OPERATIONS: readonly FhirOperation[] = [
  {
    resourceType: 'Questionnaire',
    name: 'populate',
    definition: 'http://hl7.org/fhir/uv/sdc/OperationDefinition/Questionnaire-populate',
    documentation:
      'SDC $populate (form backend): a QuestionnaireResponse pre-filled from the launch context.',
    register: populate,
  },
  {
    resourceType: 'Questionnaire',
    name: 'assemble',
    definition: 'http://hl7.org/fhir/uv/sdc/OperationDefinition/Questionnaire-assemble',
    documentation:
      'SDC modular forms: the fully inline Questionnaire of one with subQuestionnaires (assembleContext, linkIdPrefix).',
    register: assemble,
  },
  {
    resourceType: 'QuestionnaireResponse',
    name: 'validate',
    definition: 'http://hl7.org/fhir/OperationDefinition/Resource-validate',
    documentation:
      'Validates a QuestionnaireResponse against its Questionnaire (SDC rules, RE2 regexes, FHIRPath within a budget).',
    register: validate,
  },
  {
    resourceType: 'QuestionnaireResponse',
    name: 'generate-narrative',
    definition: 'http://hl7.org/fhir/uv/sdc/OperationDefinition/QuestionnaireResponse-generate-narrative',
    documentation: 'The plain-text report of a QuestionnaireResponse, as sent to the hospital.',
    register: narrative,
  },
  {
    resourceType: 'QuestionnaireResponse',
    name: 'extract',
    definition: 'http://hl7.org/fhir/uv/sdc/OperationDefinition/QuestionnaireResponse-extract',
    documentation:
      'SDC $extract (observation-, definition- and template-based): a transaction Bundle of the resources the response describes.',
    register: extract,
  },
  {
    resourceType: 'ValueSet',
    name: 'expand',
    definition: 'http://hl7.org/fhir/OperationDefinition/ValueSet-expand',
    documentation: 'Expands a tenant ValueSet or a contained one (form backend).',
    register: expand,
  },
];
