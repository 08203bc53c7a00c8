/**
 * The FHIR R5 shapes the SDC operations work on (issue 4; docs/interface.md §2.6, §4.4). Loose on purpose:
 * SDC Questionnaires carry many extensions; the operations read what they need.
 */
export type Json = Record<string, unknown>;

export interface Coding {
  system?: string;
  version?: string;
  code?: string;
  display?: string;
}

export interface Extension {
  url: string;
  [valueX: string]: unknown;
}

export interface QuestionnaireItem {
  linkId: string;
  type: string;
  text?: string;
  required?: boolean;
  repeats?: boolean;
  readOnly?: boolean;
  maxLength?: number;
  answerConstraint?: 'optionsOnly' | 'optionsOrType' | 'optionsOrString';
  answerOption?: ({ initialSelected?: boolean } & Record<string, unknown>)[];
  answerValueSet?: string;
  initial?: Record<string, unknown>[];
  enableWhen?: Record<string, unknown>[];
  enableBehavior?: 'all' | 'any';
  extension?: Extension[];
  item?: QuestionnaireItem[];
  [element: string]: unknown;
}

export interface Questionnaire {
  resourceType: 'Questionnaire';
  id?: string;
  url?: string;
  version?: string;
  status?: string;
  extension?: Extension[];
  contained?: Json[];
  item?: QuestionnaireItem[];
  [element: string]: unknown;
}

export interface QuestionnaireResponseAnswer {
  item?: QuestionnaireResponseItem[];
  [valueX: string]: unknown;
}

export interface QuestionnaireResponseItem {
  linkId: string;
  text?: string;
  answer?: QuestionnaireResponseAnswer[];
  item?: QuestionnaireResponseItem[];
}

export interface QuestionnaireResponse {
  resourceType: 'QuestionnaireResponse';
  id?: string;
  questionnaire?: string;
  status: string;
  subject?: { reference?: string; display?: string };
  encounter?: { reference?: string };
  author?: { reference?: string };
  authored?: string;
  item?: QuestionnaireResponseItem[];
  [element: string]: unknown;
}

export interface OperationOutcomeIssue {
  severity: 'fatal' | 'error' | 'warning' | 'information';
  code: string;
  diagnostics: string;
  expression?: string[];
}

export interface OperationOutcome {
  resourceType: 'OperationOutcome';
  issue: OperationOutcomeIssue[];
}

/**
 * Resolves a canonical URL (`url` or `url|version`) to a ValueSet or Questionnaire of the tenant,
 * or undefined. The operations are pure apart from this lookup.
 */
export type CanonicalResolver = (
  resourceType: 'ValueSet' | 'Questionnaire',
  canonical: string,
) => Promise<Json | undefined>;

/**
 * Resolves the canonical of an item's `definition` (SDC modular forms, $assemble): a Questionnaire
 * of the tenant, or a StructureDefinition where one is available (casebook stores none).
 */
export type DefinitionResolver = (
  resourceType: 'Questionnaire' | 'StructureDefinition',
  canonical: string,
) => Promise<Json | undefined>;
