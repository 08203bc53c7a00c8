/** Every form-backend operation (issue 4; docs/interface.md §4.4–4.5). */
import { register as expand } from './expand.js';
import { register as extract } from './extract.js';
import { register as narrative } from './narrative.js';
import { register as populate } from './populate.js';
import type { RegisterOperation } from './router.js';
import { register as validate } from './validate.js';

export const SDC_OPERATIONS: readonly RegisterOperation[] = [populate, validate, narrative, extract, expand];
