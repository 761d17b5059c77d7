// Package check compares a cluster's pins with the upstream releases and
// with the running cluster: what `taloscluster check` reports, and what the
// agent can run on its drift interval.
//
// For Talos (siderolabs/talos) and Kubernetes (kubernetes/kubernetes) it
// finds the pinned version, the newest patch of the pinned minor, the
// newest release the other pin allows and the newest release overall,
// counting the patch releases the pin is behind. A newer Kubernetes minor
// that the pinned Talos does not run is reported as such, never as an
// update to take. Against an observation of the running cluster
// (reconcile.Engine.Observe, which changes nothing) it compares each
// node's Talos version, kubelet version and installer image with
// cluster.yaml, lists cordoned nodes, and carries the config warnings.
// A fact that could not be read is "unknown" with its reason and makes the
// check incomplete; it is never taken for "in sync".
//
// Run does the work; Report.NeedsAttention is the exit decision of the
// command (exit 1). The JSON form of a Report is documented in
// docs/check-json.md.
package check
