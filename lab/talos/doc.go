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
// client can reach every node of a cluster through one endpoint ("nodes"
// only for the services apid fans out: MachineService, ClusterService and
// the like, not COSI or the image and lifecycle services).
//
// Each node also serves the COSI State API (cosi.resource.State, the
// machinery client's client.COSI) for Get of its machine config: resource
// MachineConfigs.config.talos.dev in namespace "config", ID "v1alpha1" for
// the running config and "persistent" for the config written to STATE in
// the current boot, with metadata as machined's state holds it. The type is
// sensitive, so only os:admin reads it, as Talos's COSI access policy
// requires; other resource types and State methods answer Unimplemented.
//
// The control planes of a cluster whose configs carry a Layer2VIPConfig
// elect a holder of each VIP like Talos's VIP operator does through etcd;
// NodeState.VIPs and World.VIPHolder tell who holds it now.
//
// The lifecycle is simulated with short delays: boot, install, reboot,
// upgrade (to the installer image's version and schematic), reset, power
// off. Every boot draws a new boot ID, which Read of
// /proc/sys/kernel/random/boot_id answers (World.BootID). The streaming
// upgrade (LifecycleService.Upgrade) needs its installer pulled first
// (ImageService.Pull) into the containerd store it names (World.Images),
// and a live change of .machine.kubelet restarts the kubelet service. A graceful reset runs Talos's order: its Node is cordoned and
// drained (through Hooks), the kubelet stopped, etcd left, the disks
// wiped; World.Steps records these steps. Each cluster has one etcd
// membership that changes only as etcd's reconfiguration checks allow and
// keeps stable member IDs: control planes join as learners, one at a time,
// and their node promotes them; World.EtcdHistory records every change.
// Hooks tell the rest of the lab when a cluster is bootstrapped, when its
// Kubernetes API endpoint is served (while a control plane holds its VIP),
// when kubelets register (only then) and stop, and let it cordon and drain
// Nodes for Talos. Faults (a node that never boots, one that accepts
// restarts and never goes down, failing resets, a stuck
// etcd member, failing calls, latency, upgrade rollbacks) and an ordered
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
// ReadNoCloudISO reads a VM's config ISO the way Talos's nocloud platform
// finds and reads it (the CD labelled cidata or CIDATA, its user-data), so
// that the rest of the lab boots nodes from what a real machine would see.
//
// Where the simulation simplifies: error texts of etcd and dialling are
// modelled on the real ones but not byte-exact; streams cannot fan out to
// several nodes at once; nodes have no files, so Read answers NotFound for
// every path that is not one of the few directories it knows (as real
// Talos 1.13 does for /system/state/config.yaml, which it never mounts).
// ApplyConfiguration follows the node's Talos version: 1.13's
// CanApplyImmediate rule (with a reboot in AUTO when it fails), 1.14's
// always-live applies. A first configured
// boot is the boot after the install, so the "persistent" MachineConfig is
// absent in it (a machine booting a preinstalled disk image from user data
// would have it). COSI resource types the lab does not model answer
// Unimplemented, where Talos serves them or answers PermissionDenied for an
// unregistered type. A VIP moves as soon as its holder stops campaigning:
// Talos waits for the holder's etcd session to expire (up to a minute)
// when the holder is cut off rather than shut down.
package talos
