/**
 * The resources read model's reads for the command and integration layers (docs/architecture.md
 * "Layers": `commands/`, `integration/` and `http/` read read models through `queries/`, never
 * `projections/` directly). These reads show every row of a tenant: a command deciding on the
 * current state needs all of it; what a caller may see is decided in src/queries/visibility.ts.
 */
export {
  ERASED_VERSION,
  erasedPatients,
  patientCompartment,
  type ReferencingRow,
  type ResourceQuery,
  type ResourceRow,
  readResource,
  referencingResources,
  searchResources,
} from '../projections/resources.js';
