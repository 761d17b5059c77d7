package proxmox_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

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

// TestEveryKeyIsPlannedOrRefused walks the keys of cluster.yaml on a
// converged cluster: every change is a step or a refusal, never "no
// changes", except the keys listed as inert, which only say how future
// work is done (credentials, endpoints, where new machines go).
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
	patch := "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"
	cases := []struct {
		key, value string
		// want is "refused: <text>", "step: <text>" or "warning: <text>";
		// the text must appear in a refusal, a step's "action kind name"
		// or a warning.
		want string
	}{
		{"name", "walkx", "refused: renaming a cluster is not supported"},
		{"tags", "{team: data}", "refused: the running machine config differs"},
		{"talos.version", "v1.13.9", "refused: talos.version v1.13.8 -> v1.13.9"},
		{"talos.version", "v1.13.0", "refused: downgrades are not supported"},
		{"talos.extensions", "[siderolabs/iscsi-tools]", "refused: the running machine config differs"},
		{"talos.config_patches", yamlString(patch), "refused: the running machine config differs"},
		{"talos.kubespan", "true", "refused: the running machine config differs"},
		{"kubernetes.version", "v1.35.0", "refused: kubernetes.version v1.36.1 -> v1.35.0: downgrades are not supported"},
		{"kubernetes.version", "v1.36.2", "refused: upgrades are not supported yet"},
		{"controlplane.count", "5", "step: create machine walk-controlplane-04"},
		{"controlplane.count", "1", "refused: scale-down"},
		{"controlplane.cores", "3", "step: update machine walk-controlplane-01"},
		{"controlplane.memory", "6", "step: update machine walk-controlplane-01"},
		{"controlplane.disk", "30", "step: update machine walk-controlplane-01"},
		{"controlplane.disk", "10", "refused: disk shrink"},
		{"controlplane.node", "pve2", "refused: placement changed"},
		{"controlplane.extensions", "[siderolabs/iscsi-tools]", "refused: the running machine config differs"},
		{"controlplane.config_patches", yamlString(patch), "refused: the running machine config differs"},
		{"controlplane.tags", "{tier: gold}", "refused: the running machine config differs"},
		{"workers.worker.count", "2", "step: create machine walk-worker-02"},
		{"workers.worker.count", "0", "refused: scale-down"},
		{"workers.worker.cores", "2", "step: update machine walk-worker-01"},
		{"workers.worker.disk", "60", "step: update machine walk-worker-01"},
		{"workers.worker.config_patches", yamlString(patch), "refused: the running machine config differs"},
		{"workers.gpu", "{count: 1, cores: 2, memory: 4, disk: 20}", "step: create machine walk-gpu-01"},
		{"workers", "{}", "refused: scale-down"},
		{"network.ntp", "[time.example.org]", "refused: the running machine config differs"},
		{"network.dns", "[192.0.2.53]", "warning: network.dns is ignored on a Proxmox bridge"},
		{"network.cluster.vlan", "12", "refused: moving a NIC to another VLAN"},
		{"network.cluster.kubeapi_vip", w.net.Addr().Next().Next().Next().Next().Next().Next().String(), "refused: the running machine config differs"},
		{"security.kubernetes", "{office: 198.51.100.0/24, loopback: 127.0.0.0/8}", "step: update firewall-rule walk-controlplane-01"},
		{"security.metrics", "{port: 9100, hosts: {mon: 198.51.100.7/32}}", "refused: the running machine config differs"},
		{"tailscale", "{}", "refused: the running machine config differs"},
		{"proxmox.storage", "local-zfs", "refused: proxmox.storage changed"},
		{"proxmox.iso_storage", "other", "refused: proxmox.iso_storage other: Proxmox answers \"storage 'other' does not exist\""},
		{"proxmox.network.cluster.bridge", "vmbr1", "refused: the cluster NIC would move"},
		{"proxmox.nodes", "[pve1]", "warning: which proxmox.nodes does not list"},
		{"proxmox.image_factory", "https://factory.example.org", "refused: the running machine config differs"},
		{"argocd", "{sync: true}", "warning: the argocd section is validated"},
	}
	inert := []struct{ key, value, why string }{
		{"proxmox.cidata_storage", "local", "only used while a machine is created"},
		{"proxmox.placement_strategy", "spread", "only places machines that do not exist yet"},
		{"network.cluster.gateway", w.net.Addr().Next().Next().String(), "on a DHCP-backed Proxmox L2 it only clamps routes when the MTU is above 1500"},
		{"proxmox.tls_verify", "ca.pem", "how converge talks to Proxmox, not the cluster"},
	}
	for _, tc := range cases {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			p := planWith(t, ctx, w, tc.key, tc.value)
			kind, text, _ := strings.Cut(tc.want, ": ")
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
					found = found || strings.Contains(msg, text)
				}
			}
			if !found {
				t.Errorf("%s: %s = %s: want %s; the plan says %s:\n%s", tc.key, tc.key, tc.value, tc.want, p.Summary(), describe(p))
			}
			if kind != "warning" && p.Empty() {
				t.Errorf("%s changed but the plan is empty", tc.key)
			}
		})
	}
	for _, tc := range inert {
		t.Run("inert/"+tc.key, func(t *testing.T) {
			p := planWith(t, ctx, w, tc.key, tc.value)
			if len(p.Refusals) > 0 {
				t.Errorf("%s (%s) is refused: %v", tc.key, tc.why, p.Refusals)
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
func yamlString(s string) string {
	out, _ := yaml.Marshal([]string{s})
	return string(out)
}

// planWith copies the converged cluster's directory, sets key (a dotted
// path; the last part may be new) to the YAML value, and plans it.
func planWith(t *testing.T, ctx context.Context, w *world, key, value string) *plan.Plan {
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
	path := filepath.Join(dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var val yaml.Node
	if err := yaml.Unmarshal([]byte(value), &val); err != nil {
		t.Fatalf("value %q: %v", value, err)
	}
	setPath(t, doc.Content[0], strings.Split(key, "."), val.Content[0])
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	c, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatalf("%s = %s does not load: %v", key, value, err)
	}
	p, err := proxmox.New(c, os.DirFS(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &reconcile.Engine{Cluster: c, Warnings: warns, State: state.Local{Dir: dir}, Key: dir, Infra: p, PollInterval: 50 * time.Millisecond}
	pl, err := e.Plan(ctx)
	if err != nil {
		t.Fatalf("plan with %s = %s: %v", key, value, err)
	}
	return pl
}

// setPath sets (or adds) the mapping entry at path under n.
func setPath(t *testing.T, n *yaml.Node, path []string, val *yaml.Node) {
	t.Helper()
	if n.Kind != yaml.MappingNode {
		t.Fatalf("%s: not a mapping", path[0])
	}
	for i := 0; i < len(n.Content); i += 2 {
		if n.Content[i].Value != path[0] {
			continue
		}
		if len(path) == 1 {
			n.Content[i+1] = val
			return
		}
		setPath(t, n.Content[i+1], path[1:], val)
		return
	}
	if len(path) > 1 {
		child := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: path[0]}, child)
		setPath(t, child, path[1:], val)
		return
	}
	n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: path[0]}, val)
}
