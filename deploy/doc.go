// Package deploy holds the agent's Kubernetes manifests (a kustomize base
// and an example overlay), its Prometheus alerts with their unit tests, and
// its Grafana dashboard; it has no Go code of its own. Its tests render the
// overlay with the kustomize API and check it: the Deployment's security
// settings, that the agent's configuration matches the mounts, a
// server-side dry-run apply to a real kube-apiserver, and promtool's checks
// of the rules and of the metrics the agent exports.
package deploy
