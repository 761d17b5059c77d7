package spec_test

import (
	"testing"
)

// TestRules has one case per rule of the cluster.yaml reference (section 4),
// each with a valid and an invalid variant where the rule has both.
func TestRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		base   func() tree
		mutate func(tree)
		files  map[string]string
		want   outcome
	}{
		// Valid bases.
		{name: "proxmox bridge valid", base: proxmoxBase},
		{name: "proxmox external valid", base: externalBase},
		{name: "proxmox sdn valid", base: sdnBase},
		{name: "openstack valid", base: openstackBase},

		// 1. file shape.
		{name: "1 cluster.yaml not a mapping", base: proxmoxBase, files: map[string]string{"cluster.yaml": "- a\n- b\n"}, want: outcome{errText: "must be a YAML mapping"}},
		{name: "1 cluster.yaml unparsable", base: proxmoxBase, files: map[string]string{"cluster.yaml": "name: [unclosed\n"}, want: outcome{errText: "not valid YAML"}},
		{name: "1 include not a mapping", base: proxmoxBase, files: map[string]string{"secrets.yaml": "- x\n"}, want: outcome{errText: "must be a YAML mapping"}},

		// 2. unknown top-level keys, plugin sections accepted.
		{name: "2 unknown top-level key", base: proxmoxBase, mutate: func(t tree) { t.set("bogus", 1).set("another", 2) }, want: outcome{errText: "unknown key(s): another, bogus"}},
		{name: "2 plugin section accepted", base: proxmoxBase, mutate: func(t tree) { t.set("rancher", map[string]any{"admins": []any{"alice"}}) }},

		// 3. include rules.
		{name: "3 include not a list", base: proxmoxBase, mutate: func(t tree) { t.set("include", "secrets.yaml") }, want: outcome{errKey: "include", errText: "include must be a list of file names"}},
		{name: "3 include empty entry", base: proxmoxBase, mutate: func(t tree) { t.set("include", []any{"secrets.yaml", ""}) }, want: outcome{errKey: "include", errText: "list of file names"}},
		{name: "3 include absolute", base: proxmoxBase, mutate: func(t tree) { t.set("include", []any{"secrets.yaml", "/etc/passwd"}) }, want: outcome{errKey: "include", errText: "must be a path inside the cluster directory"}},
		{name: "3 include outside", base: proxmoxBase, mutate: func(t tree) { t.set("include", []any{"secrets.yaml", "../x.yaml"}) }, want: outcome{errKey: "include", errText: "must be a path inside the cluster directory"}},
		{name: "3 include cluster.yaml", base: proxmoxBase, mutate: func(t tree) { t.set("include", []any{"secrets.yaml", "cluster.yaml"}) }, want: outcome{errKey: "include", errText: "cluster.yaml is the cluster file itself"}},
		{name: "3 include twice", base: proxmoxBase, mutate: func(t tree) { t.set("include", []any{"secrets.yaml", "./secrets.yaml"}) }, want: outcome{errKey: "include", errText: "include lists ./secrets.yaml twice"}},
		{name: "3 include missing", base: proxmoxBase, mutate: func(t tree) { t.set("include", []any{"secrets.yaml", "metal.yaml"}) }, want: outcome{errKey: "include", errText: "include metal.yaml is missing"}},
		{name: "3 include not a file", base: proxmoxBase, mutate: func(t tree) { t.set("include", []any{"secrets.yaml", "sub"}) }, files: map[string]string{"sub/x": "y"}, want: outcome{errKey: "include", errText: "include sub is not a file"}},
		{name: "3 nested include", base: proxmoxBase, files: map[string]string{"secrets.yaml": "include: [x.yaml]\n"}, want: outcome{errKey: "include", errText: "cannot include"}},
		{name: "3 include unknown key", base: proxmoxBase, files: map[string]string{"secrets.yaml": "bogus: 1\n"}, want: outcome{errText: "unknown key(s): bogus"}},
		{name: "3 value set in two files", base: proxmoxBase, mutate: func(t tree) { t.set("tags", map[string]any{"team": "a"}) }, files: map[string]string{"secrets.yaml": "tags:\n  team: b\n"}, want: outcome{errKey: "tags.team", errText: "tags.team is set in both cluster.yaml and secrets.yaml"}},
		{name: "3 mappings merge", base: proxmoxBase, mutate: func(t tree) { t.set("tags", map[string]any{"team": "a"}) }, files: map[string]string{"secrets.yaml": "tags:\n  env: b\nproxmox:\n  token_id: x@pve!y\n"}},
		{name: "3 null adds nothing", base: proxmoxBase, files: map[string]string{"secrets.yaml": "name: ~\ntailscale:\n"}},

		// 4. secrets.yaml not listed.
		{name: "4 secrets.yaml not included", base: proxmoxBase, mutate: func(t tree) { t.del("include") }, want: outcome{errKey: "include", errText: "no longer merged automatically"}},

		// 5. moved keys.
		{name: "5 network.cidr moved", base: proxmoxBase, mutate: func(t tree) { t.set("network.cidr", "10.0.0.0/24") }, want: outcome{errKey: "network.cidr", errText: "network.cidr has moved to network.cluster.cidr"}},
		{name: "5 proxmox external vlan moved", base: externalBase, mutate: func(t tree) { t.set("proxmox.network.external.vlan", 100) }, want: outcome{errKey: "proxmox.network.external.vlan", errText: "has moved to network.external.vlan"}},
		{name: "5 proxmox cluster kubeapi_vip moved", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.network.cluster.kubeapi_vip", "192.168.20.10") }, want: outcome{errText: "proxmox.network.cluster.kubeapi_vip has moved to network.cluster.kubeapi_vip"}},

		// 6. unknown keys in sections.
		{name: "6 unknown talos key", base: proxmoxBase, mutate: func(t tree) { t.set("talos.foo", 1) }, want: outcome{errKey: "talos", errText: "talos: unknown key(s): foo"}},
		{name: "6 unknown kubernetes key", base: proxmoxBase, mutate: func(t tree) { t.set("kubernetes.foo", 1) }, want: outcome{errText: "kubernetes: unknown key(s): foo"}},
		{name: "6 unknown network key", base: proxmoxBase, mutate: func(t tree) { t.set("network.foo", 1) }, want: outcome{errText: "network: unknown key(s): foo"}},
		{name: "6 unknown pool key", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.foo", 1) }, want: outcome{errKey: "workers.worker", errText: "unknown key(s): foo"}},
		{name: "6 unknown sdn key", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.sdn.foo", 1) }, want: outcome{errText: "proxmox.network.cluster.sdn: unknown key(s): foo"}},
		{name: "6 unknown tailscale key", base: proxmoxBase, mutate: func(t tree) { t.set("tailscale", map[string]any{"foo": 1}) }, want: outcome{errText: "tailscale: unknown key(s): foo"}},

		// 7. anchor/ingress under network.cluster.
		{name: "7 anchor_cidr under cluster", base: proxmoxBase, mutate: func(t tree) { t.set("network.cluster.anchor_cidr", "169.254.0.0/20") }, want: outcome{errKey: "network.cluster.anchor_cidr", errText: "set them under network.external"}},

		// 8. L2 rules.
		{name: "8 cidr not ipv4", base: proxmoxBase, mutate: func(t tree) { t.set("network.cluster.cidr", "fd00::/64") }, want: outcome{errKey: "network.cluster.cidr"}},
		{name: "8 cluster cidr host bits", base: proxmoxBase, mutate: func(t tree) { t.set("network.cluster.cidr", "192.168.20.1/24") }, want: outcome{errKey: "network.cluster.cidr", errText: "host bits"}},
		{name: "8 external cidr host bits allowed", base: externalBase, mutate: func(t tree) { t.set("network.external.cidr", "203.0.113.5/24") }},
		{name: "8 gateway outside", base: externalBase, mutate: func(t tree) { t.set("network.external.gateway", "198.51.100.1") }, want: outcome{errKey: "network.external.gateway", errText: "network.external.gateway must be inside network.external.cidr"}},
		{name: "8 external gateway required", base: externalBase, mutate: func(t tree) { t.del("network.external.gateway") }, want: outcome{errKey: "network.external.gateway"}},
		{name: "8 vlan range", base: externalBase, mutate: func(t tree) { t.set("network.external.vlan", 5000) }, want: outcome{errKey: "network.external.vlan", errText: "must be 1-4094"}},
		{name: "8 vlan numeric string", base: externalBase, mutate: func(t tree) { t.set("network.external.vlan", "100") }},
		{name: "8 vlan bool refused", base: externalBase, mutate: func(t tree) { t.set("network.external.vlan", true) }, want: outcome{errKey: "network.external.vlan"}},
		{name: "8 null vlan dropped", base: openstackBase, mutate: func(t tree) { t.set("network.cluster.vlan", nil) }},
		{name: "8 mtu too small", base: proxmoxBase, mutate: func(t tree) { t.set("network.cluster.mtu", 1000) }, want: outcome{errKey: "network.cluster.mtu", errText: "must be 1280 or greater"}},
		{name: "8 vip outside cidr", base: proxmoxBase, mutate: func(t tree) { t.set("network.cluster.kubeapi_vip", "10.9.9.9") }, want: outcome{errKey: "network.cluster.kubeapi_vip", errText: "inside network.cluster.cidr"}},
		{name: "8 anchor outside link-local", base: externalBase, mutate: func(t tree) { t.set("network.external.anchor_cidr", "10.0.0.0/20") }, want: outcome{errKey: "network.external.anchor_cidr", errText: "anchor_cidr must be inside 169.254.0.0/16"}},
		{name: "8 anchor /24 accepted", base: externalBase, mutate: func(t tree) { t.set("network.external.anchor_cidr", "169.254.7.0/24") }},
		{name: "8 anchor required", base: externalBase, mutate: func(t tree) { t.del("network.external.anchor_cidr") }, want: outcome{errKey: "network.external.anchor_cidr"}},
		{name: "8 ingress_pool format", base: externalBase, mutate: func(t tree) { t.set("network.external.ingress_pool", "203.0.113.20") }, want: outcome{errKey: "network.external.ingress_pool", errText: "must be 'start-end'"}},
		{name: "8 ingress_pool bad start", base: externalBase, mutate: func(t tree) { t.set("network.external.ingress_pool", "x-203.0.113.29") }, want: outcome{errText: "ingress_pool start is invalid"}},
		{name: "8 ingress_pool order", base: externalBase, mutate: func(t tree) { t.set("network.external.ingress_pool", "203.0.113.29-203.0.113.20") }, want: outcome{errText: "start must be <= end"}},
		{name: "8 ingress_pool outside", base: externalBase, mutate: func(t tree) { t.set("network.external.ingress_pool", "203.0.113.20-203.0.114.29") }, want: outcome{errText: "must be inside network.external.cidr"}},
		{name: "8 vip inside ingress_pool", base: externalBase, mutate: func(t tree) { t.set("network.external.kubeapi_vip", "203.0.113.25") }, want: outcome{errKey: "network.external.kubeapi_vip", errText: "network.external.kubeapi_vip must not be inside ingress_pool"}},
		{name: "8 external overlaps cluster", base: externalBase, mutate: func(t tree) {
			t.set("network.external.cidr", "192.168.0.0/16").set("network.external.gateway", "192.168.0.1").
				set("network.external.kubeapi_vip", "192.168.1.10").set("network.external.ingress_pool", "192.168.1.20-192.168.1.29")
		}, want: outcome{errKey: "network.external.cidr", errText: "network.external.cidr must not overlap network.cluster.cidr"}},
		{name: "8 vip in both blocks", base: externalBase, mutate: func(t tree) { t.set("network.cluster.kubeapi_vip", "192.168.20.10") }, want: outcome{errText: "kubeapi_vip is set in both"}},
		{name: "8 all-null external is absent", base: proxmoxBase, mutate: func(t tree) { t.set("network.external", map[string]any{"cidr": nil}) }},

		// 9. dns and ntp.
		{name: "9 dns missing", base: proxmoxBase, mutate: func(t tree) { t.del("network.dns") }, want: outcome{errKey: "network.dns"}},
		{name: "9 dns bad entry", base: openstackBase, mutate: func(t tree) { t.set("network.dns", []any{"192.0.2.53", "dns.example"}) }, want: outcome{errKey: "network.dns", errText: "not an IP address"}},
		{name: "9 dns ipv6 ok", base: openstackBase, mutate: func(t tree) { t.set("network.dns", []any{"2001:db8::53"}) }},
		{name: "9 ntp missing", base: proxmoxBase, mutate: func(t tree) { t.del("network.ntp") }, want: outcome{errKey: "network.ntp"}},
		{name: "9 ntp empty entry", base: proxmoxBase, mutate: func(t tree) { t.set("network.ntp", []any{""}) }, want: outcome{errKey: "network.ntp"}},

		// 10. provider selection.
		{name: "10 two providers", base: proxmoxBase, mutate: func(t tree) { t.set("openstack", map[string]any{"url": "x"}) }, want: outcome{errText: "at most one VM provider section is allowed: openstack or proxmox"}},
		{name: "10 no provider", base: proxmoxBase, mutate: func(t tree) { t.del("proxmox") }, want: outcome{errText: "one provider section is required: openstack or proxmox"}},
		{name: "10 metal only", base: proxmoxBase, mutate: func(t tree) {
			t.del("proxmox").set("metal", map[string]any{"g": map[string]any{"role": "worker", "disk": "/dev/sda"}})
		}, want: outcome{errKey: "metal", errText: "a metal section requires a VM provider section"}},
		{name: "10 cross-provider secrets", base: proxmoxBase, files: map[string]string{"secrets.yaml": "openstack:\n  credential_id: x\n"}, want: outcome{errText: "at most one VM provider"}},

		// 11. provider required keys.
		{name: "11 openstack url", base: openstackBase, mutate: func(t tree) { t.del("openstack.url") }, want: outcome{errKey: "openstack.url"}},
		{name: "11 openstack az empty", base: openstackBase, mutate: func(t tree) { t.set("openstack.availability_zone", "") }, want: outcome{errKey: "openstack.availability_zone"}},
		{name: "11 openstack external_net", base: openstackBase, mutate: func(t tree) { t.del("openstack.external_net") }, want: outcome{errKey: "openstack.external_net"}},
		{name: "11 proxmox storage", base: proxmoxBase, mutate: func(t tree) { t.del("proxmox.storage") }, want: outcome{errKey: "proxmox.storage"}},
		{name: "11 proxmox iso_storage", base: proxmoxBase, mutate: func(t tree) { t.del("proxmox.iso_storage") }, want: outcome{errKey: "proxmox.iso_storage"}},
		{name: "11 proxmox cidata_storage empty", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.cidata_storage", "") }, want: outcome{errKey: "proxmox.cidata_storage"}},
		{name: "11 openstack metadata not bool", base: openstackBase, mutate: func(t tree) { t.set("openstack.metadata", "no way") }, want: outcome{errText: "openstack.metadata must be true or false"}},

		// 12. name.
		{name: "12 name regex", base: proxmoxBase, mutate: func(t tree) { t.set("name", "Edge_1") }, want: outcome{errKey: "name"}},
		{name: "12 name missing", base: proxmoxBase, mutate: func(t tree) { t.del("name") }, want: outcome{errKey: "name"}},
		{name: "12 name trailing dash", base: proxmoxBase, mutate: func(t tree) { t.set("name", "edge-") }, want: outcome{errKey: "name"}},

		// 13. versions.
		{name: "13 talos version regex", base: proxmoxBase, mutate: func(t tree) { t.set("talos.version", "latest") }, want: outcome{errKey: "talos.version"}},
		{name: "13 talos too old", base: proxmoxBase, mutate: func(t tree) { t.set("talos.version", "v1.12.6") }, want: outcome{errKey: "talos.version", errText: "must be v1.13.0 or newer"}},
		{name: "13 talos without v", base: proxmoxBase, mutate: func(t tree) { t.set("talos.version", "1.13.8") }},
		{name: "13 kubernetes unsupported", base: proxmoxBase, mutate: func(t tree) { t.set("kubernetes.version", "v1.37.0") }, want: outcome{errKey: "kubernetes.version", errText: "kubernetes.version v1.37.0 is not supported by talos.version v1.13.8, which runs kubernetes v1.31 to v1.36"}},
		{name: "13 kubernetes too old", base: proxmoxBase, mutate: func(t tree) { t.set("talos.version", "v1.14.1").set("kubernetes.version", "v1.32.0") }, want: outcome{errKey: "kubernetes.version", errText: "v1.33 to v1.37"}},
		{name: "13 unknown talos minor unchecked", base: proxmoxBase, mutate: func(t tree) { t.set("talos.version", "v1.15.0").set("kubernetes.version", "v1.40.0") }},
		{name: "13 kubernetes regex", base: proxmoxBase, mutate: func(t tree) { t.set("kubernetes.version", "1.36") }, want: outcome{errKey: "kubernetes.version"}},

		// 14. kubespan.
		{name: "14 kubespan not bool", base: proxmoxBase, mutate: func(t tree) { t.set("talos.kubespan", "true") }, want: outcome{errKey: "talos.kubespan", errText: "must be true or false"}},
		{name: "14 kubespan off with metal on another L2", base: proxmoxBase, mutate: func(t tree) {
			t.set("network.cluster.gateway", "192.168.20.1").set("metal", map[string]any{"rack": map[string]any{
				"role": "worker", "disk": "/dev/sda",
				"network":    map[string]any{"cidr": "10.50.0.0/24", "gateway": "10.50.0.1"},
				"interfaces": map[string]any{"eno1": map[string]any{"role": "cluster"}},
				"servers":    map[string]any{"m1": map[string]any{"interfaces": map[string]any{"eno1": map[string]any{"ip": "10.50.0.5"}}}},
			}})
		}, want: outcome{errKey: "talos.kubespan", errText: "must be true"}},

		// 15. metal.
		{name: "15 metal valid", base: proxmoxBase, mutate: func(t tree) { t.set("metal", metalGroup()) }},
		{name: "15 metal role", base: proxmoxBase, mutate: func(t tree) { t.set("metal", metalGroup()).set("metal.rack.role", "master") }, want: outcome{errKey: "metal.rack.role"}},
		{name: "15 metal no disk", base: proxmoxBase, mutate: func(t tree) { t.set("metal", metalGroup()).del("metal.rack.disk") }, want: outcome{errKey: "disk"}},
		{name: "15 metal boot_timeout string", base: proxmoxBase, mutate: func(t tree) { t.set("metal", metalGroup()).set("metal.rack.boot_timeout", "600") }, want: outcome{errKey: "metal.rack.boot_timeout"}},
		{name: "15 metal redfish needs bmc", base: proxmoxBase, mutate: func(t tree) { t.set("metal", metalGroup()).set("metal.rack.redfish", true) }, want: outcome{errKey: "bmc"}},
		{name: "15 metal redfish placeholder", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).set("metal.rack.redfish", true).set("metal.rack.bmc", map[string]any{"ip": "192.0.2.9", "username": "admin", "password": "CHANGE-ME"})
		}, want: outcome{errKey: "bmc.password", errText: "placeholder"}},
		{name: "15 metal server name", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).set("metal.rack.servers.Bad_Name", map[string]any{"interfaces": map[string]any{"eno1": map[string]any{"ip": "192.168.20.51"}}})
		}, want: outcome{errText: "Bad_Name"}},
		{name: "15 metal duplicate server", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup())
			g2 := metalGroup()["rack"]
			t.set("metal.rack2", g2)
		}, want: outcome{errText: "metal server 'm1' is defined in more than one group"}},
		{name: "15 metal no cluster ip", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).set("metal.rack.servers.m1", map[string]any{})
		}, want: outcome{errText: "needs an ip"}},
		{name: "15 metal ip equals vip", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).set("metal.rack.servers.m1.interfaces.eno1.ip", "192.168.20.10")
		}, want: outcome{errText: "must not equal the kubeapi_vip"}},
		{name: "15 metal ip outside", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).set("metal.rack.servers.m1.interfaces.eno1.ip", "10.1.1.1")
		}, want: outcome{errText: "must be inside"}},
		{name: "15 metal needs cluster gateway", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).del("network.cluster.gateway")
		}, want: outcome{errKey: "network.cluster.gateway"}},
		{name: "15 metal vlan on cluster interface", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).set("metal.rack.interfaces.eno1.vlan", 5)
		}, want: outcome{errText: "only valid on an external-role interface"}},
		{name: "15 metal kubeapi_vip in network", base: proxmoxBase, mutate: func(t tree) {
			t.set("metal", metalGroup()).set("metal.rack.network", map[string]any{"cidr": "192.168.20.0/24", "gateway": "192.168.20.1", "kubeapi_vip": "192.168.20.10"})
		}, want: outcome{errKey: "metal.rack.network.kubeapi_vip"}},

		// 16. pools.
		{name: "16 worker pool named controlplane", base: proxmoxBase, mutate: func(t tree) {
			t.set("workers.controlplane", map[string]any{"count": 1, "cores": 1, "memory": 1, "disk": 1})
		}, want: outcome{errKey: "workers.controlplane", errText: "reserved"}},
		{name: "16 pool name regex", base: proxmoxBase, mutate: func(t tree) {
			t.set("workers.GPU", map[string]any{"count": 1, "cores": 1, "memory": 1, "disk": 1})
		}, want: outcome{errKey: "workers.GPU", errText: "pool name 'GPU'"}},
		{name: "16 pool not mapping", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker", 3) }, want: outcome{errText: "pool 'worker' must be a mapping"}},
		{name: "16 proxmox pool missing cores", base: proxmoxBase, mutate: func(t tree) { t.del("workers.worker.cores") }, want: outcome{errKey: "workers.worker.cores", errText: "pool 'worker' missing 'cores'"}},
		{name: "16 openstack pool missing flavor", base: openstackBase, mutate: func(t tree) { t.del("controlplane.flavor") }, want: outcome{errText: "pool 'controlplane' missing 'flavor'"}},
		{name: "16 openstack ignores cores", base: openstackBase, mutate: func(t tree) { t.set("controlplane.cores", 2) }},
		{name: "16 proxmox accepts flavor", base: proxmoxBase, mutate: func(t tree) { t.set("controlplane.flavor", "x") }},
		{name: "16 controlplane count zero", base: proxmoxBase, mutate: func(t tree) { t.set("controlplane.count", 0) }, want: outcome{errKey: "controlplane.count"}},
		{name: "16 worker count zero ok", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.count", 0) }},
		{name: "16 worker count negative", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.count", -1) }, want: outcome{errKey: "workers.worker.count"}},
		{name: "16 count numeric string", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.count", "3") }},
		{name: "16 count bool refused", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.count", true) }, want: outcome{errKey: "workers.worker.count"}},
		{name: "16 empty flavor", base: openstackBase, mutate: func(t tree) { t.set("workers.worker.flavor", "") }, want: outcome{errKey: "workers.worker.flavor"}},
		{name: "16 memory zero", base: proxmoxBase, mutate: func(t tree) { t.set("controlplane.memory", 0) }, want: outcome{errText: "pool 'controlplane': 'memory' must be greater than zero"}},
		{name: "16 disk negative", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.disk", -5) }, want: outcome{errText: "'disk' must be greater than zero"}},
		{name: "16 node not in proxmox.nodes", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.node", "pve9") }, want: outcome{errKey: "workers.worker.node", errText: "pve9"}},
		{name: "16 node empty", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.node", "") }, want: outcome{errKey: "workers.worker.node"}},
		{name: "16 extensions not list", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.extensions", "siderolabs/iscsi-tools") }, want: outcome{errKey: "workers.worker.extensions"}},
		{name: "16 config_patches empty entry", base: proxmoxBase, mutate: func(t tree) { t.set("talos.config_patches", []any{""}) }, want: outcome{errKey: "talos.config_patches"}},
		{name: "16 tags not mapping", base: proxmoxBase, mutate: func(t tree) { t.set("workers.worker.tags", []any{"a"}) }, want: outcome{errKey: "workers.worker.tags"}},
		{name: "16 hostname too long", base: proxmoxBase, mutate: func(t tree) {
			t.set("name", "a-very-long-cluster-name-that-goes-on").set("workers.worker-pool-with-a-long-name", map[string]any{"count": 100, "cores": 1, "memory": 1, "disk": 1})
		}, want: outcome{errText: "longer than 63 characters"}},

		// 17. OpenStack-incompatible keys.
		{name: "17 openstack external", base: openstackBase, mutate: func(t tree) {
			t.set("network.external", map[string]any{"cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "anchor_cidr": "169.254.0.0/20"})
		}, want: outcome{errKey: "network.external", errText: "network.external is not valid with openstack"}},
		{name: "17 openstack vip", base: openstackBase, mutate: func(t tree) { t.set("network.cluster.kubeapi_vip", "192.168.100.10") }, want: outcome{errText: "network.cluster.kubeapi_vip is not valid with openstack"}},
		{name: "17 openstack vlan", base: openstackBase, mutate: func(t tree) { t.set("network.cluster.vlan", 10) }, want: outcome{errText: "network.cluster.vlan is not valid with openstack"}},

		// 18. Proxmox rules.
		{name: "18 placement strategy", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.placement_strategy", "pack") }, want: outcome{errKey: "proxmox.placement_strategy"}},
		{name: "18 tls_verify empty", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.tls_verify", "") }, want: outcome{errKey: "proxmox.tls_verify"}},
		{name: "18 tls_verify number", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.tls_verify", 1) }, want: outcome{errKey: "proxmox.tls_verify"}},
		{name: "18 tls_verify path", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.tls_verify", "ca.pem") }},
		{name: "18 no bridge/vnet/sdn", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.network.cluster", map[string]any{}) }, want: outcome{errKey: "proxmox.network.cluster", errText: "exactly one of bridge, vnet or sdn"}},
		{name: "18 bridge and vnet", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.network.cluster.vnet", "v1") }, want: outcome{errKey: "proxmox.network.cluster"}},
		{name: "18 sdn with bridge", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.bridge", "vmbr0") }, want: outcome{errKey: "proxmox.network.cluster.sdn"}},
		{name: "18 sdn with vlan", base: sdnBase, mutate: func(t tree) { t.set("network.cluster.vlan", 10) }, want: outcome{errKey: "network.cluster.vlan"}},
		{name: "18 sdn id", base: sdnBase, mutate: func(t tree) { t.set("name", "edge-cluster") }, want: outcome{errKey: "proxmox.network.cluster.sdn.name", errText: "edge-cluster"}},
		{name: "18 sdn name fixes id", base: sdnBase, mutate: func(t tree) { t.set("name", "edge-cluster").set("proxmox.network.cluster.sdn.name", "edgec") }},
		{name: "18 sdn zone", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.sdn.zone", "vxlan") }, want: outcome{errText: "only supports 'evpn'"}},
		{name: "18 sdn asn", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.sdn.asn", 4294967296) }, want: outcome{errKey: "proxmox.network.cluster.sdn.asn"}},
		{name: "18 sdn tag equals vrf_tag", base: sdnBase, mutate: func(t tree) {
			t.set("proxmox.network.cluster.sdn.vrf_tag", 500).set("proxmox.network.cluster.sdn.tag", 500)
		}, want: outcome{errKey: "proxmox.network.cluster.sdn.tag"}},
		{name: "18 sdn derived tag overflow", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.sdn.vrf_tag", 16777215) }, want: outcome{errKey: "proxmox.network.cluster.sdn.tag"}},
		{name: "18 sdn mtu below cluster", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.sdn.mtu", 1400) }, want: outcome{errText: "proxmox.network.cluster.sdn.mtu must be 1500 or higher"}},
		{name: "18 sdn nodes missing proxmox node", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.sdn.nodes", []any{"pve1", "pve2"}) }, want: outcome{errText: "sdn.nodes must include every proxmox.nodes entry: pve3"}},
		{name: "18 sdn exit nodes outside nodes", base: sdnBase, mutate: func(t tree) {
			t.set("proxmox.network.cluster.sdn.nodes", []any{"pve1", "pve2", "pve3"}).set("proxmox.network.cluster.sdn.exit_nodes", []any{"pve4"})
		}, want: outcome{errKey: "proxmox.network.cluster.sdn.exit_nodes", errText: "pve4"}},
		{name: "18 sdn primary exit", base: sdnBase, mutate: func(t tree) { t.set("proxmox.network.cluster.sdn.primary_exit_node", "pve9") }, want: outcome{errKey: "primary_exit_node"}},
		{name: "18 sdn dns required", base: sdnBase, mutate: func(t tree) { t.set("network.dns", []any{}) }, want: outcome{errKey: "network.dns"}},
		{name: "18 sdn vip is gateway", base: sdnBase, mutate: func(t tree) { t.set("network.cluster.kubeapi_vip", "192.168.20.1") }, want: outcome{errText: "collides with the SDN anycast gateway"}},
		{name: "18 sdn vip is node address", base: sdnBase, mutate: func(t tree) { t.set("network.cluster.kubeapi_vip", "192.168.20.11") }, want: outcome{errText: "collides with the static address of edge-controlplane-01"}},
		{name: "18 sdn vip in layout", base: sdnBase, mutate: func(t tree) { t.set("network.cluster.kubeapi_vip", "192.168.20.100") }, want: outcome{errText: "sits inside the SDN static address layout"}},
		{name: "18 sdn vip past layout ok", base: sdnBase, mutate: func(t tree) { t.set("network.cluster.kubeapi_vip", "192.168.20.200") }},
		{name: "18 external bridge without block", base: proxmoxBase, mutate: func(t tree) { t.set("proxmox.network.external", map[string]any{"bridge": "vmbr1"}) }, want: outcome{errKey: "proxmox.network.external"}},
		{name: "18 external block without bridge", base: externalBase, mutate: func(t tree) { t.del("proxmox.network.external") }, want: outcome{errKey: "network.external"}},
		{name: "18 external bridge empty", base: externalBase, mutate: func(t tree) { t.set("proxmox.network.external.bridge", "") }, want: outcome{errKey: "proxmox.network.external.bridge"}},
		{name: "18 no vip", base: proxmoxBase, mutate: func(t tree) { t.del("network.cluster.kubeapi_vip") }, want: outcome{errKey: "kubeapi_vip"}},

		// 19. tailscale.
		{name: "19 login_server http", base: proxmoxBase, mutate: func(t tree) { t.set("tailscale.login_server", "http://hs.example") }, want: outcome{errKey: "tailscale.login_server", errText: "https://"}},
		{name: "19 login_server not string", base: proxmoxBase, mutate: func(t tree) { t.set("tailscale.login_server", 5) }, want: outcome{errKey: "tailscale.login_server"}},
		{name: "19 tailscale empty ok", base: proxmoxBase, mutate: func(t tree) { t.set("tailscale", map[string]any{}) }},

		// 20. security.
		{name: "20 security entry not mapping", base: proxmoxBase, mutate: func(t tree) { t.set("security.kubernetes", "100.64.0.0/10") }, want: outcome{errKey: "security.kubernetes"}},
		{name: "20 security unknown long keys", base: proxmoxBase, mutate: func(t tree) {
			t.set("security.metrics", map[string]any{"port": 9100, "hosts": map[string]any{}, "proto": "udp"})
		}, want: outcome{errText: "security.metrics has unknown keys: proto"}},
		{name: "20 security missing port", base: proxmoxBase, mutate: func(t tree) { t.set("security.metrics", map[string]any{"mon": "10.0.0.0/8"}) }, want: outcome{errText: "security.metrics requires an explicit 'port'"}},
		{name: "20 security port range", base: proxmoxBase, mutate: func(t tree) { t.set("security.metrics", map[string]any{"port": 0}) }, want: outcome{errText: "security.metrics.port must be 1-65535"}},
		{name: "20 https port change", base: proxmoxBase, mutate: func(t tree) { t.set("security.https", map[string]any{"port": 8443, "hosts": map[string]any{}}) }, want: outcome{errText: "security.https cannot change its port from 443 to 8443"}},
		{name: "20 invalid cidr short form", base: proxmoxBase, mutate: func(t tree) { t.set("security.kubernetes.office", "10.0.0.1/8") }, want: outcome{errText: "security.kubernetes.office has invalid CIDR '10.0.0.1/8'"}},
		{name: "20 invalid cidr long form", base: proxmoxBase, mutate: func(t tree) {
			t.set("security.metrics", map[string]any{"port": 9100, "hosts": map[string]any{"mon": "fd00::/8"}})
		}, want: outcome{errText: "security.metrics.mon has invalid CIDR"}},
		{name: "20 bare address is /32", base: proxmoxBase, mutate: func(t tree) { t.set("security.talos.admin", "198.51.100.7") }},
		{name: "20 label named hosts stays short", base: proxmoxBase, mutate: func(t tree) { t.set("security.talos.hosts", "198.51.100.7/32") }},
		{name: "20 port as numeric string", base: proxmoxBase, mutate: func(t tree) { t.set("security.metrics", map[string]any{"port": "9100"}) }},

		// 21. security names colliding as Talos rules.
		{name: "21 normalized names collide", base: proxmoxBase, mutate: func(t tree) {
			t.set("security.Node Exporter", map[string]any{"port": 9100}).set("security.node-exporter", map[string]any{"port": 9101})
		}, want: outcome{errText: "both become the Talos firewall rule security-node-exporter"}},

		// 23-26. warnings.
		{name: "23 even control planes", base: proxmoxBase, mutate: func(t tree) { t.set("controlplane.count", 2) }, want: outcome{warnKey: "controlplane.count", warnText: "even controlplane count (2), etcd needs a majority"}},
		{name: "24 single control plane", base: proxmoxBase, mutate: func(t tree) { t.set("controlplane.count", 1) }, want: outcome{warnKey: "controlplane.count", warnText: "single controlplane, no HA"}},
		{name: "25 dns on bridge", base: proxmoxBase, mutate: func(t tree) { t.set("network.dns", []any{"192.0.2.53"}) }, want: outcome{warnKey: "network.dns", warnText: "ignored on a Proxmox bridge/vnet"}},
		{name: "26 cluster overlaps services", base: openstackBase, mutate: func(t tree) { t.set("network.cluster.cidr", "10.100.0.0/16") }, want: outcome{warnKey: "network.cluster.cidr", warnText: "overlaps the kubernetes service network 10.96.0.0/12"}},
		{name: "26 cluster overlaps pods", base: openstackBase, mutate: func(t tree) { t.set("network.cluster.cidr", "10.0.0.0/8") }, want: outcome{warnKey: "network.cluster.cidr", warnText: "pod network"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := tc.base()
			if tc.mutate != nil {
				tc.mutate(tr)
			}
			dir := writeDir(t, tr, tc.files)
			check(t, dir, tc.want)
		})
	}
}

func metalGroup() map[string]any {
	return map[string]any{"rack": map[string]any{
		"role": "worker", "disk": "/dev/sda",
		"interfaces": map[string]any{"eno1": map[string]any{"role": "cluster"}},
		"servers": map[string]any{
			"m1": map[string]any{"interfaces": map[string]any{"eno1": map[string]any{"ip": "192.168.20.50"}}},
		},
	}}
}
