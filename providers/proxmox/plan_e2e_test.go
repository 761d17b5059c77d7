package proxmox_test

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/internal/labtest"
	"github.com/taloscluster/taloscluster/lab/pve"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// steps lists a plan's executable steps as "phase domain action resource".
func steps(p *plan.Plan) []string {
	var out []string
	for _, ch := range p.Changes {
		if ch.Action != plan.ActionRefuse {
			out = append(out, ch.Step())
		}
	}
	return out
}

var stepLine = regexp.MustCompile(`\[(\d+)/(\d+)\] (\S+) (\S+) (\S+)`)

// TestPlanIsWhatConvergeRuns checks the one-planner contract on a first
// build: plan --offline and the live plan list the same steps, converge
// runs exactly the live plan's steps in order, and the lab's operation log
// shows the mutations in that order.
func TestPlanIsWhatConvergeRuns(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "exact", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	c, warns, err := spec.Load(w.dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	off, err := proxmox.Offline(c)
	if err != nil {
		t.Fatal(err)
	}
	offline, err := reconcile.OfflinePlan(c, warns, off)
	if err != nil {
		t.Fatal(err)
	}
	live, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := steps(offline), steps(live); !slices.Equal(a, b) {
		t.Fatalf("offline and live plans differ:\noffline:\n  %s\nlive:\n  %s", strings.Join(a, "\n  "), strings.Join(b, "\n  "))
	}

	e := w.engine(t)
	var out strings.Builder
	e.Progress = &out
	if err := e.Converge(ctx); err != nil {
		t.Fatalf("converge: %v\n%s", err, out.String())
	}
	var ran []string
	for _, m := range stepLine.FindAllStringSubmatch(out.String(), -1) {
		ran = append(ran, m[3]+" "+m[4]+" "+m[5])
	}
	var want []string
	for _, ch := range live.Changes {
		want = append(want, ch.Action.Symbol()+" "+string(ch.Resource.Kind)+" "+ch.Resource.Name)
	}
	if !slices.Equal(ran, want) {
		t.Fatalf("converge ran other steps than the plan:\nran:\n  %s\nplan:\n  %s", strings.Join(ran, "\n  "), strings.Join(want, "\n  "))
	}

	// The lab's own log: the pool before any VM, every VM started before
	// the bootstrap, the config ISOs removed only after it.
	var bootstrap time.Time
	for _, op := range w.lab.Talos.Log() {
		if op.Short() == "Bootstrap" && op.Err == "" {
			bootstrap = op.Time
		}
	}
	if bootstrap.IsZero() {
		t.Fatal("no successful Bootstrap in the Talos log")
	}
	var pool time.Time
	for _, op := range w.lab.PVE.Log() {
		if op.Method == http.MethodGet || op.Status >= 300 {
			continue
		}
		switch {
		case op.Name == "pool.create":
			pool = op.Time
		case op.Name == "qemu.create":
			if pool.IsZero() || op.Time.Before(pool) {
				t.Errorf("a VM was created before the pool (%s at %s)", op.Path, op.Time)
			}
			if op.Time.After(bootstrap) {
				t.Errorf("a VM was created after the bootstrap: %s", op.Path)
			}
		case op.Name == "qemu.status" && strings.HasSuffix(op.Path, "/start"):
			if op.Time.After(bootstrap) {
				t.Errorf("a VM was started after the bootstrap: %s", op.Path)
			}
		case op.Name == "storage.content.delete":
			if op.Time.Before(bootstrap) {
				t.Errorf("a volume was deleted before the bootstrap: %s", op.Path)
			}
		}
	}
}

// TestBootstrapDecidedFromEtcd interrupts a first build just before its
// bootstrap: the machines run and, as on real Talos 1.13, the control
// planes serve a kubeconfig though etcd was never bootstrapped. The next
// plan must still bootstrap (etcd has no data), and the converge must
// finish; an engine that took a served kubeconfig as proof of a bootstrap
// would skip it and never become healthy.
func TestBootstrapDecidedFromEtcd(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "halfway", 0)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := w.engine(t)
	e.Progress = cancelOn{match: "* machine", cancel: cancel, w: io.Discard}
	if err := e.Converge(ctx); err == nil {
		t.Fatal("the interrupted converge reported success")
	}
	for _, op := range w.lab.Talos.Log() {
		if op.Short() == "Bootstrap" {
			t.Fatalf("Bootstrap was called by the interrupted run: %+v", op)
		}
	}

	p, err := w.engine(t).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if p.Counts().Bootstrap != 1 || len(p.Refusals) != 0 {
		t.Fatalf("plan after an interrupted first build: %s, refusals %v; want one bootstrap", p.Summary(), p.Refusals)
	}
	if err := w.engine(t).Converge(t.Context()); err != nil {
		t.Fatalf("converge after the interruption: %v", err)
	}
	n := 0
	for _, op := range w.lab.Talos.Log() {
		if op.Short() == "Bootstrap" && op.Err == "" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d successful Bootstrap calls, want 1", n)
	}
	if p, err := w.engine(t).Plan(t.Context()); err != nil || !p.Empty() {
		t.Fatalf("plan after the converge: %v %v", p.Summary(), err)
	}
}

