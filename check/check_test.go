package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// The upstream histories the tests use: like the lab forge's seed.
var (
	talosTags = tagsOf("v1.11.", 6, "v1.12.", 4, "v1.13.", 8)
	kubeTags  = tagsOf("v1.34.", 5, "v1.35.", 3, "v1.36.", 3, "v1.37.", 2)
)

func tagsOf(lines ...any) []string {
	var out []string
	for i := 0; i < len(lines); i += 2 {
		for p := 0; p <= lines[i+1].(int); p++ {
			out = append(out, fmt.Sprintf("%s%d", lines[i], p))
		}
	}
	return out
}

func indexOf(tags []string, extra ...string) *Index {
	ix := IndexOf(append(slices.Clone(tags), extra...)...)
	return &ix
}

func TestKubernetesComponent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, pin, talos string
		extra            []string
		update           *Update
		behind           int
		latestPatch      string
		latestSupported  string
		note             string
	}{
		{name: "newest patch of the newest supported minor", pin: "v1.36.3", talos: "v1.13.8",
			latestPatch: "v1.36.3", latestSupported: "v1.36.3",
			note: "kubernetes v1.37.2 is released, but talos v1.13.8 runs kubernetes v1.31 to v1.36: not an update to take"},
		{name: "patch behind", pin: "v1.36.1", talos: "v1.13.8", update: &Update{UpdatePatch, "v1.36.3"}, behind: 2,
			latestPatch: "v1.36.3", latestSupported: "v1.36.3", note: "v1.37.2 is released"},
		{name: "minor behind", pin: "v1.35.3", talos: "v1.13.8", update: &Update{UpdateMinor, "v1.36.3"},
			latestPatch: "v1.35.3", latestSupported: "v1.36.3"},
		{name: "patch first when both are behind", pin: "v1.34.2", talos: "v1.13.8", update: &Update{UpdatePatch, "v1.34.5"}, behind: 3,
			latestPatch: "v1.34.5", latestSupported: "v1.36.3"},
		{name: "next minor, one at a time", pin: "v1.34.5", talos: "v1.13.8", update: &Update{UpdateMinor, "v1.35.3"},
			latestPatch: "v1.34.5", latestSupported: "v1.36.3"},
		{name: "talos 1.14 runs 1.37", pin: "v1.36.3", talos: "v1.14.1", update: &Update{UpdateMinor, "v1.37.2"},
			latestPatch: "v1.36.3", latestSupported: "v1.37.2"},
		{name: "talos minor not in the table", pin: "v1.36.3", talos: "v1.15.0", update: &Update{UpdateMinor, "v1.37.2"},
			latestPatch: "v1.36.3", latestSupported: "v1.37.2", note: "are not known here"},
		{name: "prereleases ignored", pin: "v1.36.3", talos: "v1.13.8", extra: []string{"v1.36.4-rc.0"},
			latestPatch: "v1.36.3", latestSupported: "v1.36.3"},
		{name: "pin not released", pin: "v1.36.9", talos: "v1.13.8",
			latestPatch: "v1.36.3", latestSupported: "v1.36.3", note: "v1.36.9 is not among the published releases of kubernetes/kubernetes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := Kubernetes(c.pin, c.talos, indexOf(kubeTags, c.extra...))
			if !equalUpdate(got.Update, c.update) {
				t.Errorf("update %+v, want %+v", got.Update, c.update)
			}
			if got.PatchesBehind != c.behind || got.LatestPatch != c.latestPatch || got.LatestSupported != c.latestSupported || got.Latest != "v1.37.2" {
				t.Errorf("behind %d latest patch %s latest supported %s latest %s; want %d %s %s v1.37.2",
					got.PatchesBehind, got.LatestPatch, got.LatestSupported, got.Latest, c.behind, c.latestPatch, c.latestSupported)
			}
			if c.note != "" && !slices.ContainsFunc(got.Notes, func(n string) bool { return strings.Contains(n, c.note) }) {
				t.Errorf("notes %q lack %q", got.Notes, c.note)
			}
		})
	}
	if k := Kubernetes("v1.36.1", "v1.13.8", nil); k.Supported == nil || *k.Supported != (SupportRange{"v1.31", "v1.36"}) || k.Update != nil {
		t.Errorf("without releases: %+v", k)
	}
}

