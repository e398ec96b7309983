// Shared pieces of the agent checks: the check runner, the gateway's
// metrics and admin API, and a recording pass-through in front of the
// gateway that notes each Responses request's usage as the gateway
// reported it.
import http from 'node:http';

export const BASE = process.env.TURNPIKE_URL;
export const MODEL = process.env.TURNPIKE_MODEL;
const ADMIN_TOKEN = process.env.TURNPIKE_ADMIN_TOKEN;
if (!BASE || !MODEL) {
  console.error('TURNPIKE_URL and TURNPIKE_MODEL must be set (run scripts/agents/run.sh)');
  process.exit(2);
}

export class Skip extends Error {}

const results = { passed: 0, failed: 0, skipped: 0 };

// check runs fn and prints one PASS, FAIL or SKIP line for it. fn may
// return a short detail for the PASS line.
export async function check(name, fn, { timeoutMs = 180_000 } = {}) {
  const start = Date.now();
  let timer;
  try {
    const detail = await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs / 1000}s`)), timeoutMs);
      }),
    ]);
    results.passed++;
    console.log(`PASS ${name} (${secs(start)})${detail ? ': ' + detail : ''}`);
  } catch (err) {
    if (err instanceof Skip) {
      results.skipped++;
      console.log(`SKIP ${name}: ${err.message}`);
    } else {
      results.failed++;
      console.log(`FAIL ${name} (${secs(start)}): ${err?.stack ?? err}`);
    }
  } finally {
    clearTimeout(timer);
  }
}

function secs(start) {
  return `${((Date.now() - start) / 1000).toFixed(1)}s`;
}

export function summary() {
  console.log(`agents: ${results.passed} passed, ${results.failed} failed, ${results.skipped} skipped`);
  return results.failed === 0;
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// metrics reads the gateway's /metrics into a map of "name{labels}" to value.
export async function metrics() {
  const res = await fetch(`${BASE}/metrics`);
  assert(res.ok, `GET /metrics: ${res.status}`);
  const m = new Map();
  for (const line of (await res.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}

export function metric(m, key) {
  return m.get(key) ?? 0;
}

// requestsByCode is how many /v1/responses requests the gateway answered,
// by status code.
export function responsesByCode(m) {
  const out = {};
  for (const [k, v] of m) {
    const match = /^turnpike_requests_total\{code="(\d+)",route="\/v1\/responses"\}$/.exec(k);
    if (match) out[match[1]] = v;
  }
  return out;
}

export function diffCodes(before, after) {
  const out = {};
  for (const code of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const d = (after[code] ?? 0) - (before[code] ?? 0);
    if (d) out[code] = d;
  }
  return out;
}

// codesSince is diffCodes from before to the gateway's counts now, read
// again every 100 ms, for up to 10 s, until done(codes) holds: a WebSocket
// upgrade is counted when its connection ends, a moment after the client
// closed it.
export async function codesSince(before, done) {
  let codes = {};
  for (let i = 0; i < 100; i++) {
    codes = diffCodes(before, responsesByCode(await metrics()));
    if (done(codes)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return codes;
}

export const pinsNew = (m) => metric(m, 'turnpike_session_pin_changes_total{reason="new"}');
export const pinsMoved = (m) => {
  let n = 0;
  for (const [k, v] of m) {
    if (k.startsWith('turnpike_session_pin_changes_total{') && !k.includes('reason="new"')) n += v;
  }
  return n;
};

// session reads a session from the admin API; null when it is not live.
export async function session(key, tenant = 'default') {
  const res = await fetch(`${BASE}/admin/v1/tenants/${tenant}/sessions/${encodeURIComponent(key)}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`admin session ${key}: ${res.status} ${await res.text()}`);
  return res.json();
}

// recorder starts a pass-through in front of the gateway that notes, for
// each POST /v1/responses, the request's session headers and the usage
// of its response.completed event (streamed or not), in order.
export async function recorder() {
  const target = new URL(BASE);
  const seen = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const rec = req.method === 'POST' && req.url.endsWith('/responses') ? { headers: { ...req.headers }, body: safeJSON(body) } : null;
      const up = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers },
        (upRes) => {
          res.writeHead(upRes.statusCode, upRes.headers);
          const out = [];
          upRes.on('data', (c) => {
            if (rec) out.push(c);
            res.write(c);
          });
          upRes.on('end', () => {
            if (rec) {
              rec.status = upRes.statusCode;
              rec.usage = usageOf(Buffer.concat(out).toString('utf8'));
              seen.push(rec);
            }
            res.end();
          });
        },
      );
      up.on('error', (err) => {
        res.writeHead(502);
        res.end(String(err));
      });
      up.end(body);
    });
  });
  // Codex keeps its connection across a turn's requests, with a command's
  // run (up to its yield time) in between: an idle connection must not be
  // closed under it, as Node's 5-second default would.
  server.keepAliveTimeout = 10 * 60_000;
  server.headersTimeout = 10 * 60_000 + 1000;
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

function safeJSON(buf) {
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch {
    return null;
  }
}

// usageOf finds the usage of a Responses answer: the last
// response.completed (or incomplete) event of a stream, or the body.
function usageOf(text) {
  let usage = null;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    const ev = safeJSON(Buffer.from(line.slice(6)));
    if (ev?.response?.usage) usage = ev.response.usage;
  }
  if (!usage) usage = safeJSON(Buffer.from(text))?.usage ?? null;
  return usage;
}