// cancelOn cancels a context when a progress line contains match.
type cancelOn struct {
	match  string
	cancel context.CancelFunc
	w      io.Writer
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.match) {
		c.cancel()
	}
	return c.w.Write(p)
}

// keyCase is one change of a cluster.yaml key on the converged walk
// cluster and what the plan must say about it.
type keyCase struct {
	// key is the key as spec.Keys names it (or a mapping, for a change of
	// a whole section).
	key string
	// path is the concrete path set; empty means key with its
	// placeholders filled (walkNames).
	path, value string
	// also are further paths set with it, when the key cannot change alone.
	also [][2]string
	// files are files written into the cluster directory, replacing the
	// converged one's; with files, path "-" sets no key.
	files map[string]string
	// want is "refused: <text>", "step: <text>", "warning: <text>" or
	// "error: <text>": the text must appear in a refusal, a step's
	// "action kind name", a warning, or the error planning returns.
	want string
}

// inertKey is a key whose change must leave the plan empty, and why.
type inertKey struct {
	key, value, why string
	// path is where value is set when it is not the key itself (with the
	// placeholders filled in), e.g. the section holding the key.
	path string
	// files are extra files written into the cluster directory.
	files map[string]string
}

// walkNames fill the placeholders of spec.Keys on the walk cluster.
var walkNames = strings.NewReplacer(spec.KeyPool, "worker", spec.KeyRule, "kubernetes", spec.KeyLabel, "office")

// notProxmox are the keys the Proxmox walk cannot change, by key, and why.
var notProxmox = func() map[string]string {
	const openstack = "an openstack key: a Proxmox cluster with an openstack section is refused by validation (at most one VM provider)"
	const metal = "a metal machine key: the walk adds a whole metal section (case \"metal\"), which plan warns this version does not manage"
	out := map[string]string{}
	for _, k := range []string{"url", "availability_zone", "external_net", "region", "metadata", "credential_id", "credential_secret", "tls_verify", "image_factory"} {
		out["openstack."+k] = openstack
	}
	machine := []string{"role", "redfish", "disk", "boot_timeout", "auto_join", "extensions",
		"network.cidr", "network.gateway", "network.vlan", "network.mtu",
		"interfaces.<interface>.role", "interfaces.<interface>.ip", "interfaces.<interface>.dns", "interfaces.<interface>.link_name", "interfaces.<interface>.vlan",
		"bmc.ip", "bmc.username", "bmc.password", "bmc.scheme", "bmc.tls_verify"}
	for _, k := range machine {
		out["metal.<group>."+k] = metal
		out["metal.<group>.servers.<server>."+k] = metal
	}
	return out
}()

// The lab's Proxmox API token (lab/pve's defaults), for the credential cases.
const (
	labToken  = pve.DefaultTokenID
	labSecret = pve.DefaultTokenSecret
)