func TestTalosComponent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, pin, kube string
		extra           []string
		update          *Update
		behind          int
		latestSupported string
		note            string
	}{
		{name: "up to date, prerelease ignored", pin: "v1.13.8", kube: "v1.36.1", extra: []string{"v1.14.0-beta.0"}, latestSupported: "v1.13.8"},
		{name: "patch behind", pin: "v1.13.6", kube: "v1.36.1", update: &Update{UpdatePatch, "v1.13.8"}, behind: 2, latestSupported: "v1.13.8"},
		{name: "a newer minor that runs the pinned kubernetes", pin: "v1.13.8", kube: "v1.36.1", extra: []string{"v1.14.0", "v1.14.1"},
			update: &Update{UpdateMinor, "v1.14.1"}, latestSupported: "v1.14.1"},
		{name: "a newer minor that does not run the pinned kubernetes", pin: "v1.13.8", kube: "v1.32.4", extra: []string{"v1.14.0"},
			latestSupported: "v1.13.8", note: "talos v1.14.0 is released, but it runs kubernetes v1.33 to v1.37, not the pinned v1.32.4"},
		{name: "a minor not in the table is not incompatible", pin: "v1.13.8", kube: "v1.36.1", extra: []string{"v1.15.0"},
			update: &Update{UpdateMinor, "v1.15.0"}, latestSupported: "v1.15.0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := Talos(c.pin, c.kube, indexOf(talosTags, c.extra...))
			if !equalUpdate(got.Update, c.update) {
				t.Errorf("update %+v, want %+v", got.Update, c.update)
			}
			if got.PatchesBehind != c.behind || got.LatestSupported != c.latestSupported || !got.PinnedReleased {
				t.Errorf("behind %d latest supported %s released %v; want %d %s", got.PatchesBehind, got.LatestSupported, got.PinnedReleased, c.behind, c.latestSupported)
			}
			if c.note != "" && !slices.ContainsFunc(got.Notes, func(n string) bool { return strings.Contains(n, c.note) }) {
				t.Errorf("notes %q lack %q", got.Notes, c.note)
			}
			if got.Supported != nil {
				t.Error("talos carries a kubernetes range")
			}
		})
	}
}

func equalUpdate(a, b *Update) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// fakeSource serves fixed release lists, or an error per repository.
type fakeSource struct {
	tags map[string][]string
	errs map[string]error
}

func (f fakeSource) Releases(_ context.Context, repo string) ([]Release, error) {
	if err := f.errs[repo]; err != nil {
		return nil, err
	}
	var out []Release
	for _, t := range f.tags[repo] {
		out = append(out, Release{Tag: t})
	}
	return out, nil
}

func upstream(talosExtra, kubeExtra []string) fakeSource {
	return fakeSource{tags: map[string][]string{
		TalosRepository:      append(slices.Clone(talosTags), talosExtra...),
		KubernetesRepository: append(slices.Clone(kubeTags), kubeExtra...),
	}}
}

type inventory []reconcile.Machine

func (i inventory) Machines() []reconcile.Machine { return i }

const testSecret = "0f6c3b2a-secret-value-9d1e"

// testCluster loads a Proxmox cluster with one control plane and one
// worker, pinned to talos v1.13.8 and kubernetes k8s.
func testCluster(t *testing.T, k8s string) (*spec.Cluster, []spec.Problem) {
	t.Helper()
	dir := t.TempDir()
	yaml := `include: [secrets.yaml]
name: unit
talos: {version: v1.13.8}
kubernetes: {version: ` + k8s + `}
controlplane: {count: 1, cores: 2, memory: 4, disk: 20}
workers:
  worker: {count: 1, cores: 2, memory: 4, disk: 20}
proxmox:
  url: https://pve.example.edu:8006
  storage: local-lvm
  iso_storage: local
  network: {cluster: {bridge: vmbr0}}
network:
  cluster: {cidr: 192.168.50.0/24, gateway: 192.168.50.1, kubeapi_vip: 192.168.50.5}
  dns: []
  ntp: [pool.ntp.org]
`
	for name, body := range map[string]string{
		"cluster.yaml": yaml,
		"secrets.yaml": "proxmox:\n  token_id: root@pam!unit\n  token_secret: " + testSecret + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, warnings, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, warnings
}

// runningCluster is the observation of the test cluster running the given
// versions, every fact known.
func runningCluster(t *testing.T, c *spec.Cluster, talos, kubelet string) *reconcile.Observation {
	t.Helper()
	obs := &reconcile.Observation{Nodes: map[string]reconcile.NodeFacts{}, State: reconcile.StateFacts{Secrets: true, Kubeconfig: true}}
	var inv inventory
	for i, m := range machineconfig.Machines(c) {
		addr := netip.AddrFrom4([4]byte{192, 168, 50, byte(10 + i)})
		inv = append(inv, reconcile.Machine{Hostname: m.Hostname, Role: m.Role(), Running: true, Addresses: []netip.Addr{addr}})
		img, err := machineconfig.InstallerImage(c.Proxmox.ImageFactory, c.Extensions(m.Pool), talos)
		if err != nil {
			t.Fatal(err)
		}
		obs.Nodes[m.Hostname] = reconcile.NodeFacts{Address: addr.String(), Version: talos, Installer: img, Config: []byte("x")}
		obs.Kube.Nodes = append(obs.Kube.Nodes, kube.Node{Name: m.Hostname, Ready: true, KubeletVersion: kubelet})
	}
	obs.Inventory = inv
	obs.Kube.Version = kubelet
	return obs
}

func run(t *testing.T, o Options) *Report {
	t.Helper()
	o.Now = func() time.Time { return time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC) }
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func kinds(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Kind+" "+f.Subject)
	}
	return out
}

