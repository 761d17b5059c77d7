package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/forge"
	"github.com/taloscluster/taloscluster/reconcile"
)

// checkToken is the forge user's token check reads the releases with,
// from $GITHUB_TOKEN. The check tests set the environment, so they do not
// run in parallel.
const checkToken = "ghp_checkReleaseReader0123456789abcdef"

// checkLab is a lab cluster directory and a forge serving the upstream
// release histories over TLS with the lab's CA.
type checkLab struct {
	lab   *lab.Lab
	forge *forge.Forge
	dir   string
	api   string
}

func newCheckLab(t *testing.T, net string) *checkLab {
	t.Helper()
	l, dir := labCluster(t, net, "chk", 1)
	f, srv := startForge(t, l, forge.User{Login: "release-reader", Token: checkToken})
	t.Setenv(envGitHubToken, checkToken)
	t.Setenv(envGitHubAPI, "")
	return &checkLab{lab: l, forge: f, dir: dir, api: srv.URL + "/"}
}

// pin rewrites the versions cluster.yaml pins.
func (w *checkLab) pin(t *testing.T, talos, kube string) {
	t.Helper()
	p := filepath.Join(w.dir, "cluster.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, r := range []struct{ section, version string }{{"talos", talos}, {"kubernetes", kube}} {
		head := r.section + ":\n  version: "
		i := strings.Index(s, head)
		if i < 0 {
			t.Fatalf("cluster.yaml has no %s.version", r.section)
		}
		end := i + len(head) + strings.IndexByte(s[i+len(head):], '\n')
		s = s[:i+len(head)] + r.version + s[end:]
	}
	write(t, w.dir, "cluster.yaml", s)
}

func (w *checkLab) converge(t *testing.T) {
	t.Helper()
	if code, stdout, stderr := cli(t, "converge", "--yes", "-C", w.dir); code != 0 {
		t.Fatalf("converge: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// release adds a release to an upstream repository, newer than the seed.
func (w *checkLab) release(t *testing.T, repo, tag string) {
	t.Helper()
	owner, name, _ := strings.Cut(repo, "/")
	if err := w.forge.Repo(owner, name).AddRelease(forge.Release{Tag: tag, Name: tag, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// check runs taloscluster check against the world's forge and asserts no
// secret reaches its output.
func (w *checkLab) check(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	all := append([]string{"check", "-C", w.dir, "--github-api", w.api, "--ca-file", filepath.Join(w.dir, "ca.pem")}, args...)
	code, stdout, stderr := cli(t, all...)
	for _, secret := range []string{w.lab.TokenSecret, checkToken} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("check %v printed a secret", args)
		}
	}
	return code, stdout, stderr
}

// checkJSON runs check -o json and decodes the report.
func (w *checkLab) checkJSON(t *testing.T) (int, *check.Report, string) {
	t.Helper()
	code, stdout, stderr := w.check(t, "-o", "json")
	var r check.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("check -o json: %v\n%s\n%s", err, stdout, stderr)
	}
	if testing.Verbose() {
		t.Logf("check -o json: exit %d\n%s", code, stdout)
	}
	return code, &r, stderr
}

func checkFindingsOf(r *check.Report, kind string) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Kind == kind {
			out = append(out, f.Message)
		}
	}
	return out
}

// TestCheckUpToDate: a converged cluster pinned to the newest Talos patch
// and the newest Kubernetes its Talos runs needs nothing (exit 0); the
// newer Kubernetes minor Talos 1.13 does not run is a note, not an update.
func TestCheckUpToDate(t *testing.T) {
	w := newCheckLab(t, "127.160.0.0/24")
	w.pin(t, forge.TalosV113Newest, forge.KubernetesV136Newest)
	w.converge(t)

	code, stdout, stderr := w.check(t)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	t.Logf("check:\n%s", stdout)
	for _, want := range []string{
		"OK: up to date and in sync, nothing needs attention",
		"talos v1.13.8 runs kubernetes v1.31 to v1.36",
		"kubernetes v1.37.2 is released, but talos v1.13.8 runs kubernetes v1.31 to v1.36: not an update to take",
		"chk-worker-01", "cordoned: none",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text lacks %q", want)
		}
	}

	code, r, stderr := w.checkJSON(t)
	if code != 0 || r.NeedsAttention || r.Incomplete || r.Scope != check.ScopeCluster || len(r.Findings) != 0 {
		t.Fatalf("check -o json: exit %d attention %v incomplete %v scope %s findings %v\n%s", code, r.NeedsAttention, r.Incomplete, r.Scope, r.Findings, stderr)
	}
	if len(r.Nodes) != 4 {
		t.Errorf("%d nodes, want 4", len(r.Nodes))
	}
	for _, n := range r.Nodes {
		if n.Talos.State != check.StateInSync || n.Kubelet.State != check.StateInSync || n.Installer.State != check.StateInSync {
			t.Errorf("node %s: %+v", n.Name, n)
		}
	}
	talos, kube := r.Components[0], r.Components[1]
	if talos.Pinned != "v1.13.8" || talos.LatestPatch != "v1.13.8" || talos.Latest != forge.TalosLatest || talos.PatchesBehind != 0 || talos.Update != nil {
		t.Errorf("talos %+v", talos)
	}
	if kube.LatestPatch != "v1.36.3" || kube.LatestSupported != "v1.36.3" || kube.Latest != forge.KubernetesLatest || kube.Update != nil ||
		kube.Supported == nil || kube.Supported.To != "v1.36" {
		t.Errorf("kubernetes %+v", kube)
	}
}

