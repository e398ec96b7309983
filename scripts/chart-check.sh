#!/usr/bin/env bash
# chart-check.sh — check the Helm chart under deploy/helm/turnpike:
# helm lint and helm template with its defaults and with each values file of
# deploy/helm/testdata, then the chart's Go tests (deploy/helm): the rendered
# config loaded by the gateway's own loader, RBAC, probes and grace period,
# the dashboard's metric names, and, with KUBEBUILDER_ASSETS set (make
# k8s-assets), the manifests applied to a real kube-apiserver with
# server-side dry run.
#
#   scripts/chart-check.sh          # the checks
#   scripts/chart-check.sh helm     # print the Helm binary's path, and nothing else
#
# Helm is built from its Go module at HELM_VERSION and cached outside the
# repository (the first build takes about 8 minutes of 2 cores; later runs
# find the binary). HELM names another binary instead.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=${HELM_VERSION:-v4.3.2}
cache=${XDG_CACHE_HOME:-$HOME/.cache}
helm_dir=$cache/turnpike/helm/$HELM_VERSION

helm=${HELM:-}
if [ -z "$helm" ]; then
  helm=$helm_dir/helm
  if [ ! -x "$helm" ]; then
    echo "chart-check: building Helm $HELM_VERSION from its Go module into $helm_dir" >&2
    mkdir -p "$helm_dir"
    # Installed outside this module: Helm's dependencies stay out of
    # turnpike's go.mod.
    (cd "$helm_dir" && GOBIN=$helm_dir go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION")
  fi
fi
if [ "${1:-}" = helm ]; then
  echo "$helm"
  exit 0
fi

chart=deploy/helm/turnpike
echo "== helm ${HELM:+$HELM }(Helm $HELM_VERSION) lint and template $chart"
values=("")
for f in deploy/helm/testdata/*.yaml; do values+=("$f"); done
for v in "${values[@]}"; do
  args=()
  [ -n "$v" ] && args=(--values "$v")
  echo "-- ${v:-defaults}"
  "$helm" lint --strict "$chart" --namespace gw "${args[@]}" | grep -v '^$'
  "$helm" template tp "$chart" --namespace gw "${args[@]}" >/dev/null
done

echo "== go test ./deploy/... (the rendered config loaded by the gateway; server-side dry run with KUBEBUILDER_ASSETS${KUBEBUILDER_ASSETS:+=$KUBEBUILDER_ASSETS})"
TURNPIKE_HELM=$helm go test -count=1 ./deploy/...
