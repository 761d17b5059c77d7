package plan

// ResourceKind names the kind of thing a Change touches. Its value is the
// stable string used in the JSON form of a plan.
type ResourceKind string

// Resource kinds.
const (
	// KindImage is the shared Talos boot image or ISO.
	KindImage ResourceKind = "image"
	// KindTalosSecrets is talossecrets.yaml, the cluster's identity.
	KindTalosSecrets ResourceKind = "talossecrets"
	// KindTalosconfig is the talosconfig client file.
	KindTalosconfig ResourceKind = "talosconfig"
	// KindResourcePool is the Proxmox resource pool holding the cluster's VMs.
	KindResourcePool ResourceKind = "resource-pool"
	// KindSDNZone is a Proxmox SDN zone managed for the cluster.
	KindSDNZone ResourceKind = "sdn-zone"
	// KindVNet is a Proxmox SDN VNet managed for the cluster.
	KindVNet ResourceKind = "vnet"
	// KindNetwork is an OpenStack network.
	KindNetwork ResourceKind = "network"
	// KindSubnet is an OpenStack subnet or a Proxmox SDN subnet.
	KindSubnet ResourceKind = "subnet"
	// KindRouter is an OpenStack router.
	KindRouter ResourceKind = "router"
	// KindSecurityGroup is an OpenStack security group.
	KindSecurityGroup ResourceKind = "security-group"
	// KindSecurityRule is one rule of an OpenStack security group.
	KindSecurityRule ResourceKind = "security-rule"
	// KindPort is an OpenStack port, such as the API or ingress VIP port.
	KindPort ResourceKind = "port"
	// KindFloatingIP is an OpenStack floating IP.
	KindFloatingIP ResourceKind = "floating-ip"
	// KindFirewallOptions is the Proxmox firewall options of the cluster's
	// VMs (enable, default policies).
	KindFirewallOptions ResourceKind = "firewall-options"
	// KindFirewallRule is one Proxmox firewall rule.
	KindFirewallRule ResourceKind = "firewall-rule"
	// KindVIP is the shared Kubernetes API address the control planes
	// elect among themselves (a Layer-2 VIP).
	KindVIP ResourceKind = "vip"
	// KindCIData is the per-VM config ISO a Proxmox machine boots with.
	KindCIData ResourceKind = "cidata"
	// KindMachine is a node: a VM, an OpenStack server or a metal machine.
	KindMachine ResourceKind = "machine"
	// KindNode is a Kubernetes Node object, named like its machine.
	KindNode ResourceKind = "node"
	// KindEtcdMember is an etcd member, named by the hostname it was
	// added with.
	KindEtcdMember ResourceKind = "etcd-member"
	// KindCluster is the cluster as a whole, for cluster-wide operations
	// such as a Kubernetes upgrade.
	KindCluster ResourceKind = "cluster"
	// KindMachineConfigs are the machine configs of the machines a run
	// creates, made in memory once the API endpoint is known.
	KindMachineConfigs ResourceKind = "machine-configs"
	// KindKubeconfig is the kubeconfig client file.
	KindKubeconfig ResourceKind = "kubeconfig"
	// KindPlugin is a configured plugin's converge hook.
	KindPlugin ResourceKind = "plugin"
)

// kinds lists every known kind in sort order.
var kinds = []ResourceKind{
	KindImage,
	KindTalosSecrets,
	KindTalosconfig,
	KindResourcePool,
	KindSDNZone,
	KindVNet,
	KindNetwork,
	KindSubnet,
	KindRouter,
	KindSecurityGroup,
	KindSecurityRule,
	KindPort,
	KindFloatingIP,
	KindFirewallOptions,
	KindFirewallRule,
	KindVIP,
	KindCIData,
	KindMachineConfigs,
	KindMachine,
	KindNode,
	KindEtcdMember,
	KindCluster,
	KindKubeconfig,
	KindPlugin,
}

// Kinds returns every known resource kind, in the order a sorted plan lists
// them within a phase: roughly the order in which a first build needs them.
func Kinds() []ResourceKind {
	return append([]ResourceKind(nil), kinds...)
}

// Valid reports whether k is one of the known kinds.
func (k ResourceKind) Valid() bool {
	return indexOf(kinds, k) < len(kinds)
}

// CompareKinds orders kinds by their position in Kinds. Unknown kinds sort
// after every known one, by name.
func CompareKinds(a, b ResourceKind) int {
	return compareOrdered(kinds, a, b)
}
