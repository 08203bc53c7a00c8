/** The part of `@lhncbc/ucum-lhc` (which ships no types) the form engine uses (engine/units.ts). */
declare module '@lhncbc/ucum-lhc' {
  interface Conversion {
    readonly status: 'succeeded' | 'failed' | 'error';
    readonly toVal: number | null;
    readonly msg: readonly string[];
  }
  interface Utils {
    convertUnitTo(fromUnitCode: string, fromVal: number, toUnitCode: string): Conversion;
    validateUnitString(unit: string): { readonly status: 'valid' | 'invalid' | 'error' };
  }
  export const UcumLhcUtils: { getInstance(): Utils };
}
