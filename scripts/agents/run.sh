#!/usr/bin/env bash
# run.sh — turnpike against the agents people point at it: the Codex CLI
# (HTTP and WebSocket transports, exec resume, a 20-turn thread), the
# Agents SDK and the AI SDK, all from the versions pinned in package.json,
# against `turnpike` with its embedded simulated fleet.
#
#   scripts/agents/run.sh [--keep-logs] [--only codex|codex-thread|sdk]
#
# It builds the gateway, starts it on a free loopback port with a
# temporary data directory, waits until it is ready, runs every check
# (each prints PASS, FAIL or SKIP with its reason), stops the gateway and
# exits non-zero when any check failed. No OpenAI key and no network
# beyond loopback are used; npm install runs once into
# scripts/agents/node_modules and is reused.
set -euo pipefail

keep_logs=false
only=""
while [[ $# -gt 0 ]]; do
	case "$1" in
	--keep-logs) keep_logs=true; shift ;;
	--only) only=$2; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/turnpike-agents.XXXXXX")
gw_pid=""
cleanup() {
	if [[ -n "$gw_pid" ]]; then
		kill "$gw_pid" 2>/dev/null || true
		wait "$gw_pid" 2>/dev/null || true
	fi
	if $keep_logs; then
		echo "logs kept in $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

# The model the agents name: a gpt-* name, because the Agents SDK's
# compaction session accepts only such names. The fleet serves another
# model, and the gateway answers the name as an alias of it
# (--model-alias, models.aliases).
model=${TURNPIKE_AGENTS_MODEL:-gpt-4.1}
served=${TURNPIKE_AGENTS_SERVED_MODEL:-meta-llama/Llama-3.1-8B-Instruct}

if [[ ! -x "$here/node_modules/.bin/codex" || "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]]; then
	echo "== npm ci (scripts/agents)"
	(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "== building turnpike"
(cd "$root" && go build -o "$tmp/turnpike" ./cmd/turnpike)

echo "== starting turnpike (embedded simulated fleet)"
admin_token="agents-check-$RANDOM$RANDOM"
TURNPIKE_ADMIN_TOKEN=$admin_token "$tmp/turnpike" --addr 127.0.0.1:0 --data-dir "$tmp/data" \
	--sim-served-model "$served" --model-alias "$model=$served" --sim-time-scale "${TURNPIKE_AGENTS_TIME_SCALE:-0.2}" \
	--log-level "${TURNPIKE_AGENTS_LOG_LEVEL:-warn}" >"$tmp/turnpike.out" 2>"$tmp/turnpike.log" &
gw_pid=$!

base=""
for _ in $(seq 1 300); do
	if ! kill -0 "$gw_pid" 2>/dev/null; then
		echo "turnpike exited before it was ready:"; cat "$tmp/turnpike.log"; exit 1
	fi
	base=$(sed -n 's|^turnpike is serving on \(http://[0-9.:]*\).*|\1|p' "$tmp/turnpike.out" | head -n1)
	if [[ -n "$base" ]] && curl -fsS "$base/readyz" >/dev/null 2>&1; then
		break
	fi
	base=""
	sleep 0.1
done
if [[ -z "$base" ]]; then
	echo "turnpike did not become ready in 30s:"; cat "$tmp/turnpike.log"; exit 1
fi
echo "turnpike ready at $base (model $model, an alias of $served)"

export TURNPIKE_URL=$base TURNPIKE_MODEL=$model TURNPIKE_ADMIN_TOKEN=$admin_token
export AGENTS_TMP=$tmp
# Nothing may reach past loopback: no key, no tracing export, no update check.
export OPENAI_API_KEY=unused OPENAI_AGENTS_DISABLE_TRACING=1 NO_UPDATE_NOTIFIER=1
unset OPENAI_BASE_URL OPENAI_ORG_ID OPENAI_PROJECT_ID

# Node 20 has its WebSocket client behind a flag; the Agents SDK's
# websocket transport needs it as a global.
node_flags=()
if ! node -e 'process.exit(typeof WebSocket === "function" ? 0 : 1)' 2>/dev/null; then
	node_flags+=(--experimental-websocket)
fi

status=0
node "${node_flags[@]}" "$here/checks.mjs" ${only:+--only "$only"} || status=$?
if [[ $status -ne 0 ]]; then
	echo "== turnpike log (last 40 lines)"
	tail -n 40 "$tmp/turnpike.log"
fi
exit $status
