#!/usr/bin/env bash
# overhead.sh — what a proxy costs in front of an engine that answers at
# once: large agent-like chat bodies from closed-loop clients, sent direct
# to the engine, through haproxy, through Go's standard reverse proxy (the
# floor of any gateway on net/http), and through turnpike (cache-aware and
# round-robin), each target in its own process, side by side in one run.
#
# The engine (`turnpike bench engine`) and the load generator (`turnpike
# bench overhead`) are this repository's binary; see docs/benchmarks.md.
#
#   scripts/overhead.sh [--body-bytes N] [--concurrency N] [--duration D]
#                       [--warmup D] [--rounds N] [--stream] [--sessions]
#                       [--turns next|repeat|cold]
#                       [--no-haproxy] [--no-go-proxy] [--no-round-robin]
#                       [--also-env 'K=V …'] [--also-rev REV] [--port-base P]
#                       [--out DIR]
#
# --also-env adds one more cache-aware turnpike, with those variables in
# its environment (say GOGC=100, the Go collector's old default), to
# compare a setting against the default in the same run. --also-rev adds
# one more, built from git revision REV (turnpike-REV), to compare a change
# against the code before it in the same run.
set -euo pipefail

body_bytes=$((168 << 10))
concurrency=16
duration=5s
warmup=1s
rounds=3
stream=false
sessions=false
turns=next
haproxy=true
go_proxy=true
round_robin=true
also_env=
also_rev=
port_base=18700
out=bench-results/overhead

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
	case "$1" in
	--body-bytes) body_bytes=$2; shift 2 ;;
	--concurrency) concurrency=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--stream) stream=true; shift ;;
	--sessions) sessions=true; shift ;;
	--turns) turns=$2; shift 2 ;;
	--no-haproxy) haproxy=false; shift ;;
	--no-go-proxy) go_proxy=false; shift ;;
	--no-round-robin) round_robin=false; shift ;;
	--also-env) also_env=$2; shift 2 ;;
	--also-rev) also_rev=$2; shift 2 ;;
	--port-base) port_base=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "overhead.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done

cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/turnpike-overhead.XXXXXX")
pids=()
worktree=
cleanup() {
	# Only the processes this script started, by their ids.
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	[[ -n $worktree ]] && git worktree remove --force "$worktree" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

engine_port=$port_base
haproxy_port=$((port_base + 1))
ca_port=$((port_base + 2))
rr_port=$((port_base + 3))
go_proxy_port=$((port_base + 4))
env_port=$((port_base + 5))
rev_port=$((port_base + 6))
ports=("$engine_port" "$haproxy_port" "$ca_port" "$rr_port" "$go_proxy_port")
[[ -n $also_rev ]] && ports+=("$rev_port")
if [[ -n $also_env ]]; then
	for kv in $also_env; do
		if [[ ! $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
			echo "overhead.sh: --also-env takes NAME=VALUE words; $kv is not one" >&2
			exit 2
		fi
	done
	ports+=("$env_port")
fi
for p in "${ports[@]}"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "overhead.sh: port $p is in use; pass --port-base" >&2
		exit 1
	fi
done

echo "building turnpike" >&2
go build -o "$tmp/turnpike" ./cmd/turnpike
bin=$tmp/turnpike
if [[ -n $also_rev ]]; then
	rev=$(git rev-parse --short "$also_rev^{commit}")
	echo "building turnpike at $rev" >&2
	worktree=$tmp/rev
	git worktree add --quiet --detach "$worktree" "$rev"
	(cd "$worktree" && go build -o "$tmp/bin-$rev" ./cmd/turnpike)
fi

# The instant engine: the backend of every target, and the "direct" one.
"$bin" bench engine --addr "127.0.0.1:$engine_port" >"$tmp/engine.log" 2>&1 &
engine_pid=$!
pids+=("$engine_pid")
targets=(--target "direct=http://127.0.0.1:$engine_port,pid=$engine_pid")

if [[ $haproxy == true ]] && ! command -v haproxy >/dev/null; then
	if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
		echo "installing haproxy" >&2
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; } >"$tmp/apt.log" 2>&1; then
			echo "overhead.sh: apt-get could not install haproxy (see below); measuring without it" >&2
			tail -5 "$tmp/apt.log" >&2
		fi
	else
		echo "overhead.sh: haproxy is not installed and apt-get is not available as root; measuring without it" >&2
	fi
fi
if [[ $haproxy == true ]] && command -v haproxy >/dev/null; then
	# A plain HTTP reverse proxy with keep-alive to the engine: what a
	# load balancer in front of engines costs, with no routing logic.
	cat >"$tmp/haproxy.cfg" <<EOF
global
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend fe
    bind 127.0.0.1:$haproxy_port
    default_backend engine
backend engine
    server engine 127.0.0.1:$engine_port
EOF
	# -db: stay in the foreground as one process, so $! is the one doing the work.
	haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
	haproxy_pid=$!
	pids+=("$haproxy_pid")
	targets+=(--target "haproxy=http://127.0.0.1:$haproxy_port,pid=$haproxy_pid")
	echo "haproxy $(haproxy -v | head -1 | awk '{print $3}')" >&2
fi

if [[ $go_proxy == true ]]; then
	# Go's net/http/httputil.ReverseProxy with keep-alive to the engine and
	# nothing else: what turnpike's HTTP stack costs before turnpike does
	# anything.
	"$bin" bench proxy --addr "127.0.0.1:$go_proxy_port" --upstream "http://127.0.0.1:$engine_port" >"$tmp/go-proxy.log" 2>&1 &
	go_proxy_pid=$!
	pids+=("$go_proxy_pid")
	targets+=(--target "go-reverse-proxy=http://127.0.0.1:$go_proxy_port,pid=$go_proxy_pid")
fi

# turnpike: one process per policy, each with its own state directory.
start_turnpike() {
	local name=$1 port=$2 policy=$3 env=${4:-} binary=${5:-$bin}
	mkdir -p "$tmp/$name"
	cat >"$tmp/$name/turnpike.yaml" <<EOF
addr: 127.0.0.1:$port
dataDir: $tmp/$name/data
pools:
  - name: instant
    engine: vllm
    servedModels: [bench-model]
    endpoints:
      - url: http://127.0.0.1:$engine_port
routing:
  policy: $policy
EOF
	# shellcheck disable=SC2086 # env is a list of K=V words
	env $env "$binary" serve --config "$tmp/$name/turnpike.yaml" --log-level warn >"$tmp/$name/log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	targets+=(--target "$name=http://127.0.0.1:$port,pid=$pid")
}
start_turnpike turnpike-cache-aware "$ca_port" cache-aware
if [[ $round_robin == true ]]; then
	start_turnpike turnpike-round-robin "$rr_port" round-robin
fi
if [[ -n $also_env ]]; then
	echo "turnpike-cache-aware-also-env: $also_env" >&2
	start_turnpike turnpike-cache-aware-also-env "$env_port" cache-aware "$also_env"
fi
if [[ -n $also_rev ]]; then
	start_turnpike "turnpike-$rev" "$rev_port" cache-aware "" "$tmp/bin-$rev"
fi

flags=(--body-bytes "$body_bytes" --concurrency "$concurrency" --duration "$duration"
	--warmup "$warmup" --rounds "$rounds" --backend-pid "$engine_pid" --out "$out")
[[ $stream == true ]] && flags+=(--stream)
[[ $sessions == true ]] && flags+=(--sessions)
flags+=(--turns "$turns")

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if ! "$bin" bench overhead "${targets[@]}" "${flags[@]}"; then
	for f in "$tmp"/engine.log "$tmp"/haproxy.log "$tmp"/turnpike-*/log; do
		[[ -s $f ]] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
	done
	exit 1
fi
