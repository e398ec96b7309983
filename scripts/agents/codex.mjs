// The Codex CLI against turnpike: `codex exec` with a stock config but
// for the provider, over HTTP and over WebSocket, `codex exec resume`, and
// one thread of 20 turns that must stay one session with its context cached.
import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  BASE, MODEL, assert, check, codesSince, diffCodes, metric, metrics, pinsMoved, pinsNew, recorder, responsesByCode, session,
} from './lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const codexBin = path.join(here, 'node_modules', '.bin', 'codex');
const tmp = process.env.AGENTS_TMP;

// home makes a CODEX_HOME whose config.toml is stock but for the provider,
// and turns off what would reach past loopback.
function home(name, { baseURL, websockets }) {
  const dir = path.join(tmp, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    path.join(dir, 'config.toml'),
    `model = "${MODEL}"
model_provider = "turnpike"
check_for_update_on_startup = false

[model_providers.turnpike]
name = "turnpike"
base_url = "${baseURL}/v1"
wire_api = "responses"
env_key = "TURNPIKE_API_KEY"
supports_websockets = ${websockets}

# The curated plugin sync and the apps connectors reach the internet.
[features]
plugins = false
remote_plugin = false
apps = false

[analytics]
enabled = false

[otel]
exporter = "none"
`,
  );
  return dir;
}