// keyWalk is the walk of every key on a cluster whose network is net.
func keyWalk(name string, net netip.Prefix, pveURL string) ([]keyCase, []inertKey) {
	host := func(n int) string {
		a := net.Addr()
		for range n {
			a = a.Next()
		}
		return a.String()
	}
	patch := "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"
	external := func(extra string) string {
		return "{cidr: 198.51.100.0/24, gateway: 198.51.100.1, anchor_cidr: 169.254.32.0/20" + extra + "}"
	}
	extBridge := [][2]string{{"proxmox.network.external.bridge", "vmbr0"}}
	externalNIC := "refused: the external NIC would change"
	sdn := func(k, v string) keyCase {
		return keyCase{key: "proxmox.network.cluster.sdn." + k, path: "proxmox.network.cluster", value: "{sdn: {" + k + ": " + v + "}}",
			also: [][2]string{{"network.dns", "[192.0.2.53]"}}, want: "refused: a managed SDN cluster network (proxmox.network.cluster.sdn) is not supported yet"}
	}
	cases := []keyCase{
		{key: "name", value: name + "x", want: "refused: renaming a cluster is not supported"},
		{key: "tags", value: "{team: data}", want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "talos.version", value: "v1.13.9", want: "step: upgrade-talos machine " + name + "-controlplane-01"},
		{key: "talos.version", value: "v1.13.0", want: "refused: downgrades are not supported"},
		{key: "talos.extensions", value: "[siderolabs/iscsi-tools]", want: "step: upgrade-talos machine " + name + "-controlplane-01"},
		{key: "talos.config_patches", value: yamlString(patch), want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "talos.kubespan", value: "true", want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "kubernetes.version", value: "v1.35.0", want: "refused: kubernetes.version v1.36.1 -> v1.35.0: downgrades are not supported"},
		{key: "kubernetes.version", value: "v1.36.2", want: "step: upgrade-kubernetes machine " + name + "-controlplane-01"},
		{key: "controlplane.count", value: "5", want: "step: create machine " + name + "-controlplane-04"},
		{key: "controlplane.count", value: "1", want: "step: reset machine " + name + "-controlplane-03"},
		{key: "controlplane.count", value: "2", want: "refused: would leave two etcd members"},
		{key: "controlplane.cores", value: "3", want: "step: update machine " + name + "-controlplane-01"},
		{key: "controlplane.memory", value: "6", want: "step: update machine " + name + "-controlplane-01"},
		{key: "controlplane.disk", value: "30", want: "step: update machine " + name + "-controlplane-01"},
		{key: "controlplane.disk", value: "10", want: "refused: disk shrink"},
		{key: "controlplane.node", value: "pve2", want: "refused: placement changed"},
		{key: "controlplane.extensions", value: "[siderolabs/iscsi-tools]", want: "step: upgrade-talos machine " + name + "-controlplane-01"},
		{key: "controlplane.config_patches", value: yamlString(patch), want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "controlplane.tags", value: "{tier: gold}", want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "workers.<pool>.count", value: "2", want: "step: create machine " + name + "-worker-02"},
		{key: "workers.<pool>.count", value: "0", want: "step: delete machine " + name + "-worker-01"},
		{key: "workers.<pool>.cores", value: "2", want: "step: update machine " + name + "-worker-01"},
		{key: "workers.<pool>.memory", value: "6", want: "step: update machine " + name + "-worker-01"},
		{key: "workers.<pool>.disk", value: "60", want: "step: update machine " + name + "-worker-01"},
		{key: "workers.<pool>.node", value: "pve3", want: "refused: placement changed"},
		{key: "workers.<pool>.extensions", value: "[siderolabs/iscsi-tools]", want: "step: upgrade-talos machine " + name + "-worker-01"},
		{key: "workers.<pool>.config_patches", value: yamlString(patch), want: "step: apply-config machine " + name + "-worker-01"},
		{key: "workers.<pool>.tags", value: "{tier: gold}", want: "step: apply-config machine " + name + "-worker-01"},
		{key: "workers.gpu", value: "{count: 1, cores: 2, memory: 4, disk: 20}", want: "step: create machine " + name + "-gpu-01"},
		{key: "workers", value: "{}", want: "step: drain node " + name + "-worker-01"},
		{key: "network.ntp", value: "[time.example.org]", want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "network.dns", value: "[192.0.2.53]", want: "warning: network.dns is ignored on a Proxmox bridge"},
		{key: "network.cluster.cidr", value: netip.PrefixFrom(net.Addr(), net.Bits()-1).String(), want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "network.cluster.gateway", value: host(2), also: [][2]string{{"network.cluster.mtu", "9000"}}, want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "network.cluster.mtu", value: "9000", want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "network.cluster.vlan", value: "12", want: "refused: moving a NIC to another VLAN"},
		{key: "network.cluster.kubeapi_vip", value: host(6), want: "step: update kubeconfig kubeconfig"},
		{key: "network.external.cidr", path: "network.external", value: external(""), also: extBridge, want: externalNIC},
		{key: "network.external.gateway", path: "network.external", value: external(""), also: extBridge, want: externalNIC},
		{key: "network.external.anchor_cidr", path: "network.external", value: external(""), also: extBridge, want: externalNIC},
		{key: "network.external.ingress_pool", path: "network.external", value: external(", ingress_pool: 198.51.100.20-198.51.100.29"), also: extBridge, want: externalNIC},
		{key: "network.external.vlan", path: "network.external", value: external(", vlan: 100"), also: extBridge, want: externalNIC},
		{key: "network.external.mtu", path: "network.external", value: external(", mtu: 9000"), also: extBridge, want: externalNIC},
		{key: "network.external.kubeapi_vip", path: "network.external", value: external(", kubeapi_vip: 198.51.100.10"),
			also: append([][2]string{{"network.cluster.kubeapi_vip", "~"}}, extBridge...), want: externalNIC},
		{key: "proxmox.network.external.bridge", path: "network.external", value: external(""), also: extBridge, want: externalNIC},
		{key: "security.<rule>.<label>", value: "198.51.100.0/24", want: "step: update firewall-rule " + name + "-controlplane-01"},
		{key: "security.kubernetes", value: "{office: 198.51.100.0/24, loopback: 127.0.0.0/8}", want: "step: update firewall-rule " + name + "-controlplane-01"},
		{key: "security.<rule>.hosts", path: "security.https.hosts", value: "{campus: 192.0.2.0/24}", want: "step: update firewall-rule " + name + "-controlplane-01"},
		{key: "security.<rule>.port", path: "security.metrics", value: "{port: 9100, hosts: {mon: 198.51.100.7/32}}", want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "tailscale", value: "{}", want: "step: upgrade-talos machine " + name + "-controlplane-01"},
		{key: "tailscale.login_server", value: "https://headscale.example.org", want: "step: upgrade-talos machine " + name + "-controlplane-01"},
		{key: "tailscale.auth_key", value: "tskey-auth-walk", want: "refused: tailscale turned on on a running cluster"},
		{key: "proxmox.storage", value: "local-zfs", want: "refused: proxmox.storage changed"},
		{key: "proxmox.iso_storage", value: "other", want: "refused: proxmox.iso_storage other: Proxmox answers \"storage 'other' does not exist\""},
		{key: "proxmox.network.cluster.bridge", value: "vmbr1", want: "refused: the cluster NIC would move"},
		{key: "proxmox.network.cluster.vnet", path: "proxmox.network.cluster", value: "{vnet: walknet}", want: "refused: the cluster NIC would move"},
		sdn("name", "walksdn"), sdn("zone", "evpn"), sdn("controller", "evpnctl2"), sdn("asn", "65001"),
		sdn("vrf_tag", "20000"), sdn("tag", "20001"), sdn("mtu", "1500"), sdn("nodes", "[pve1, pve2, pve3]"),
		sdn("exit_nodes", "[pve1]"), sdn("primary_exit_node", "pve1"),
		{key: "proxmox.nodes", value: "[pve1]", want: "warning: which proxmox.nodes does not list"},
		{key: "proxmox.image_factory", value: "https://factory.example.org", want: "step: apply-config machine " + name + "-controlplane-01"},
		{key: "proxmox.token_id", path: "-", files: map[string]string{"secrets.yaml": "proxmox:\n  token_id: walk@pve!other\n  token_secret: " + labSecret + "\n"}, want: "error: 401"},
		{key: "proxmox.token_secret", path: "-", files: map[string]string{"secrets.yaml": "proxmox:\n  token_id: " + labToken + "\n  token_secret: not-the-secret\n"}, want: "error: 401"},
		{key: "argocd", value: "{sync: true}", want: "warning: the argocd section is validated"},
		{key: "rancher", value: "{admins: [alice]}", want: "warning: the rancher section is validated"},
		{key: "charts", value: "{traefik: {enabled: false}}", want: "warning: the charts section is validated"},
		{key: "metal", value: "{rack: {role: worker, disk: /dev/sda, interfaces: {eth0: {role: cluster, ip: " + host(200) + "}}}}",
			want: "warning: the metal section is validated, but this version does not manage metal machines"},
	}
	inert := []inertKey{
		{key: "include", value: "[secrets.yaml, extra.yaml]", files: map[string]string{"extra.yaml": "{}\n"},
			why: "only says which files hold the keys; the keys it brings are walked themselves"},
		{key: "controlplane.flavor", value: "m1.large", why: "an OpenStack sizing key, accepted and ignored on Proxmox (cores and memory size a VM)"},
		{key: "workers.<pool>.flavor", value: "m1.large", why: "an OpenStack sizing key, accepted and ignored on Proxmox (cores and memory size a VM)"},
		{key: "proxmox.cidata_storage", value: "local", why: "only used while a machine is created"},
		{key: "proxmox.placement_strategy", value: "spread", why: "only places machines that do not exist yet"},
		{key: "proxmox.tls_verify", value: "ca.pem", why: "how converge talks to Proxmox, not the cluster"},
		{key: "proxmox.url", value: strings.TrimSuffix(pveURL, "/") + "/api2/json", why: "the same Proxmox API, written with its path"},
		// The walk cluster has one worker: a larger max_unavailable, or a
		// percentage max_unhealthy, would add a load warning.
		{key: "rollout.max_unavailable", value: "1", why: "paces the rollouts other changes start; it plans nothing itself"},
		{key: "remediation.after", path: "remediation", value: "{after: 15m, max_unhealthy: 1}", why: "remediation acts on machines that turn unhealthy, never on a plan of the file"},
		{key: "remediation.max_unhealthy", value: "1", why: "remediation acts on machines that turn unhealthy, never on a plan of the file"},
		{key: "remediation.pools", path: "remediation", value: "{pools: [worker], max_unhealthy: 1}", why: "remediation acts on machines that turn unhealthy, never on a plan of the file"},
	}
	return cases, inert
}

