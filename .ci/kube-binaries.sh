#!/usr/bin/env bash
# Builds the kube-apiserver, kube-controller-manager and etcd binaries that
# the lab/kube conformance test compares the Kubernetes API emulator against,
# from the module in hack/kube-binaries, into a cache directory keyed by the
# pinned versions. A build that is already in the cache is not repeated.
#
# Usage: eval "$(bash .ci/kube-binaries.sh)"
#
# Progress goes to stderr; stdout is only the export lines:
#   export TALOSLAB_KUBE_APISERVER=...
#   export TALOSLAB_KUBE_CONTROLLER_MANAGER=...
#   export TALOSLAB_ETCD=...
#
# A cold build on a 2-core machine takes about a minute for etcd, five for
# kube-apiserver and a few more for kube-controller-manager, which shares
# most of kube-apiserver's packages.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/hack/kube-binaries"
cache="${TALOSLAB_BIN_CACHE:-$HOME/.cache/taloscluster/bin}"

# The versions pinned in hack/kube-binaries/go.mod.
modversion() {
	(cd "$mod" && GOWORK=off GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$1")
}
kube_version="$(modversion k8s.io/kubernetes)"
etcd_version="$(modversion go.etcd.io/etcd/server/v3)"

apiserver="$cache/kubernetes-$kube_version/kube-apiserver"
controller="$cache/kubernetes-$kube_version/kube-controller-manager"
etcd="$cache/etcd-$etcd_version/etcd"

build() { # build OUTPUT PACKAGE [LDFLAGS]
	local out="$1" pkg="$2" ldflags="${3:-}"
	if [[ -x "$out" ]]; then
		echo "kube-binaries: $out is cached" >&2
		return
	fi
	mkdir -p "$(dirname "$out")"
	echo "kube-binaries: building $pkg" >&2
	local start=$SECONDS
	(cd "$mod" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 \
		go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
	mv "$out.tmp" "$out"
	echo "kube-binaries: built $out in $((SECONDS - start))s" >&2
}

# kube-apiserver reports its version from these variables, as a release
# build sets them.
minor="${kube_version#v1.}"
minor="${minor%%.*}"
kube_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
	kube_ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

build "$etcd" go.etcd.io/etcd/server/v3
build "$apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build "$controller" k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"

printf 'export TALOSLAB_KUBE_APISERVER=%q\n' "$apiserver"
printf 'export TALOSLAB_KUBE_CONTROLLER_MANAGER=%q\n' "$controller"
printf 'export TALOSLAB_ETCD=%q\n' "$etcd"