// TestCheckPatchBehind: a newer Talos patch released after the converge
// makes check exit 1 naming it; two newer Kubernetes patches count as two
// behind.
func TestCheckPatchBehind(t *testing.T) {
	w := newCheckLab(t, "127.161.0.0/24")
	w.pin(t, forge.TalosV113Newest, forge.KubernetesV136Newest)
	w.converge(t)
	w.release(t, forge.TalosRepo, "v1.13.9")

	code, stdout, stderr := w.check(t)
	t.Logf("check:\n%s", stdout)
	if code != 1 || !strings.Contains(stdout, "update: talos v1.13.8 -> v1.13.9: a newer patch release (1 patch release behind)") ||
		!strings.Contains(stdout, "NEEDS ATTENTION: 1 update") {
		t.Fatalf("check after v1.13.9: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}

	w.release(t, forge.KubernetesRepo, "v1.36.4")
	w.release(t, forge.KubernetesRepo, "v1.36.5")
	code, r, _ := w.checkJSON(t)
	if code != 1 || !r.NeedsAttention || r.Incomplete {
		t.Fatalf("exit %d %+v", code, r)
	}
	talos, kube := r.Components[0], r.Components[1]
	if talos.PatchesBehind != 1 || talos.Update == nil || *talos.Update != (check.Update{Kind: check.UpdatePatch, Version: "v1.13.9"}) {
		t.Errorf("talos %+v", talos)
	}
	if kube.PatchesBehind != 2 || kube.Update == nil || kube.Update.Version != "v1.36.5" {
		t.Errorf("kubernetes %+v", kube)
	}
	if got := checkFindingsOf(r, check.KindUpdate); len(got) != 2 || len(r.Findings) != 2 {
		t.Errorf("findings %v", r.Findings)
	}
}

// TestCheckMinorBehind: on the newest patch of an older Kubernetes minor,
// the next minor Talos runs is the update; the one after, which it does
// not run, is not.
func TestCheckMinorBehind(t *testing.T) {
	w := newCheckLab(t, "127.162.0.0/24")
	w.pin(t, forge.TalosV113Newest, forge.KubernetesV135Newest)

	code, r, stderr := w.checkJSON(t)
	if code != 1 || r.Incomplete {
		t.Fatalf("exit %d incomplete %v %v\n%s", code, r.Incomplete, r.IncompleteReasons, stderr)
	}
	kube := r.Components[1]
	if kube.PatchesBehind != 0 || kube.Update == nil || *kube.Update != (check.Update{Kind: check.UpdateMinor, Version: "v1.36.3"}) {
		t.Errorf("kubernetes %+v", kube)
	}
	want := "kubernetes v1.35.3 -> v1.36.3: a newer minor release that talos runs (v1.31 to v1.36)"
	if got := checkFindingsOf(r, check.KindUpdate); !slices.Equal(got, []string{want}) {
		t.Errorf("updates %q, want %q", got, want)
	}

	// A Talos minor that runs the pinned Kubernetes is a Talos update.
	w.release(t, forge.TalosRepo, "v1.14.0")
	_, r, _ = w.checkJSON(t)
	if u := r.Components[0].Update; u == nil || *u != (check.Update{Kind: check.UpdateMinor, Version: "v1.14.0"}) {
		t.Errorf("talos %+v", r.Components[0])
	}
}

// TestCheckDrift: pinning a Talos version the cluster does not run,
// without converging, is drift on every node (version and installer).
func TestCheckDrift(t *testing.T) {
	w := newCheckLab(t, "127.163.0.0/24")
	w.pin(t, forge.TalosV113Newest, forge.KubernetesV136Newest)
	w.converge(t)
	w.release(t, forge.TalosRepo, "v1.13.9")
	w.pin(t, "v1.13.9", forge.KubernetesV136Newest)

	code, stdout, stderr := w.check(t)
	t.Logf("check:\n%s", stdout)
	if code != 1 || !strings.Contains(stdout, "chk-controlplane-01: talos v1.13.8, cluster.yaml wants v1.13.9") {
		t.Fatalf("check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, r, _ := w.checkJSON(t)
	if code != 1 || r.Incomplete || len(checkFindingsOf(r, check.KindUpdate)) != 0 {
		t.Fatalf("exit %d %+v", code, r.Findings)
	}
	if got := checkFindingsOf(r, check.KindDrift); len(got) != 8 {
		t.Errorf("%d drift findings, want 8 (talos and installer of 4 nodes): %q", len(got), got)
	}
	for _, n := range r.Nodes {
		if n.Talos.State != check.StateDrift || n.Talos.Have != "v1.13.8" || n.Talos.Want != "v1.13.9" ||
			n.Installer.State != check.StateDrift || !strings.HasSuffix(n.Installer.Have, ":v1.13.8") || !strings.HasSuffix(n.Installer.Want, ":v1.13.9") ||
			n.Kubelet.State != check.StateInSync {
			t.Errorf("node %s: %+v", n.Name, n)
		}
	}
}

// TestCheckCordon: a node cordoned through the Kubernetes API is reported
// and needs attention.
func TestCheckCordon(t *testing.T) {
	w := newCheckLab(t, "127.164.0.0/24")
	w.pin(t, forge.TalosV113Newest, forge.KubernetesV136Newest)
	w.converge(t)

	kc, err := os.ReadFile(filepath.Join(w.dir, reconcile.KubeconfigFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(t.Context(), "chk-worker-01", types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := w.check(t)
	t.Logf("check:\n%s", stdout)
	if code != 1 || !strings.Contains(stdout, "cordon: chk-worker-01 is cordoned (unschedulable)") || !strings.Contains(stdout, "cordoned: chk-worker-01") {
		t.Fatalf("check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, r, _ := w.checkJSON(t)
	if code != 1 || !slices.Equal(r.Cordoned, []string{"chk-worker-01"}) || len(r.Findings) != 1 || r.Findings[0].Kind != check.KindCordon {
		t.Errorf("exit %d cordoned %v findings %v", code, r.Cordoned, r.Findings)
	}
}

// TestCheckIndexFailure: when the releases cannot be listed, check exits
// 1, incomplete, naming the source and the reason, and reports no update.
func TestCheckIndexFailure(t *testing.T) {
	w := newCheckLab(t, "127.165.0.0/24")
	w.pin(t, forge.TalosV113Newest, forge.KubernetesV136Newest)
	w.forge.Fail("releases.list", 100, 502)

	code, stdout, stderr := w.check(t)
	t.Logf("check:\n%s\nstderr:\n%s", stdout, stderr)
	reason := "releases: listing the releases of siderolabs/talos: 502 Bad Gateway"
	if code != 1 || !strings.Contains(stdout, "INCOMPLETE: "+reason) ||
		!strings.Contains(stderr, "error: the check is incomplete: "+reason) {
		t.Fatalf("check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, r, _ := w.checkJSON(t)
	if code != 1 || !r.Incomplete || len(r.IncompleteReasons) != 2 || !strings.HasPrefix(r.IncompleteReasons[0], reason) ||
		!strings.Contains(r.IncompleteReasons[1], "kubernetes/kubernetes: 502") {
		t.Fatalf("exit %d incomplete %v %q", code, r.Incomplete, r.IncompleteReasons)
	}
	for _, c := range r.Components {
		if c.Unknown == "" || c.Update != nil || c.Latest != "" {
			t.Errorf("component %+v", c)
		}
	}

	// A token the forge does not know is a 401, named as such.
	t.Setenv(envGitHubToken, "ghp_wrongtoken000000000000000000000000")
	code, _, stderr = w.check(t)
	if code != 1 || !strings.Contains(stderr, "401") || strings.Contains(stderr, "ghp_wrongtoken") {
		t.Errorf("wrong token: exit %d\n%s", code, stderr)
	}
}

// TestCheckBeforeTheClusterExists: without machines or identity only the
// versions and warnings are checked, and the report says so; a missing
// include is a warning. The API URL comes from the environment.
func TestCheckBeforeTheClusterExists(t *testing.T) {
	w := newCheckLab(t, "127.166.0.0/24")
	w.pin(t, forge.TalosV113Newest, forge.KubernetesV136Newest)
	t.Setenv(envGitHubAPI, w.api)
	args := []string{"check", "-C", w.dir, "--ca-file", filepath.Join(w.dir, "ca.pem")}

	code, stdout, stderr := cli(t, args...)
	t.Logf("check:\n%s", stdout)
	if code != 0 || !strings.Contains(stdout, "Running cluster: not compared: the cluster does not exist yet (no machines, no talossecrets.yaml): only versions and warnings were checked") {
		t.Fatalf("check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, w.lab.TokenSecret) || strings.Contains(stdout+stderr, checkToken) {
		t.Error("a secret was printed")
	}
	if _, err := os.Stat(filepath.Join(w.dir, reconcile.TalosSecretsFile)); !os.IsNotExist(err) {
		t.Errorf("check wrote the identity: %v", err)
	}

	// Without secrets.yaml (a missing include) it still checks versions.
	if err := os.Remove(filepath.Join(w.dir, "secrets.yaml")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cli(t, append(args, "-o", "json")...)
	var r check.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	if code != 0 || r.Scope != check.ScopeVersions || !strings.Contains(r.ScopeReason, "does not exist yet") || len(r.Nodes) != 0 || r.KubernetesAPI != nil {
		t.Errorf("without secrets.yaml: exit %d %+v", code, r)
	}
	if !slices.ContainsFunc(r.Warnings, func(s string) bool { return strings.Contains(s, "secrets.yaml") }) {
		t.Errorf("no warning about the missing include: %q", r.Warnings)
	}

	// The lab's pins as written (kubernetes v1.36.1) are two patches behind.
	w.pin(t, forge.TalosV113Newest, "v1.36.1")
	code, stdout, _ = cli(t, args...)
	if code != 1 || !strings.Contains(stdout, "kubernetes v1.36.1 -> v1.36.3: a newer patch release (2 patch releases behind)") {
		t.Errorf("lab pins: exit %d\n%s", code, stdout)
	}
}

// TestCheckUsage: a bad output format is a usage error.
func TestCheckUsage(t *testing.T) {
	t.Parallel()
	if code, _, stderr := cli(t, "check", "-o", "yaml", "-C", t.TempDir()); code != 2 || !strings.Contains(stderr, "unknown output format") {
		t.Errorf("check -o yaml: exit %d\n%s", code, stderr)
	}
}
