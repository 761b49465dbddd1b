# sless developer entry points. `make test` is what CI runs (after `make lint`).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# The test control plane is built from the versions pinned in hack/tools/go.mod
# and kept under a directory named after them, so a version bump rebuilds it.
K8S_VERSION  := $(shell awk '$$1 == "k8s.io/kubernetes" {print $$2}' hack/tools/go.mod)
ETCD_VERSION := $(shell awk '$$1 == "go.etcd.io/etcd/server/v3" {print $$2}' hack/tools/go.mod)
K8S_ASSETS   := $(CURDIR)/bin/k8s/kubernetes-$(K8S_VERSION)-etcd-$(ETCD_VERSION)
TOOLS        := $(CURDIR)/bin/tools

# The Go functions' SDK is a module of its own (standard library only), so
# ./... from here does not reach it: test and lint name it.
GO_SDK := runtimes/go

.PHONY: all build images cluster-bins cluster cluster-down cluster-wipe deploy console run test test-e2e test-unit bench bench-coldstart bench-records bench-runs bench-queue bench-metrics bench-console bench-loadgen bench-scenarios bench-knative bench-grpc bench-cluster generate verify lint controlplane tools clean

all: build

## build: the sless binary, to bin/sless, with the console's chart library
build: console
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/sless ./cmd/sless

## images: the sless image and the runtime base images (runtime-python,
## runtime-node from Debian's packages), built without a container engine
## into OCI layouts under $(IMAGES_OUT)/images (bin/images); REGISTRY=host:port/path
## pushes them too
IMAGES_OUT ?= bin
images: console
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(IMAGES_OUT)/linux/sless ./cmd/sless
	$(GO) run ./hack/images -sless $(IMAGES_OUT)/linux/sless -version $(VERSION) -out $(IMAGES_OUT)/images $(if $(REGISTRY),-push $(REGISTRY))

## run: the local platform (sless dev) on the samples in config/samples/functions;
## ARGS adds flags (ARGS=--prometheus runs Prometheus beside it)
run: build
	bin/sless dev --functions config/samples/functions $(ARGS)

## test: everything CI runs: generated files up to date, then all tests
## against a real kube-apiserver and etcd (built on first use)
test: verify controlplane console
	@# go test's 10 minutes per package is too short for cmd/sless on a busy machine.
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) $(GO) test -race -count=1 -timeout 30m ./...
	cd $(GO_SDK) && $(GO) test -race -count=1 ./...

## test-e2e: the end-to-end tests (e2e/) on the one-node cluster, with sless
## installed from its own images (make cluster deploy); the cluster stays up
## for the next run (make cluster-down stops it)
test-e2e: cluster deploy build
	@# Up again: it must leave a running cluster as it is.
	$(CLUSTER_ENV) hack/cluster/cluster.sh up
	SLESS_E2E_KUBECTL=$(K8S_ASSETS)/kubectl $(GO) test -tags e2e -race -count=1 -timeout 45m ./e2e/

## test-scale: 1,000 Functions on a real control plane with the controller,
## two activators and two autoscalers as processes, asserting behaviour:
## restarts rewrite nothing, the autoscalers share them and fail over, no
## error is logged, no client throttles itself (benchmarks/cmd/bench-scale)
test-scale: build controlplane
	$(GO) run ./benchmarks/cmd/bench-scale -sless bin/sless -functions 1000 -check

## bench-scale: the same up to 10,000 Functions, measuring memory per
## Function and the failover (benchmarks/RESULTS.md)
bench-scale: build controlplane
	$(GO) run ./benchmarks/cmd/bench-scale -sless bin/sless -functions 1000,5000,10000

## test-unit: the tests that need no control plane (the others skip)
test-unit:
	$(GO) test -race ./...
	cd $(GO_SDK) && $(GO) test -race ./...

## bench: Go benchmarks of the request path, then the queue-proxy and the
## activator against the direct path under load, then the autoscaler's tick and
## its simulation traces against plain Knative KPA (the tables in benchmarks/RESULTS.md)
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./queueproxy/ ./activator/
	$(GO) run ./benchmarks/cmd/bench-requestpath -sless bin/sless -rounds 3
	$(GO) test -run '^$$' -bench . -benchmem ./autoscaler/
	$(GO) run ./benchmarks/cmd/bench-autoscaler

## bench-coldstart: cold starts and warm throughput per runtime through sless dev
bench-coldstart:
	$(GO) run ./benchmarks/cmd/bench-coldstart

## bench-records: the PostgreSQL invocation store against a bare COPY loop,
## the request path with it against the ring, and the summary over 10M records
bench-records:
	$(GO) run ./benchmarks/cmd/bench-records

