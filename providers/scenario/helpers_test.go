package scenario_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/internal/labtest"
	"github.com/taloscluster/taloscluster/lab"
	labkube "github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// built starts a lab world of the cloud and converges a cluster of three
// control planes and the given workers.
func built(t *testing.T, c *cloud, name string, workers int) (*world, context.Context) {
	t.Helper()
	w := newWorld(t, c, name, workers)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("first converge: %v", err)
	}
	return w, ctx
}

// set changes keys of the world's cluster.yaml in place.
func (w *world) set(t *testing.T, kv ...string) {
	t.Helper()
	labtest.SetYAML(t, filepath.Join(w.dir, "cluster.yaml"), kv...)
}

// yamlString quotes s as a one-item YAML list of a block string.
func yamlString(s string) string { return labtest.YAMLString(s) }

// planSets copies the converged cluster's directory, sets each dotted path
// (the last part may be new) to its YAML value, and plans it. A directory
// that does not load fails the test.
func planSets(t *testing.T, ctx context.Context, w *world, sets [][2]string) (*plan.Plan, error) {
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
	copied := &world{cloud: w.cloud, lab: w.lab, dir: dir, name: w.name, nets: w.nets}
	var kv []string
	for _, s := range sets {
		kv = append(kv, s[0], s[1])
	}
	copied.set(t, kv...)
	c, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatalf("%v does not load: %v", sets, err)
	}
	e := &reconcile.Engine{Cluster: c, Warnings: warns, State: state.Local{Dir: dir}, Key: dir, Infra: w.cloud.infra(t, c, dir), PollInterval: 50 * time.Millisecond}
	return e.Plan(ctx)
}

// kube returns the lab's Kubernetes server of the world's cluster and a
// client-go clientset with the cluster's kubeconfig.
func (w *world) kube(t *testing.T) (*labkube.Server, kubernetes.Interface) {
	t.Helper()
	k, ok := w.lab.Kube(w.name)
	if !ok {
		t.Fatal("the cluster has no Kubernetes API")
	}
	data, err := os.ReadFile(filepath.Join(w.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k, cs
}

// since returns the lab's log entries after mark.
func since(l *lab.Lab, mark time.Time) []lab.LogEntry { return labtest.Since(l, mark) }

// find returns the index of the first entry from start on that matches
// source, op (a Talos call's method, or its service and method such as
// LifecycleService.Upgrade) and a target containing target; -1 when there
// is none.
func find(log []lab.LogEntry, start int, source, op, target string) int {
	return labtest.Find(log, start, source, op, target)
}

// inOrder checks that the steps happen in the log in this order.
func inOrder(t *testing.T, log []lab.LogEntry, steps ...[3]string) {
	t.Helper()
	at := 0
	for _, s := range steps {
		i := find(log, at, s[0], s[1], s[2])
		if i < 0 {
			var lines []string
			for _, e := range log {
				if e.Op != "get nodes" && e.Op != "list nodes" && !strings.HasPrefix(e.Op, "qemu.status") && !strings.HasSuffix(e.Op, ".get") && !strings.HasSuffix(e.Op, ".list") && !strings.HasPrefix(e.Op, "identity.") {
					lines = append(lines, e.Source+" "+e.Op+" "+e.Target+" "+e.Result)
				}
			}
			t.Fatalf("no %s %s %s after entry %d; the log:\n%s", s[0], s[1], s[2], at, strings.Join(lines, "\n"))
		}
		at = i + 1
	}
}

// nodeAddr returns the Talos address of the machine of that hostname,
// remembered from the first look (a reset node forgets its name).
func (w *world) nodeAddr(t *testing.T, hostname string) string {
	t.Helper()
	if a, ok := w.addrs[hostname]; ok {
		return a
	}
	for _, n := range w.lab.Talos.Nodes() {
		if n.Hostname == hostname {
			if w.addrs == nil {
				w.addrs = map[string]string{}
			}
			w.addrs[hostname] = n.Addr.String()
			return n.Addr.String()
		}
	}
	t.Fatalf("no Talos node %s", hostname)
	return ""
}

func waitFor(t *testing.T, what string, cond func() bool) { t.Helper(); labtest.WaitFor(t, what, cond) }