// TestEveryKeyIsDeclared checks that the key walk covers every key the
// validator accepts (spec.Keys): each is changed by a case, declared inert
// with a reason, or declared not a Proxmox key with a reason, and none of
// those tables names a key the validator does not accept. A key added to
// the validator fails here until its effect is declared.
func TestEveryKeyIsDeclared(t *testing.T) {
	t.Parallel()
	cases, inert := keyWalk("walk", netip.MustParsePrefix("127.0.0.0/24"), "https://127.0.0.1:8006")
	keys := spec.Keys()
	declared := map[string][]string{}
	for _, tc := range cases {
		declared[tc.key] = append(declared[tc.key], "case")
		// A whole section may be changed too: a pool or a rule by name.
		section := tc.key
		for prefix, placeholder := range map[string]string{"workers.": spec.KeyPool, "security.": spec.KeyRule} {
			if rest, ok := strings.CutPrefix(tc.key, prefix); ok && !strings.HasPrefix(rest, "<") {
				section = prefix + placeholder
			}
		}
		if !slices.Contains(keys, tc.key) && !spec.IsSection(section) {
			t.Errorf("case for %s, which is neither a key nor a section of spec.Keys", tc.key)
		}
	}
	for _, in := range inert {
		declared[in.key] = append(declared[in.key], "inert")
		if in.why == "" {
			t.Errorf("inert %s has no reason", in.key)
		}
		if !slices.Contains(keys, in.key) {
			t.Errorf("inert %s is not a key of spec.Keys", in.key)
		}
	}
	for k, why := range notProxmox {
		declared[k] = append(declared[k], "not proxmox")
		if why == "" {
			t.Errorf("not-proxmox %s has no reason", k)
		}
		if !slices.Contains(keys, k) {
			t.Errorf("not-proxmox %s is not a key of spec.Keys", k)
		}
	}
	for _, k := range keys {
		d := slices.Compact(declared[k])
		switch {
		case len(d) == 0:
			t.Errorf("%s is accepted by the validator but the key walk declares no effect for it: add a case (step, refusal or warning), an inert entry with its reason, or a not-proxmox entry", k)
		case len(d) > 1:
			t.Errorf("%s is declared more than one way: %v", k, d)
		}
	}
}