## bench-runs: runs accepted per second against a bare INSERT loop, and the
## time a run adds to the same request waited on
bench-runs:
	$(GO) run ./benchmarks/cmd/bench-runs

## bench-queue: RabbitMQ throughput against a bare consume loop and direct
## HTTP, wake-up from zero, cron lag (needs RabbitMQ on 127.0.0.1:5672)
bench-queue:
	$(GO) run ./benchmarks/cmd/bench-queue

## bench-metrics: the cost of a scrape of sless dev's /metrics with 1,000
## functions (1,000 Python instances: about 13 GB and 6 minutes) against a
## bare promhttp page of the same series
bench-metrics: build
	$(GO) build -o bin/bench-metrics ./benchmarks/cmd/bench-metrics
	bin/bench-metrics -sless bin/sless

## bench-console: the console with 1,000 idle functions in headless Chromium:
## the functions page's render time and its live updates' cost to sless dev
bench-console: build
	$(GO) run ./benchmarks/cmd/bench-console -sless bin/sless

## bench-loadgen: what sless load drives against a trivial server, beside wrk
## (Debian's wrk) and hey (built from the Go module proxy) in the same run
bench-loadgen: build bin/hey
	$(GO) run ./benchmarks/cmd/bench-loadgen -sless bin/sless -hey bin/hey

bin/hey:
	GOBIN=$(CURDIR)/bin $(GO) install github.com/rakyll/hey@v0.1.5

## bench-scenarios: the load scenarios of benchmarks/scenarios (about 12
## minutes; needs RabbitMQ and PostgreSQL), reports in benchmarks/reports
bench-scenarios: build
	benchmarks/scenarios/run.sh

## bench-cluster: on the one-node cluster, cold starts per runtime against
## a Deployment scaled by hand, warm throughput through the activator against
## the pod's IP, and sless deploy of the samples (benchmarks/RESULTS.md)
bench-cluster: cluster deploy
	$(GO) run ./benchmarks/cmd/bench-cluster

## bench-knative: the load comparison with Knative's queue-proxy beside sless's
bench-knative: build bin/knative/queue
	$(GO) run ./benchmarks/cmd/bench-requestpath -sless bin/sless -knative bin/knative/queue -rounds 3

## bench-grpc: gRPC calls direct, through a relay, the hops and Knative's queue-proxy
bench-grpc: build bin/knative/queue
	$(GO) run ./benchmarks/cmd/bench-grpc -sless bin/sless -knative bin/knative/queue -rounds 3 -duration 8s

bin/knative/queue: hack/knative/go.mod
	cd hack/knative && $(GO) build -o $(CURDIR)/$@ knative.dev/serving/cmd/queue

## generate: deepcopy functions and the CRD, from the markers in apis/, the
## controller's ClusterRole, from the markers in controller/, the metrics
## page, from the components' registries, and the Grafana dashboard
generate: $(TOOLS)/controller-gen
	$(TOOLS)/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./apis/... \
		crd output:crd:artifacts:config=config/crd/bases
	$(TOOLS)/controller-gen rbac:roleName=sless-controller paths=./controller/... \
		output:rbac:artifacts:config=config/rbac
	$(GO) run ./hack/gen-metricsdoc docs/metrics.md
	$(GO) run ./hack/gen-dashboard config/grafana/sless.json

## verify: fail when generated files are stale (changes nothing)
verify: $(TOOLS)/controller-gen
	hack/verify-generated.sh $(TOOLS)/controller-gen

## lint: gofmt, go vet and staticcheck, on sless and on the modules of its own
## inside it: the Go SDK and the samples that have a go.mod
lint: $(TOOLS)/staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:" $$unformatted >&2; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/
	$(TOOLS)/staticcheck ./...
	$(TOOLS)/staticcheck -tags e2e ./e2e/
	@# The SDK and samples with a go.mod of their own are modules apart from sless's.
	for mod in $(GO_SDK)/go.mod $$(git ls-files 'config/samples/**/go.mod'); do \
		(cd $$(dirname $$mod) && $(GO) vet ./... && $(TOOLS)/staticcheck ./...) || exit 1; \
	done

## console: uPlot, the console's chart library, copied from npm into the
## embedded assets (the pinned version of console/web/package-lock.json)
CONSOLE_VENDOR := console/assets/vendor/uPlot.iife.min.js console/assets/vendor/uPlot.min.css
console: $(CONSOLE_VENDOR)

