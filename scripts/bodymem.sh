#!/usr/bin/env bash
# bodymem.sh — what a burst of large request bodies costs the gateway in
# memory: turnpike runs with its embedded simulated fleet, N clients post
# one body of M MiB each at once (chat completions, or Responses), and the
# gateway's RSS is read before, every 50 ms during, and at a few points
# after the burst. Each route gets a fresh process.
#
#   scripts/bodymem.sh [--bin PATH] [--bodies N] [--mib M]
#                      [--routes 'chat responses'] [--after '1 10 30']
#                      [--env 'K=V …'] [--port P]
#
# --bin is the turnpike binary to measure (default: built from this
# tree); --env is put in its environment (say GOMEMLIMIT=2GiB). Bodies are
# agent-like: messages (chat) or input items (Responses) of 4 KiB of text
# each, M MiB in all, more text than the model's context holds.
set -euo pipefail

bin=
bodies=25
mib=30
routes="chat responses"
after="1 10 30"
env_kv=
port=18790

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
	case "$1" in
	--bin) bin=$2; shift 2 ;;
	--bodies) bodies=$2; shift 2 ;;
	--mib) mib=$2; shift 2 ;;
	--routes) routes=$2; shift 2 ;;
	--after) after=$2; shift 2 ;;
	--env) env_kv=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bodymem.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done

cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/turnpike-bodymem.XXXXXX")
# One gateway runs at a time; on exit it is stopped, by its id.
gw=
stop_gateway() {
	[[ -n $gw ]] || return 0
	kill "$gw" 2>/dev/null || true
	wait "$gw" 2>/dev/null || true
	gw=
}
trap 'stop_gateway; rm -rf "$tmp"' EXIT

if [[ -z $bin ]]; then
	echo "building turnpike" >&2
	go build -o "$tmp/turnpike" ./cmd/turnpike
	bin=$tmp/turnpike
fi
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
	echo "bodymem.sh: port $port is in use; pass --port" >&2
	exit 1
fi
base=http://127.0.0.1:$port
model=meta-llama/Llama-3.1-8B-Instruct

# One 4 KiB message of plain text, repeated until the body is M MiB.
word="lorem ipsum dolor sit amet consectetur adipiscing elit "
text=
while ((${#text} < 4096)); do text+=$word; done
text=${text:0:4096}
items=$(((mib << 20) / (${#text} + 32)))
write_body() { # open close item-prefix item-suffix
	local i sep=
	printf '%s' "$1"
	for ((i = 0; i < items; i++)); do
		printf '%s%s%s%s' "$sep" "$3" "$text" "$4"
		sep=,
	done
	printf '%s' "$2"
}
write_body "{\"model\":\"$model\",\"messages\":[" ']}' '{"role":"user","content":"' '"}' >"$tmp/chat.json"
write_body "{\"model\":\"$model\",\"input\":[" ']}' '{"role":"user","content":"' '"}' >"$tmp/responses.json"

rss() { awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$1/status"; }
hwm() { awk '/^VmHWM:/ {print int($2 / 1024)}' "/proc/$1/status"; }

echo "machine: $(nproc) CPUs; $bodies bodies of $(awk -v b="$(stat -c %s "$tmp/chat.json")" 'BEGIN {printf "%.1f", b / 1048576}') MiB at once; env: ${env_kv:-none}" >&2
for route in $routes; do
	case $route in
	chat) path=/v1/chat/completions ;;
	responses) path=/v1/responses ;;
	*) echo "bodymem.sh: route $route is not chat or responses" >&2; exit 2 ;;
	esac
	rm -rf "$tmp/data"
	# shellcheck disable=SC2086 # env_kv is a list of K=V words
	env $env_kv "$bin" serve --addr "127.0.0.1:$port" --data-dir "$tmp/data" --log-level warn >"$tmp/$route.log" 2>&1 &
	gw=$!
	for _ in $(seq 100); do
		curl -fs "$base/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	# One small request first: what every gateway has paid before a burst.
	curl -s -o /dev/null "$base$path" -H 'Content-Type: application/json' \
		-d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"input\":\"hi\",\"max_tokens\":4,\"max_output_tokens\":16}"
	sleep 1
	before=$(rss "$gw")

	clients=()
	for i in $(seq "$bodies"); do
		curl -s -o "$tmp/$route.$i.out" -w '%{http_code}\n' "$base$path" \
			-H 'Content-Type: application/json' --data-binary "@$tmp/$route.json" >"$tmp/$route.$i.code" &
		clients+=($!)
	done
	peak=$before
	while kill -0 "${clients[@]}" 2>/dev/null; do
		r=$(rss "$gw")
		((r > peak)) && peak=$r
		sleep 0.05
	done
	wait "${clients[@]}" || true
	codes=$(sort "$tmp/$route".*.code | uniq -c | awk '{printf "%s×%s ", $1, $2}')
	line="$route: RSS before ${before} MiB, peak ${peak} MiB (VmHWM $(hwm "$gw") MiB)"
	elapsed=0
	for t in $after; do
		sleep $((t - elapsed))
		elapsed=$t
		line+=", +${t}s $(rss "$gw") MiB"
	done
	echo "$line; answers: $codes"
	for i in $(seq "$bodies"); do
		if [[ $(cat "$tmp/$route.$i.code") != 200 ]]; then
			echo "  one answer: $(head -c 300 "$tmp/$route.$i.out")"
			break
		fi
	done
	curl -s "$base/metrics" | grep -E '^turnpike_request_body' || true
	stop_gateway
done
