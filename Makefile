# taloscluster build, test and lint entry points.
GO            ?= go
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN           := bin
EXAMPLES      := $(sort $(wildcard examples/*))

.PHONY: all build test race lint fmt demo bench go-bench fuzz clean image

all: build

build:
	$(GO) build -o $(BIN)/taloscluster ./cmd/taloscluster

# test: every package, then again under the race detector the packages
# whose code runs concurrently by design and builds quickly under it: the
# agent's loop, scheduler and fleet, the report outbox, git sync. The lab
# tests mostly wait on simulated time, so four run at once per package.
# `make race` runs the whole tree under the race detector (about nine
# minutes on two cores, which a cold CI run next to the Kubernetes build
# cannot afford).
RACE_PKGS     := ./agent/... ./report/... ./reconcile/retry/... ./gitsync/...

test:
	$(GO) test -parallel 4 ./...
	$(GO) test -race $(RACE_PKGS)

race:
	$(GO) test -race ./...

# lint: gofmt must report nothing, then go vet and staticcheck.
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# demo: start the lab, converge a cluster on its simulated Proxmox, show
# status and an empty second plan; then validate and plan (offline) every
# shipped example.
demo: build
	$(GO) build -o $(BIN)/taloslab ./cmd/taloslab
	scripts/demo.sh
	@for d in $(EXAMPLES); do \
		echo "== plan --offline -C $$d (first 12 lines)"; \
		$(BIN)/taloscluster validate -C $$d || exit 1; \
		$(BIN)/taloscluster plan --offline -C $$d | head -n 12 || exit 1; \
	done

# bench: every figure beside its floor (hack/benchtable), also written to
# bench.json; docs/performance.md explains each. The replicas' idle poll
# shares its clusters through Leases on a real kube-apiserver, built into a
# cache by .ci/kube-binaries.sh the first time (about 8 minutes).
# go-bench runs every Go benchmark as it is.
bench:
	eval "$$(bash .ci/kube-binaries.sh)" && \
	export TALOSLAB_KUBE_APISERVER TALOSLAB_KUBE_CONTROLLER_MANAGER TALOSLAB_ETCD && \
	$(GO) run ./hack/benchtable -o bench.json

go-bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	$(GO) test ./reconcile/spec -run '^$$' -fuzz FuzzLoad -fuzztime 60s

clean:
	rm -rf $(BIN)

# image: the agent's container image, from the Dockerfile (docker build).
# It needs a container engine and the base images' registries, which CI
# here does not have: CI tests the manifests, not the image.
IMAGE         ?= taloscluster:dev
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

image:
	docker build --build-arg VERSION=$(IMAGE_VERSION) -t $(IMAGE) .