$(CONSOLE_VENDOR) &: console/web/package.json console/web/package-lock.json
	cd console/web && npm ci --no-audit --no-fund --loglevel=error
	cp console/web/node_modules/uplot/dist/uPlot.iife.min.js console/web/node_modules/uplot/dist/uPlot.min.css console/assets/vendor/

## controlplane: kube-apiserver and etcd for envtest, built from Go modules
controlplane: $(K8S_ASSETS)/kube-apiserver $(K8S_ASSETS)/etcd

# Every Kubernetes binary, etcd too, from the versions of hack/tools/go.mod
# (the first build of each takes minutes; the Go cache keeps what they share).
$(K8S_ASSETS)/%: hack/tools/go.mod hack/tools/go.sum
	@echo "building $* from source (k8s.io/kubernetes $(K8S_VERSION), etcd $(ETCD_VERSION))"
	cd hack/tools && $(GO) build -o $@ ./$*

# The one-node test cluster's other parts: CoreDNS and the image registry,
# built from their own modules at these versions.
COREDNS_VERSION  := v1.15.0
REGISTRY_VERSION := v3.1.2
CLUSTER_TOOLS    := $(CURDIR)/bin/cluster-tools/coredns-$(COREDNS_VERSION)-registry-$(REGISTRY_VERSION)
CLUSTER_BINS     := $(addprefix $(K8S_ASSETS)/,etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl) \
	$(CLUSTER_TOOLS)/coredns $(CLUSTER_TOOLS)/registry

$(CLUSTER_TOOLS)/coredns:
	GOBIN=$(CLUSTER_TOOLS) CGO_ENABLED=0 $(GO) install -trimpath -ldflags '-s -w' github.com/coredns/coredns@$(COREDNS_VERSION)

$(CLUSTER_TOOLS)/registry:
	GOBIN=$(CLUSTER_TOOLS) CGO_ENABLED=0 $(GO) install -trimpath -ldflags '-s -w' github.com/distribution/distribution/v3/cmd/registry@$(REGISTRY_VERSION)

# KEDA's operator and metrics adapter, built by hack/keda at the version of
# the main module's KEDA, for the end-to-end tests of RabbitMQ triggers.
KEDA_VERSION := $(shell awk '$$1 == "github.com/kedacore/keda/v2" {print $$2}' hack/keda/go.mod)
KEDA_BIN     := $(CURDIR)/bin/cluster-tools/keda-$(KEDA_VERSION)

$(KEDA_BIN)/keda: hack/keda/go.mod hack/keda/go.sum
	cd hack/keda && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@ github.com/kedacore/keda/v2/cmd/operator

$(KEDA_BIN)/keda-adapter: hack/keda/go.mod hack/keda/go.sum
	cd hack/keda && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@ github.com/kedacore/keda/v2/cmd/adapter

## cluster-bins: every binary of the one-node test cluster, from Go modules
cluster-bins: $(CLUSTER_BINS) $(KEDA_BIN)/keda $(KEDA_BIN)/keda-adapter

CLUSTER_ENV      := K8S_BIN=$(K8S_ASSETS) TOOLS_BIN=$(CLUSTER_TOOLS) KEDA_BIN=$(KEDA_BIN) KEDA_VERSION=$(KEDA_VERSION)
CLUSTER_REGISTRY := 127.0.0.1:5000

## cluster: a one-node Kubernetes cluster on this machine, pods on a
## host-only bridge, a registry on $(CLUSTER_REGISTRY); the kubeconfig is
## bin/cluster/kubeconfig (hack/cluster/cluster.sh; idempotent)
cluster: cluster-bins
	$(CLUSTER_ENV) hack/cluster/cluster.sh up

## cluster-down: stop the cluster and restore what it changed on the machine
## (cluster-wipe also deletes its state: etcd, images, certificates)
cluster-down:
	$(CLUSTER_ENV) hack/cluster/cluster.sh down

cluster-wipe:
	$(CLUSTER_ENV) hack/cluster/cluster.sh wipe

## deploy: the images pushed to the cluster's registry, then sless installed
## with kubectl apply -k config/default and an image override
deploy:
	$(MAKE) images REGISTRY=$(CLUSTER_REGISTRY)/sless
	$(CLUSTER_ENV) VERSION=$(VERSION) hack/cluster/deploy.sh

tools: $(TOOLS)/controller-gen $(TOOLS)/staticcheck

$(TOOLS)/%: hack/tools/go.mod
	cd hack/tools && $(GO) build -o $@ $$($(GO) list -f '{{.ImportPath}}' tool | grep '/$*$$')

clean:
	rm -rf bin console/web/node_modules $(CONSOLE_VENDOR)
