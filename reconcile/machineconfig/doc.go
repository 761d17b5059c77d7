// Package machineconfig builds the Talos machine configs of a cluster with
// the Talos machinery library: the secrets bundle that is the cluster's
// identity, one config per machine (generated, then shaped by typed
// strategic-merge patches in a fixed order), the host firewall documents, the
// Image Factory schematic of each machine's installer, and redacted
// rendering and diffs for plans.
//
// The configs follow the Talos v1.13 multi-document layout: the hostname,
// time servers, link aliases, the Layer-2 VIP, KubeSpan, the host firewall
// and the tailscale extension service are separate documents beside the
// v1alpha1 machine config. Every config is checked with the machinery's own
// validation before it is returned.
package machineconfig
