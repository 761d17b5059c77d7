// Package talos is a simulator of the subset of the Talos API the engine
// uses: every simulated node is a real gRPC server on its own loopback
// address (IP:50000) that the production machinery client
// (github.com/siderolabs/talos/pkg/machinery/client) talks to unchanged,
// over TLS issued from the cluster's own machine CA.
//
// A World holds the nodes and the clusters they form. A node boots from the
// user data its provider gave it: empty user data brings it up in
// maintenance mode (self-signed TLS, no client certificate, only
// ApplyConfiguration and read-only calls answer), a machine config brings it
// up configured (mutual TLS against machine.ca, role-based access from the
// client certificate's organisations). Configured nodes proxy calls to the
// nodes named in the "node"/"nodes" gRPC metadata like apid does, so a
// client can reach every node of a cluster through one endpoint.
//
// The lifecycle is simulated with short delays: boot, install, reboot,
// upgrade (to the installer image's version and schematic), reset (graceful
// resets leave etcd first), power off. Each cluster has one etcd membership
// that changes only with a functioning majority and keeps stable member IDs.
// Hooks tell the rest of the lab when a cluster is bootstrapped and when
// nodes register with or leave Kubernetes, so that a Kubernetes emulator can
// follow. Faults (a node that never boots, failing resets, a stuck etcd
// member, failing calls, latency, upgrade rollbacks) and an ordered
// operation log serve tests.
//
// Only loopback addresses (127.0.0.0/8) are accepted.
//
// Typical use:
//
//	w := talos.NewWorld(talos.Options{Hooks: kube})
//	defer w.Close()
//	_ = w.Boot(ctx, netip.MustParseAddr("127.77.1.11"), controlPlaneConfig)
//	// ... wait until w.Node(addr) reports Up, then talk to 127.77.1.11:50000
//	// with client.New(ctx, client.WithConfig(talosconfig), ...).
//
// Where the simulation simplifies: error texts of etcd and dialling are
// modelled on the real ones but not byte-exact; streams cannot fan out to
// several nodes at once; a Kubeconfig is served only after the bootstrap;
// changes to .machine.install need a reboot (real Talos 1.13 applies them
// live, for the next upgrade); kubelets register whenever their cluster is
// bootstrapped, whether or not a control plane is up.
package talos
