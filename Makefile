# turnpike — run `make help` for the targets.
GO ?= go

.PHONY: help test race bench overhead fuzz lint run ci k8s-assets chart-check

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-10s %s\n", $$1, $$2}'

test: ## run the tests (what CI runs)
	$(GO) test ./...

race: ## run the tests with the race detector
	$(GO) test -race ./...

bench: ## run the micro-benchmarks with allocation counts
	$(GO) test -run '^$$' -bench . -benchmem ./...

overhead: ## proxy overhead: direct, haproxy, Go's reverse proxy and turnpike in front of an instant engine (OVERHEAD_ARGS="--stream ...")
	bash scripts/overhead.sh $(OVERHEAD_ARGS)

fuzz: ## run each fuzz target for 20s
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 20s $$pkg || exit 1; \
	  done; \
	done

# STATICCHECK is run through the module proxy at a pinned version, so
# every machine lints with the same checks.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: ## gofmt, go vet and staticcheck; fails on any finding
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

k8s-assets: ## build and cache a real kube-apiserver and etcd for the Kubernetes discovery tests; prints the KUBEBUILDER_ASSETS dir
	@bash scripts/k8s-assets.sh

chart-check: ## helm lint and template of deploy/helm/turnpike and its Go tests (a server-side dry run with KUBEBUILDER_ASSETS set)
	@bash scripts/chart-check.sh

run: ## run turnpike with its embedded simulated fleet
	$(GO) run ./cmd/turnpike

ci: lint race ## what .ci/run does
