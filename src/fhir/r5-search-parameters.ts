/**
 * The official FHIR R5 SearchParameter definitions of the types casebook searches by them (issue
 * 35; docs/interface.md §4.3 rule 10): `r5/search-parameters.json`, generated from the npm package
 * `hl7.fhir.r5.core` by `scripts/generate-r5-definitions.ts` (each shared definition cut down to
 * the branch of its expression for the type).
 */
import type { ResourceType } from '../domain/fhir/resource.js';
import { searchParametersJson } from './r5/search-parameters.generated.js';

/** One search parameter of an R5 definition, as casebook indexes it. */
export interface DefinedParameter {
  readonly code: string;
  readonly type: 'token' | 'date' | 'reference';
  /** The definition's FHIRPath for this resource type (`resolve() is X` read as a reference to X). */
  readonly expression: string;
  readonly target?: readonly string[];
}

interface GeneratedParameters {
  readonly package: string;
  readonly parameters: Record<string, DefinedParameter[]>;
}

const generated = JSON.parse(searchParametersJson) as GeneratedParameters;

/** The package the definitions come from (`hl7.fhir.r5.core@5.0.0`), for the CapabilityStatement. */
export const DEFINITIONS_PACKAGE = generated.package;

/**
 * The R5 search parameters of `type`, by code (the first definition of a code when two share it),
 * `resolve() is Patient` read as "a reference to a Patient" (the server resolves no reference
 * while indexing).
 */
export const definedParameters = (type: ResourceType): DefinedParameter[] => {
  const seen = new Set<string>();
  return (generated.parameters[type] ?? []).flatMap((p) => {
    if (seen.has(p.code)) return [];
    seen.add(p.code);
    return [
      {
        ...p,
        expression: p.expression.replace(
          /\.where\(resolve\(\) is ([A-Za-z]+)\)/g,
          ".where(reference.startsWith('$1/'))",
        ),
      },
    ];
  });
};