// TestEveryKeyIsPlannedOrRefused walks the keys of cluster.yaml on a
// converged cluster (keyWalk, complete by TestEveryKeyIsDeclared): every
// change is a step, a refusal, a warning or an error naming it, never "no
// changes", except the keys declared inert, whose change must leave the
// plan empty.
func TestEveryKeyIsPlannedOrRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "walk", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := w.engine(t).Plan(ctx); err != nil || !p.Empty() {
		t.Fatalf("plan of the converged cluster: %v, %v", p.Summary(), err)
	}
	baseWarnings := func() []string {
		p, err := w.engine(t).Plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p.Warnings
	}()
	cases, inert := keyWalk(w.name, w.net, w.lab.PVEURL)
	for _, tc := range cases {
		path := tc.path
		if path == "" {
			path = walkNames.Replace(tc.key)
		}
		t.Run(path+"="+tc.value, func(t *testing.T) {
			sets := append([][2]string{{path, tc.value}}, tc.also...)
			if path == "-" {
				sets = tc.also
			}
			kind, text, _ := strings.Cut(tc.want, ": ")
			p, err := planSets(t, ctx, w, sets, tc.files)
			if kind == "error" {
				if err == nil || !strings.Contains(err.Error(), text) {
					t.Errorf("%s = %s: want an error containing %q; got %v, plan %s", path, tc.value, text, err, p.Summary())
				}
				return
			}
			if err != nil {
				t.Fatalf("plan with %s = %s: %v", path, tc.value, err)
			}
			var found bool
			switch kind {
			case "refused":
				for _, r := range p.Refusals {
					found = found || strings.Contains(r.Resource.String()+": "+r.Reason, text)
				}
			case "step":
				for _, ch := range p.Changes {
					found = found || (ch.Action != plan.ActionRefuse && strings.Contains(string(ch.Action)+" "+ch.Resource.String(), text))
				}
			case "warning":
				for _, msg := range p.Warnings {
					found = found || (strings.Contains(msg, text) && !slices.Contains(baseWarnings, msg))
				}
			default:
				t.Fatalf("want %q: unknown kind %q", tc.want, kind)
			}
			if !found {
				t.Errorf("%s = %s: want %s; the plan says %s:\n%s", path, tc.value, tc.want, p.Summary(), describe(p))
			}
			if kind != "warning" && p.Empty() {
				t.Errorf("%s changed but the plan is empty", path)
			}
		})
	}
	for _, tc := range inert {
		path := tc.path
		if path == "" {
			path = walkNames.Replace(tc.key)
		}
		t.Run("inert/"+walkNames.Replace(tc.key), func(t *testing.T) {
			p, err := planSets(t, ctx, w, [][2]string{{path, tc.value}}, tc.files)
			if err != nil {
				t.Fatalf("plan with %s = %s: %v", path, tc.value, err)
			}
			if !p.Empty() || !slices.Equal(p.Warnings, baseWarnings) {
				t.Errorf("%s is declared inert (%s), but its change is planned: %s\n%s", path, tc.why, p.Summary(), describe(p))
			}
		})
	}
}