function workdir(name) {
  const dir = path.join(tmp, name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

// codex runs one codex command with --json and returns its events.
function codex(codexHome, cwd, args, { timeoutMs = 120_000, log = '' } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(codexBin, args, {
      cwd,
      env: {
        ...process.env,
        CODEX_HOME: codexHome,
        TURNPIKE_API_KEY: 'unused',
        RUST_LOG: log || 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      appendFileSync(path.join(tmp, 'codex.log'), `== codex ${args.join(' ')} (exit ${code ?? signal})\n${err}\n`);
      const events = [];
      for (const line of out.split('\n')) {
        if (!line.trim()) continue;
        try {
          events.push(JSON.parse(line));
        } catch {
          // codex prints only JSON lines on stdout with --json
        }
      }
      resolve({ code, signal, events, stderr: err });
    });
  });
}

// turnOf checks one `codex exec` run: it completed a turn with an answer
// and no error the client reported, and returns what it saw.
function turnOf(run) {
  const tail = run.stderr.split('\n').filter((l) => !/Unknown model .* fallback model metadata/.test(l)).slice(-15).join('\n');
  const events = run.events.slice(-4).map((e) => JSON.stringify(e).slice(0, 600)).join('\n');
  assert(run.code === 0, `codex exited ${run.code ?? run.signal}; last events:\n${events}\nstderr:\n${tail}`);
  const thread = run.events.find((e) => e.type === 'thread.started')?.thread_id;
  const failed = run.events.find((e) => e.type === 'turn.failed' || e.type === 'error');
  assert(!failed, `codex reported ${JSON.stringify(failed)}`);
  // Codex warns that it has no metadata for a model it does not know;
  // any other error item is a failure.
  const errors = run.events.filter(
    (e) => e.type === 'item.completed' && e.item?.type === 'error' && !/Model metadata for/.test(e.item.message),
  );
  assert(errors.length === 0, `codex error items: ${JSON.stringify(errors)}`);
  const completed = run.events.filter((e) => e.type === 'turn.completed');
  assert(completed.length === 1, `want one turn.completed, got ${completed.length}; stderr:\n${tail}`);
  const messages = run.events.filter((e) => e.type === 'item.completed' && e.item?.type === 'agent_message');
  assert(messages.length > 0 && messages.at(-1).item.text.trim() !== '', 'no agent message');
  const commands = run.events.filter((e) => e.type === 'item.completed' && e.item?.type === 'command_execution');
  return { thread, usage: completed[0].usage, text: messages.at(-1).item.text, commands: commands.length };
}

export async function codexChecks() {
  const httpHome = home('codex-http', { baseURL: BASE, websockets: false });
  const wsHome = home('codex-ws', { baseURL: BASE, websockets: true });
  let httpThread = '';

  await check('codex exec over HTTP', async () => {
    const before = responsesByCode(await metrics());
    const run = await codex(httpHome, workdir('work-http'), ['exec', '--skip-git-repo-check', '--json', 'List the files in this directory.']);
    const t = turnOf(run);
    const codes = diffCodes(before, responsesByCode(await metrics()));
    assert(codes['200'] >= 1 && Object.keys(codes).every((c) => c === '200'), `gateway answers by code: ${JSON.stringify(codes)}`);
    httpThread = t.thread;
    return `thread ${t.thread}, ${codes['200']} requests, ${t.commands} commands run, usage ${JSON.stringify(t.usage)}`;
  });

  await check('codex exec resume', async () => {
    if (!httpThread) throw new Error('needs the HTTP exec check');
    const before = await session(httpThread);
    assert(before, `no live session ${httpThread} after the first exec`);
    const run = await codex(httpHome, workdir('work-http'), ['exec', '--skip-git-repo-check', '--json', 'resume', httpThread, 'Now say what you found.']);
    const t = turnOf(run);
    assert(t.thread === httpThread, `resumed thread ${t.thread}, want ${httpThread}`);
    const after = await session(httpThread);
    assert(after.turns > before.turns, `session turns ${before.turns} → ${after.turns}`);
    assert(after.endpoint && after.endpoint === before.endpoint, `pin ${before.endpoint} → ${after.endpoint}`);
    assert(t.usage.cached_input_tokens > 0, `resumed turn has no cached tokens: ${JSON.stringify(t.usage)}`);
    return `session ${httpThread}: ${after.turns} turns on ${after.endpoint}, usage ${JSON.stringify(t.usage)}`;
  });

  await check('codex exec over WebSocket', async () => {
    const m0 = await metrics();
    const before = responsesByCode(m0);
    const run = await codex(wsHome, workdir('work-ws'), ['exec', '--skip-git-repo-check', '--json', 'List the files in this directory.'], {
      log: 'codex_api::endpoint::responses_websocket=info,codex_core=warn',
    });
    const t = turnOf(run);
    const codes = await codesSince(before, (c) => c['101'] >= 1);
    // Upgrades answered, and no turn fell back to HTTP.
    assert(codes['101'] >= 1 && !codes['200'], `gateway answers by code: ${JSON.stringify(codes)}`);
    const m1 = await metrics();
    const wsErrors = metric(m1, 'turnpike_websocket_messages_total{kind="error"}') - metric(m0, 'turnpike_websocket_messages_total{kind="error"}');
    const warmups = metric(m1, 'turnpike_websocket_messages_total{kind="warmup"}') - metric(m0, 'turnpike_websocket_messages_total{kind="warmup"}');
    assert(wsErrors === 0, `${wsErrors} WebSocket messages answered with an error event`);
    const problems = run.stderr.split('\n').filter((l) =>
      /prewarm setup failed|fall(ing)?[ _-]?back to (http|sse)|http fallback|websocket[^\n]*(error|failed)/i.test(l));
    assert(problems.length === 0, `codex reports WebSocket problems:\n${problems.join('\n')}`);
    const r = await codex(wsHome, workdir('work-ws'), ['exec', '--skip-git-repo-check', '--json', 'resume', t.thread, 'And then?']);
    const t2 = turnOf(r);
    assert(t2.thread === t.thread, `resumed thread ${t2.thread}, want ${t.thread}`);
    const m2 = await metrics();
    const codes2 = diffCodes(before, responsesByCode(m2));
    assert(!codes2['200'], `resume fell back to HTTP: ${JSON.stringify(codes2)}`);
    // The thread is one session on one replica over both connections.
    const s = await session(t.thread);
    assert(s && s.turns >= 2 && s.endpoint, `session ${t.thread}: ${JSON.stringify(s)}`);
    const pins = pinsNew(m2) - pinsNew(m0);
    const moved = pinsMoved(m2) - pinsMoved(m0);
    assert(pins === 1 && moved === 0, `pins set ${pins}, moved ${moved}`);
    return `thread ${t.thread}, ${codes2['101']} connections, ${warmups} warmups, usage ${JSON.stringify(t.usage)} then ${JSON.stringify(t2.usage)}`;
  });

  await codexThread();
}

// codexThread is one Codex thread of 20 turns over HTTP, through a
// recorder of the gateway's usage.
export async function codexThread() {
  await check('codex thread of 20 turns: one session, one pin, previous context cached', async () => {
    const rec = await recorder();
    try {
      const h = home('codex-thread', { baseURL: rec.url, websockets: false });
      const cwd = workdir('work-thread');
      const m0 = await metrics();
      const first = turnOf(await codex(h, cwd, ['exec', '--skip-git-repo-check', '--json', 'Look around this directory.']));
      for (let i = 2; i <= 20; i++) {
        turnOf(await codex(h, cwd, ['exec', '--skip-git-repo-check', '--json', 'resume', first.thread, `Turn ${i}: go on.`]));
      }
      const m1 = await metrics();
      const s = await session(first.thread);
      assert(s, `no live session ${first.thread}`);
      const reqs = rec.seen.filter((r) => r.status === 200);
      assert(reqs.length >= 20 && reqs.length === rec.seen.length, `${rec.seen.length} requests, ${reqs.length} answered 200`);
      // Every request named the thread, and the gateway made it one session.
      const keys = new Set(reqs.map((r) => r.headers['session-id'] ?? r.headers['session_id'] ?? r.body?.prompt_cache_key));
      assert(keys.size === 1 && keys.has(first.thread), `session keys sent: ${[...keys].join(', ')}`);
      assert(s.turns === reqs.length, `session has ${s.turns} turns, ${reqs.length} requests were made`);
      const newPins = pinsNew(m1) - pinsNew(m0);
      const moved = pinsMoved(m1) - pinsMoved(m0);
      assert(newPins === 1 && moved === 0, `pins set ${newPins}, moved ${moved}`);
      // Each request after the first finds the whole previous request's
      // prompt cached (to the 16-token KV block), as the gateway reports it.
      const short = [];
      let minShare = 1;
      for (let i = 1; i < reqs.length; i++) {
        const prev = reqs[i - 1].usage;
        const cur = reqs[i].usage;
        const cached = cur?.input_tokens_details?.cached_tokens ?? 0;
        const want = Math.floor(prev.input_tokens / 16) * 16;
        minShare = Math.min(minShare, cached / cur.input_tokens);
        if (cached < want) short.push(`request ${i + 1}: cached ${cached} of ${cur.input_tokens}, previous prompt ${prev.input_tokens}`);
      }
      assert(short.length === 0, `previous context not cached:\n${short.join('\n')}`);
      return `${reqs.length} requests in 20 turns, session ${first.thread} pinned to ${s.endpoint}, least cached share ${(minShare * 100).toFixed(1)}%`;
    } finally {
      await rec.close();
    }
  }, { timeoutMs: 300_000 });
}
