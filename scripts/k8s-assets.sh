#!/usr/bin/env bash
# k8s-assets.sh — build a real kube-apiserver and etcd for the Kubernetes
# discovery tests, cache them outside the repository, and print the directory
# that holds them (the value for KUBEBUILDER_ASSETS, laid out as
# controller-runtime's envtest expects: <dir>/kube-apiserver, <dir>/etcd).
#
#   KUBEBUILDER_ASSETS=$(scripts/k8s-assets.sh) go test ./pools
#
# Both binaries come from Go modules through the module proxy, in a scratch
# module of their own so that none of Kubernetes' dependencies enter
# turnpike's go.mod:
#   - kube-apiserver from k8s.io/kubernetes at KUBERNETES_VERSION. Its go.mod
#     replaces every staging module (k8s.io/api, k8s.io/apiserver, ...) with a
#     path inside its own repository, which a module consumer cannot follow;
#     the scratch module replaces each one with the same release's published
#     module (k8s.io/<name> v0.<minor>.<patch>) instead.
#   - etcd from go.etcd.io/etcd/server/v3 at the version k8s.io/kubernetes
#     itself requires, so the pair is the one Kubernetes tests with.
#
# The first build takes about 10 minutes of 2 cores; later runs print the
# cached directory at once, and a rebuild after the directory is removed
# reuses Go's build cache. Progress goes to stderr, the directory alone to
# stdout.
set -euo pipefail

KUBERNETES_VERSION=${KUBERNETES_VERSION:-1.37.2}
cache=${XDG_CACHE_HOME:-$HOME/.cache}
dir=${K8S_ASSETS_DIR:-$cache/turnpike/k8s-assets/v$KUBERNETES_VERSION}

if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; then
  echo "$dir"
  exit 0
fi

log() { echo "k8s-assets: $*" >&2; }

# v1.37.2 → v0.37.2: the staging modules are tagged with the same minor and
# patch under major 0.
staging_version="v0.${KUBERNETES_VERSION#*.}"
src="$dir/src"
mkdir -p "$src"
cd "$src"

# The scratch module's go.mod is written fresh each time, so a changed
# version never mixes with an old build's requirements.
rm -f go.mod go.sum
go mod init turnpike.local/k8s-assets >/dev/null 2>&1

log "reading k8s.io/kubernetes v$KUBERNETES_VERSION's go.mod"
kube_mod=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
if [ -z "$kube_mod" ] || [ ! -f "$kube_mod" ]; then
  log "could not download k8s.io/kubernetes v$KUBERNETES_VERSION"
  exit 1
fi

# Its toolchain line: the scratch module asks for the same Go.
go_line=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kube_mod")
[ -n "$go_line" ] && go mod edit -go="$go_line"

# Each "k8s.io/<name> => ./staging/src/k8s.io/<name>" becomes
# "k8s.io/<name> => k8s.io/<name> <staging_version>".
staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*$#\1#p' "$kube_mod")
if [ -z "$staging" ]; then
  log "no staging replacements found in $kube_mod"
  exit 1
fi
edits=()
for m in $staging; do
  edits+=("-replace=$m=$m@$staging_version")
done
go mod edit "${edits[@]}"
log "$(echo "$staging" | wc -l) staging modules replaced by their $staging_version releases"

etcd_version=$(sed -n 's#^[[:space:]]*go\.etcd\.io/etcd/server/v3 \(v[^ ]*\).*$#\1#p' "$kube_mod" | head -1)
etcd_version=${etcd_version:-v3.7.0}

log "resolving k8s.io/kubernetes v$KUBERNETES_VERSION and go.etcd.io/etcd/server/v3 $etcd_version"
go get "k8s.io/kubernetes/cmd/kube-apiserver@v$KUBERNETES_VERSION" "go.etcd.io/etcd/server/v3@$etcd_version" >&2

# The binaries are written under temporary names and renamed, so an
# interrupted build never leaves a directory that looks complete.
log "building kube-apiserver (the first build takes about 10 minutes of 2 cores)"
# The version a release build stamps (a module build has none, and would
# report v0.0.0-master).
minor=${KUBERNETES_VERSION#*.}; minor=${minor%%.*}
ver=k8s.io/component-base/version
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-X $ver.gitVersion=v$KUBERNETES_VERSION -X $ver.gitMajor=${KUBERNETES_VERSION%%.*} -X $ver.gitMinor=$minor -X $ver.gitTreeState=clean" \
  -o "$dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
log "building etcd"
CGO_ENABLED=0 go build -trimpath -o "$dir/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver"
mv "$dir/etcd.tmp" "$dir/etcd"
log "done: $("$dir/kube-apiserver" --version 2>/dev/null || true), $("$dir/etcd" --version 2>/dev/null | head -1 || true)"
echo "$dir"