// TestRun covers the exit decision over whole reports.
func TestRun(t *testing.T) {
	t.Parallel()
	c, warnings := testCluster(t, "v1.36.3")
	behind, _ := testCluster(t, "v1.36.1")
	cases := []struct {
		name      string
		opts      func() Options
		attention bool
		scope     string
		findings  []string
		check     func(t *testing.T, r *Report)
	}{
		{name: "up to date and in sync", scope: ScopeCluster,
			opts: func() Options {
				return Options{Cluster: c, Warnings: warnings, Releases: upstream(nil, nil), Observation: runningCluster(t, c, "v1.13.8", "v1.36.3")}
			},
			check: func(t *testing.T, r *Report) {
				for _, n := range r.Nodes {
					if n.Talos.State != StateInSync || n.Kubelet.State != StateInSync || n.Installer.State != StateInSync {
						t.Errorf("node %s not in sync: %+v", n.Name, n)
					}
				}
				if r.KubernetesAPI == nil || r.KubernetesAPI.State != StateInSync {
					t.Errorf("api %+v", r.KubernetesAPI)
				}
			}},
		{name: "patch behind", attention: true, scope: ScopeCluster, findings: []string{"update kubernetes"},
			opts: func() Options {
				return Options{Cluster: behind, Releases: upstream(nil, nil), Observation: runningCluster(t, behind, "v1.13.8", "v1.36.1")}
			},
			check: func(t *testing.T, r *Report) {
				if k := r.Components[1]; k.PatchesBehind != 2 || k.Update == nil || k.Update.Version != "v1.36.3" {
					t.Errorf("kubernetes %+v", k)
				}
			}},
		{name: "a new talos patch", attention: true, scope: ScopeCluster, findings: []string{"update talos"},
			opts: func() Options {
				return Options{Cluster: c, Releases: upstream([]string{"v1.13.9"}, nil), Observation: runningCluster(t, c, "v1.13.8", "v1.36.3")}
			}},
		{name: "drift", attention: true, scope: ScopeCluster,
			findings: []string{"drift unit-controlplane-01", "drift unit-controlplane-01", "drift unit-worker-01", "drift unit-worker-01"},
			opts: func() Options {
				return Options{Cluster: c, Releases: upstream(nil, nil), Observation: runningCluster(t, c, "v1.13.7", "v1.36.3")}
			},
			check: func(t *testing.T, r *Report) {
				n := r.Nodes[0]
				if n.Talos.State != StateDrift || n.Talos.Have != "v1.13.7" || n.Installer.State != StateDrift || !strings.Contains(n.Installer.Reason, "another version") {
					t.Errorf("node %+v", n)
				}
				var b bytes.Buffer
				_ = WriteText(&b, r)
				if last := lastLine(b.String()); last != "NEEDS ATTENTION: drift on 2 machines" {
					t.Errorf("verdict %q", last)
				}
			}},
		{name: "the API server drifts", attention: true, scope: ScopeCluster, findings: []string{"drift kubernetes-api"},
			opts: func() Options {
				obs := runningCluster(t, c, "v1.13.8", "v1.36.3")
				obs.Kube.Version = "v1.36.2"
				return Options{Cluster: c, Releases: upstream(nil, nil), Observation: obs}
			},
			check: func(t *testing.T, r *Report) {
				var b bytes.Buffer
				_ = WriteText(&b, r)
				if last := lastLine(b.String()); last != "NEEDS ATTENTION: drift of the Kubernetes API server" {
					t.Errorf("verdict %q", last)
				}
			}},
		{name: "cordon", attention: true, scope: ScopeCluster, findings: []string{"cordon unit-worker-01"},
			opts: func() Options {
				obs := runningCluster(t, c, "v1.13.8", "v1.36.3")
				obs.Kube.Nodes[1].Unschedulable = true
				return Options{Cluster: c, Releases: upstream(nil, nil), Observation: obs}
			},
			check: func(t *testing.T, r *Report) {
				if !slices.Equal(r.Cordoned, []string{"unit-worker-01"}) || !r.Nodes[1].Cordoned {
					t.Errorf("cordoned %v", r.Cordoned)
				}
			}},
		{name: "unknown facts are never in sync", attention: true, scope: ScopeCluster,
			findings: []string{"incomplete kubernetes", "incomplete unit-worker-01"},
			opts: func() Options {
				obs := runningCluster(t, c, "v1.13.8", "v1.36.3")
				obs.Nodes["unit-worker-01"] = reconcile.NodeFacts{Unknown: "connection refused"}
				obs.Kube = reconcile.KubeFacts{Unknown: "the Kubernetes API does not answer: timeout"}
				return Options{Cluster: c, Releases: upstream(nil, nil), Observation: obs}
			},
			check: func(t *testing.T, r *Report) {
				w := r.Nodes[1]
				if w.Talos.State != StateUnknown || w.Talos.Reason != "connection refused" || w.Installer.State != StateUnknown || w.Kubelet.State != StateUnknown {
					t.Errorf("worker %+v", w)
				}
				if !r.Incomplete || len(r.IncompleteReasons) != 2 {
					t.Errorf("incomplete %v %q", r.Incomplete, r.IncompleteReasons)
				}
			}},
		{name: "plugins", attention: true, scope: ScopeCluster, findings: []string{"drift plugin charts", "incomplete plugin rancher"},
			opts: func() Options {
				return Options{Cluster: c, Releases: upstream(nil, nil), Observation: runningCluster(t, c, "v1.13.8", "v1.36.3"),
					Plugins: func(context.Context, *reconcile.Observation) []reconcile.PluginCheck {
						return []reconcile.PluginCheck{
							{Name: "charts", State: reconcile.PluginDrift, Steps: []string{"update release traefik: chart values changed"}},
							{Name: "rancher", State: reconcile.PluginUnknown, Reason: "GET /v3/clusters returned 503: unavailable"},
							{Name: "argocd", State: reconcile.PluginInSync},
						}
					}}
			},
			check: func(t *testing.T, r *Report) {
				if len(r.Plugins) != 3 || r.Plugins[0].State != StateDrift || r.Plugins[1].State != StateUnknown || r.Plugins[2].State != StateInSync {
					t.Errorf("plugins %+v", r.Plugins)
				}
				var b strings.Builder
				if err := WriteText(&b, r); err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{"charts: drift, converge would make 1 step", "    update release traefik: chart values changed",
					"rancher: unknown: GET /v3/clusters returned 503", "argocd: in sync", "drift in 1 plugin"} {
					if !strings.Contains(b.String(), want) {
						t.Errorf("the text report lacks %q:\n%s", want, b.String())
					}
				}
				if strings.Contains(b.String(), "drift on") {
					t.Errorf("a plugin's drift was counted as a machine's:\n%s", b.String())
				}
			}},
		{name: "a missing machine", attention: true, scope: ScopeCluster, findings: []string{"drift unit-worker-01"},
			opts: func() Options {
				obs := runningCluster(t, c, "v1.13.8", "v1.36.3")
				obs.Inventory = obs.Inventory.(inventory)[:1]
				delete(obs.Nodes, "unit-worker-01")
				obs.Kube.Nodes = obs.Kube.Nodes[:1]
				return Options{Cluster: c, Releases: upstream(nil, nil), Observation: obs}
			},
			check: func(t *testing.T, r *Report) {
				if !slices.Equal(r.Missing, []string{"unit-worker-01"}) {
					t.Errorf("missing %v", r.Missing)
				}
			}},
		{name: "before the cluster exists", scope: ScopeVersions,
			opts: func() Options {
				return Options{Cluster: c, Releases: upstream(nil, nil), Observe: func(context.Context) (*reconcile.Observation, error) {
					return &reconcile.Observation{Inventory: inventory{}, Nodes: map[string]reconcile.NodeFacts{}, Kube: reconcile.KubeFacts{Unknown: "no kubeconfig"}}, nil
				}}
			},
			check: func(t *testing.T, r *Report) {
				if !strings.Contains(r.ScopeReason, "does not exist yet") || r.KubernetesAPI != nil || len(r.Nodes) != 0 {
					t.Errorf("scope reason %q api %v nodes %v", r.ScopeReason, r.KubernetesAPI, r.Nodes)
				}
			}},
		{name: "not observed", scope: ScopeVersions,
			opts: func() Options {
				return Options{Cluster: c, Releases: upstream(nil, nil), NotObserved: "no credentials"}
			},
			check: func(t *testing.T, r *Report) {
				if r.ScopeReason != "no credentials" {
					t.Errorf("scope reason %q", r.ScopeReason)
				}
			}},
		{name: "the releases cannot be read", attention: true, scope: ScopeCluster, findings: []string{"incomplete releases"},
			opts: func() Options {
				src := upstream(nil, nil)
				src.errs = map[string]error{TalosRepository: errors.New("listing the releases of siderolabs/talos: 502 Bad Gateway")}
				return Options{Cluster: c, Releases: src, Observation: runningCluster(t, c, "v1.13.8", "v1.36.3")}
			},
			check: func(t *testing.T, r *Report) {
				if r.Components[0].Unknown == "" || r.Components[0].Update != nil || r.Components[1].Unknown != "" {
					t.Errorf("components %+v", r.Components)
				}
				if !slices.Equal(r.IncompleteReasons, []string{"releases: listing the releases of siderolabs/talos: 502 Bad Gateway"}) {
					t.Errorf("reasons %q", r.IncompleteReasons)
				}
			}},
		{name: "no release source", attention: true, scope: ScopeVersions, findings: []string{"incomplete releases"},
			opts: func() Options { return Options{Cluster: c, NotObserved: "x"} }},
		{name: "the cluster cannot be read", attention: true, scope: ScopeVersions, findings: []string{"incomplete cluster"},
			opts: func() Options {
				return Options{Cluster: c, Releases: upstream(nil, nil), Observe: func(context.Context) (*reconcile.Observation, error) {
					return nil, errors.New("reading Proxmox: 401 authentication failure, token " + testSecret)
				}, Redact: func(s string) string { return strings.ReplaceAll(s, testSecret, "[redacted]") }}
			},
			check: func(t *testing.T, r *Report) {
				var b bytes.Buffer
				if err := WriteJSON(&b, r); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(b.String(), testSecret) {
					t.Error("the secret is in the report")
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tc.opts())
			if r.NeedsAttention != tc.attention || r.Scope != tc.scope {
				t.Errorf("attention %v scope %s; want %v %s\nfindings %v", r.NeedsAttention, r.Scope, tc.attention, tc.scope, r.Findings)
			}
			if got := kinds(r); !slices.Equal(got, tc.findings) {
				t.Errorf("findings %q, want %q", got, tc.findings)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
			var text bytes.Buffer
			if err := WriteText(&text, r); err != nil {
				t.Fatal(err)
			}
			last := lastLine(text.String())
			if tc.attention != strings.HasPrefix(last, "NEEDS ATTENTION: ") || !tc.attention && !strings.HasPrefix(last, "OK: ") {
				t.Errorf("verdict line %q\n%s", last, text.String())
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestReportJSONShape: every documented field is present and no list is
// null, whatever the report holds.
func TestReportJSONShape(t *testing.T) {
	t.Parallel()
	c, _ := testCluster(t, "v1.36.3")
	for _, o := range []Options{
		{Cluster: c, NotObserved: "x"},
		{Cluster: c, Releases: upstream(nil, nil), Observation: runningCluster(t, c, "v1.13.8", "v1.36.3")},
	} {
		var b bytes.Buffer
		if err := WriteJSON(&b, run(t, o)); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"version", "cluster", "checked_at", "needs_attention", "incomplete", "incomplete_reasons", "scope",
			"scope_reason", "components", "kubernetes_api", "nodes", "missing", "cordoned", "warnings", "findings"} {
			v, ok := m[k]
			if !ok {
				t.Errorf("field %s missing", k)
			}
			if v == nil && k != "kubernetes_api" {
				t.Errorf("field %s is null", k)
			}
		}
		for _, comp := range m["components"].([]any) {
			cm := comp.(map[string]any)
			for _, k := range []string{"name", "repository", "pinned", "pinned_released", "latest_patch", "patches_behind",
				"latest_supported", "latest", "supported", "update", "notes", "unknown"} {
				if _, ok := cm[k]; !ok {
					t.Errorf("component field %s missing", k)
				}
			}
			if cm["notes"] == nil {
				t.Error("notes is null")
			}
		}
		if m["version"].(float64) != SchemaVersion {
			t.Errorf("version %v", m["version"])
		}
	}
}

func TestRunWithoutCluster(t *testing.T) {
	t.Parallel()
	if _, err := Run(context.Background(), Options{}); err == nil {
		t.Error("Run without a cluster did not fail")
	}
}
