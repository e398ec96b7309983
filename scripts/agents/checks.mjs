// Every agent check against the gateway at TURNPIKE_URL; run by run.sh.
//   node checks.mjs [--only codex|codex-thread|sdk]
import { codexChecks, codexThread } from './codex.mjs';
import { sdkChecks } from './sdk.mjs';
import { summary } from './lib.mjs';

const i = process.argv.indexOf('--only');
const only = i > 0 ? process.argv[i + 1] : '';

if (!only || only === 'sdk') await sdkChecks();
if (!only || only === 'codex') await codexChecks();
if (only === 'codex-thread') await codexThread();
process.exit(summary() ? 0 : 1);
