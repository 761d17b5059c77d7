package kube_test

import (
	"github.com/taloscluster/taloscluster/lab/kube/realkube"
	"testing"
)

// TestConformanceRealServer runs the conformance cases against etcd,
// kube-apiserver and kube-controller-manager (only its disruption
// controller, which computes the budgets' status; kube-apiserver does not).
// There is no kubelet and no scheduler: the fixtures create nodes and bound
// pods through the API and write their status as a kubelet would.
func TestConformanceRealServer(t *testing.T) {
	t.Parallel()
	cp := realkube.Start(t, realkube.Options{Controllers: []string{"disruption"}})
	runConformance(t, backend{name: "kube-apiserver", admin: cp.Admin, caCert: cp.CACert, caKey: cp.CAKey, version: conformanceVersion})
}
