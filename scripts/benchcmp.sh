#!/usr/bin/env bash
# benchcmp.sh — the same Go benchmarks at two revisions, run interleaved,
# compared with benchstat.
#
#   scripts/benchcmp.sh [--rounds N] [--benchtime T] [--pkg DIR] [--out DIR]
#                       OLD NEW [PATTERN]
#
# OLD and NEW are git revisions; NEW may be "." for the working tree as it
# is. PATTERN is a -test.bench regexp (default 'ProxyChat|ResponsesTurn').
# Each revision's test binary is built once (go test -c) in a temporary
# worktree; the binaries then run alternately, one -test.count 1 run each
# per round, so that drift of a shared machine falls on both alike.
#
# New benchmarks do not exist at an old revision, so NEW's bench_test.go
# of the package is copied over OLD's before building: the same benchmark,
# old code against new. When it does not compile there (it uses something
# the old code lacks), each revision runs its own, and the script says so.
set -euo pipefail

# benchstat pinned: go run fetches it through the module proxy.
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

rounds=6
benchtime=1s
pkg=gateway
out=bench-results/benchcmp

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

args=()
while [[ $# -gt 0 ]]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--benchtime) benchtime=$2; shift 2 ;;
	--pkg) pkg=${2#./}; pkg=${pkg%/}; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	-*) echo "benchcmp.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
if [[ ${#args[@]} -lt 2 || ${#args[@]} -gt 3 ]]; then
	usage >&2
	exit 2
fi
old_rev=${args[0]}
new_rev=${args[1]}
pattern=${args[2]:-'ProxyChat|ResponsesTurn'}

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
cd "$repo"
git rev-parse --verify --quiet "$old_rev^{commit}" >/dev/null || { echo "benchcmp.sh: no revision $old_rev" >&2; exit 2; }
if [[ $new_rev != . ]]; then
	git rev-parse --verify --quiet "$new_rev^{commit}" >/dev/null || { echo "benchcmp.sh: no revision $new_rev" >&2; exit 2; }
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/turnpike-benchcmp.XXXXXX")
worktrees=()
cleanup() {
	for w in "${worktrees[@]}"; do
		git worktree remove --force "$w" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

checkout() { # rev dir
	git worktree add --quiet --detach "$2" "$1"
	worktrees+=("$2")
}
checkout "$old_rev" "$tmp/old"
if [[ $new_rev == . ]]; then
	new_dir=$repo
	new_label="working tree"
else
	checkout "$new_rev" "$tmp/new"
	new_dir=$tmp/new
	new_label=$(git rev-parse --short "$new_rev")
fi
old_label=$(git rev-parse --short "$old_rev")
[[ -d $tmp/old/$pkg ]] || { echo "benchcmp.sh: $old_label has no $pkg" >&2; exit 1; }

echo "building $pkg at $new_label" >&2
(cd "$new_dir" && go test -c -o "$tmp/new.test" "./$pkg")

same=yes
if [[ -f $new_dir/$pkg/bench_test.go ]]; then
	cp "$new_dir/$pkg/bench_test.go" "$tmp/old/$pkg/bench_test.go"
fi
echo "building $pkg at $old_label with $new_label's $pkg/bench_test.go" >&2
if ! (cd "$tmp/old" && go test -c -o "$tmp/old.test" "./$pkg") 2>"$tmp/old-build.log"; then
	same=no
	echo "benchcmp.sh: $new_label's $pkg/bench_test.go does not build at $old_label:" >&2
	head -5 "$tmp/old-build.log" >&2
	echo "benchcmp.sh: comparing each revision's own benchmarks instead" >&2
	git -C "$tmp/old" checkout --quiet -- "$pkg"
	git -C "$tmp/old" clean --quiet -fd -- "$pkg"
	(cd "$tmp/old" && go test -c -o "$tmp/old.test" "./$pkg")
fi

: >"$out/old.txt"
: >"$out/new.txt"
run() { # binary dir file
	# From the package directory, as go test runs it (testdata paths).
	(cd "$2/$pkg" && "$1" -test.run '^$' -test.bench "$pattern" -test.benchmem \
		-test.count 1 -test.benchtime "$benchtime") >>"$3"
}
for i in $(seq "$rounds"); do
	echo "round $i/$rounds" >&2
	run "$tmp/old.test" "$tmp/old" "$out/old.txt"
	run "$tmp/new.test" "$new_dir" "$out/new.txt"
done

{
	echo "old: $old_label  new: $new_label  package: $pkg  pattern: $pattern  rounds: $rounds × $benchtime"
	if [[ $same == yes ]]; then
		echo "both built with $new_label's $pkg/bench_test.go"
	else
		echo "each revision's own $pkg/bench_test.go (the new one does not build at $old_label)"
	fi
	echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	# Relative names: benchstat labels its columns with them.
	(cd "$out" && go run "$benchstat" old.txt new.txt)
} | tee "$out/benchstat.txt"
echo "results: $out/old.txt, $out/new.txt, $out/benchstat.txt" >&2