func describe(p *plan.Plan) string {
	var b strings.Builder
	for _, ch := range p.Changes {
		b.WriteString("  " + ch.Step() + "  " + ch.Reason + "\n")
	}
	for _, r := range p.Refusals {
		b.WriteString("  refused " + r.Resource.String() + ": " + r.Reason + "\n")
	}
	for _, w := range p.Warnings {
		b.WriteString("  warning " + w + "\n")
	}
	return b.String()
}

// yamlString quotes s as a one-item YAML list of a block string.
func yamlString(s string) string { return labtest.YAMLString(s) }

// planSets copies the converged cluster's directory, writes files into it,
// sets each dotted path (the last part may be new) to its YAML value, and
// plans it. A directory that does not load fails the test.
func planSets(t *testing.T, ctx context.Context, w *world, sets [][2]string, files map[string]string) (*plan.Plan, error) {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		data, err := os.ReadFile(filepath.Join(w.dir, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, en.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, kv := range sets {
		var val yaml.Node
		if err := yaml.Unmarshal([]byte(kv[1]), &val); err != nil {
			t.Fatalf("value %q: %v", kv[1], err)
		}
		setPath(t, doc.Content[0], strings.Split(kv[0], "."), val.Content[0])
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	c, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatalf("%v does not load: %v", sets, err)
	}
	p, err := proxmox.New(c, os.DirFS(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &reconcile.Engine{Cluster: c, Warnings: warns, State: state.Local{Dir: dir}, Key: dir, Infra: p, PollInterval: 50 * time.Millisecond}
	return e.Plan(ctx)
}

// setPath sets (or adds) the mapping entry at path under n.
func setPath(t *testing.T, n *yaml.Node, path []string, val *yaml.Node) {
	t.Helper()
	labtest.SetPath(t, n, path, val)
}
