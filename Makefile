# taloscluster build, test and lint entry points.
GO            ?= go
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN           := bin
EXAMPLES      := $(sort $(wildcard examples/*))

.PHONY: all build test lint fmt demo bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN)/taloscluster ./cmd/taloscluster

test:
	$(GO) test ./...

# lint: gofmt must report nothing, then go vet and staticcheck.
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# demo: until the simulated datacenter exists, validate every shipped
# example and print the plan of its first build.
demo: build
	@for d in $(EXAMPLES); do \
		echo "== $$d"; \
		$(BIN)/taloscluster validate -C $$d || exit 1; \
		$(BIN)/taloscluster plan --offline -C $$d || exit 1; \
	done
	@echo "The lab (a simulated Proxmox datacenter) is not there yet; converge is not available."

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	$(GO) test ./reconcile/spec -run '^$$' -fuzz FuzzLoad -fuzztime 60s

clean:
	rm -rf $(BIN)
