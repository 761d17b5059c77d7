package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile"
)

// pveAPI calls the lab's Proxmox API as an operator or another tool would
// and returns the answer's data; it fails the test unless the answer is
// 2xx.
func pveAPI(t *testing.T, l *lab.Lab, method, path string, form url.Values) json.RawMessage {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: l.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(t.Context(), method, l.PVEURL+"/api2/json"+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+l.TokenID+"="+l.TokenSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, body)
	}
	var out struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return out.Data
}

// pveMutations counts the lab's Proxmox requests that are not reads.
func pveMutations(l *lab.Lab) int {
	n := 0
	for _, op := range l.PVE.Log() {
		if op.Method != http.MethodGet {
			n++
		}
	}
	return n
}

// TestUnownedVMWithAMachineNameIsRefused creates, directly through the
// lab's Proxmox API and just before plan and converge, a VM that has the
// name of one of the cluster's machines but is not the cluster's (no tags
// and no pool; in a pool of its own without tags). pvestatd has not
// broadcast it yet, so /cluster/resources lists it without a name (its
// broadcast is made late for the whole test, so that this holds however
// slow the machine is). plan refuses it with the wording, naming
// its id and node; converge exits 1 and creates nothing, not even the
// cluster identity.
func TestUnownedVMWithAMachineNameIsRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, net, pool string
	}{
		{"no tags and no pool", "127.240.0.0/24", ""},
		{"another pool", "127.241.0.0/24", "ops"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, err := lab.Start(t.Context(), lab.Options{
				Bridges:      map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix(c.net)},
				TaskDuration: -1, BootDelay: 20 * time.Millisecond, InstallDelay: 20 * time.Millisecond,
				RebootDelay: 20 * time.Millisecond, ReadyDelay: 50 * time.Millisecond,
				// pvestatd's broadcast, late: the VM below stays unnamed
				// in /cluster/resources for the whole test.
				StatsInterval: 10 * time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.Close)
			dir := t.TempDir()
			if err := l.WriteCluster(dir, lab.Cluster{Name: "twin", Workers: 1, Bridge: "vmbr0"}); err != nil {
				t.Fatal(err)
			}
			// The broadcast is taken now, before the VM exists.
			pveAPI(t, l, http.MethodGet, "/cluster/resources", nil)
			if c.pool != "" {
				pveAPI(t, l, http.MethodPost, "/pools", url.Values{"poolid": {c.pool}})
			}
			form := url.Values{"vmid": {"4242"}, "name": {"twin-controlplane-02"}, "cores": {"2"}, "memory": {"2048"},
				"net0": {"virtio,bridge=vmbr0"}}
			if c.pool != "" {
				form.Set("pool", c.pool)
			}
			pveAPI(t, l, http.MethodPost, "/nodes/pve2/qemu", form)
			waitFor(t, "the VM's create task", func() bool {
				var conf map[string]any
				_ = json.Unmarshal(pveAPI(t, l, http.MethodGet, "/nodes/pve2/qemu/4242/config", nil), &conf)
				return conf["name"] == "twin-controlplane-02"
			})
			unnamed := func() bool {
				var list []map[string]any
				_ = json.Unmarshal(pveAPI(t, l, http.MethodGet, "/cluster/resources?type=vm", nil), &list)
				for _, r := range list {
					if r["vmid"] == float64(4242) {
						return r["name"] == nil && r["status"] == "unknown"
					}
				}
				return false
			}
			if !unnamed() {
				t.Fatal("/cluster/resources already names the VM: the test does not show pvestatd's lag")
			}

			const refusal = "refusing to adopt unowned VM twin-controlplane-02 (id 4242) on pve2: "
			code, stdout, stderr := cli(t, "plan", "-C", dir)
			if code != 1 || !strings.Contains(stdout, refusal) || !strings.Contains(stdout, "rename or remove it, or tag it") {
				t.Fatalf("plan: exit %d, want 1 and the refusal %q\nstdout:\n%s\nstderr:\n%s", code, refusal, stdout, stderr)
			}
			before, vms := pveMutations(l), len(l.PVE.VMs())
			code, stdout, stderr = cli(t, "converge", "--yes", "-C", dir)
			if code == 0 || !strings.Contains(stdout+stderr, refusal) {
				t.Fatalf("converge: exit %d, want non-zero and the refusal %q\nstdout:\n%s\nstderr:\n%s", code, refusal, stdout, stderr)
			}
			if n := pveMutations(l) - before; n != 0 {
				t.Errorf("the refused converge made %d mutating Proxmox calls", n)
			}
			if got := l.PVE.VMs(); len(got) != vms {
				t.Errorf("converge left %d VMs, want %d (the unowned one only): %+v", len(got), vms, got)
			}
			for _, v := range l.PVE.VMs() {
				if v.ID == 4242 && (v.Running || len(v.Tags) > 0) {
					t.Errorf("the unowned VM was touched: running=%v tags=%v", v.Running, v.Tags)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, reconcile.TalosSecretsFile)); !os.IsNotExist(err) {
				t.Errorf("the refused converge minted %s: %v", reconcile.TalosSecretsFile, err)
			}
			if !unnamed() {
				t.Error("/cluster/resources named the VM during the test: pvestatd's lag was not exercised throughout")
			}
		})
	}
}

// waitFor polls cond until it holds, for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTalosVersionOutsideTheEngineIsRefused sets talos.version to minors
// the engine does not implement: validate accepts them, as the Python tool
// does, but plan (live and offline) and converge refuse them before the
// first mutation, naming the range the engine implements.
func TestTalosVersionOutsideTheEngineIsRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		version, net, why string
	}{
		{"v1.14.0", "127.242.0.0/24", "its API behaviour differs: Talos 1.14 changes apply-config"},
		{"v1.15.2", "127.243.0.0/24", "the engine was not built for its API"},
	}
	for _, c := range cases {
		t.Run(c.version, func(t *testing.T) {
			t.Parallel()
			l, dir := labCluster(t, c.net, "future", 0)
			data, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), "version: v1.13.8") {
				t.Fatalf("the lab's cluster.yaml has no talos.version v1.13.8:\n%s", data)
			}
			write(t, dir, "cluster.yaml", strings.Replace(string(data), "version: v1.13.8", "version: "+c.version, 1))
			if code, stdout, stderr := cli(t, "validate", "-C", dir); code != 0 {
				t.Fatalf("validate: exit %d, want 0 (the Python tool accepts %s)\n%s%s", code, c.version, stdout, stderr)
			}
			refusal := "talos.version " + c.version + ": this engine implements Talos v1.13.x only (" + c.why
			for _, args := range [][]string{{"plan"}, {"plan", "--offline"}} {
				code, stdout, stderr := cli(t, append(args, "-C", dir)...)
				if code != 1 || !strings.Contains(stdout, refusal) {
					t.Errorf("%s: exit %d, want 1 and %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, refusal, stdout, stderr)
				}
			}
			before := pveMutations(l)
			code, stdout, stderr := cli(t, "converge", "--yes", "-C", dir)
			if code != 1 || !strings.Contains(stdout+stderr, refusal) {
				t.Errorf("converge: exit %d, want 1 and %q\nstdout:\n%s\nstderr:\n%s", code, refusal, stdout, stderr)
			}
			if n := pveMutations(l) - before; n != 0 || len(l.PVE.VMs()) != 0 {
				t.Errorf("the refused converge made %d mutating Proxmox calls and left %d VMs", n, len(l.PVE.VMs()))
			}
			if _, err := os.Stat(filepath.Join(dir, reconcile.TalosSecretsFile)); !os.IsNotExist(err) {
				t.Errorf("the refused converge minted %s: %v", reconcile.TalosSecretsFile, err)
			}
		})
	}
}

// TestMissingKubeconfigOfALiveClusterIsRecovered converges a lab cluster
// and deletes its kubeconfig: plan shows the kubeconfig step as a
// recovery, status says the kubeconfig is missing and how converge
// recovers it (and still lists the nodes), never that the cluster was not
// bootstrapped; converge writes it back.
func TestMissingKubeconfigOfALiveClusterIsRecovered(t *testing.T) {
	t.Parallel()
	_, dir := labCluster(t, "127.244.0.0/24", "lost", 0)
	if code, stdout, stderr := cli(t, "converge", "--yes", "-C", dir); code != 0 {
		t.Fatalf("converge: exit %d\n%s%s", code, stdout, stderr)
	}
	kubeconfig := filepath.Join(dir, reconcile.KubeconfigFile)
	if err := os.Remove(kubeconfig); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := cli(t, "plan", "-C", dir)
	if code != 0 || !regexp.MustCompile(`(?m)^\s*\+\s+kubeconfig\s+kubeconfig\s+recover kubeconfig: the state has none, but the cluster exists`).MatchString(stdout) {
		t.Errorf("plan: exit %d, want 0 and the kubeconfig step as a recovery\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "bootstrap etcd") || strings.Contains(stdout, "talossecrets.yaml  new cluster identity") {
		t.Errorf("the plan of a live cluster bootstraps or mints an identity:\n%s", stdout)
	}

	code, stdout, stderr = cli(t, "status", "-C", dir)
	out := stdout + stderr
	if code != 0 || !strings.Contains(out, "the kubeconfig is missing from the cluster's state, but the cluster exists") ||
		!strings.Contains(out, "converge recovers it") || strings.Contains(out, "not been bootstrapped") {
		t.Errorf("status: exit %d, want 0, the kubeconfig called missing with how converge recovers it\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, n := range []string{"lost-controlplane-01", "lost-controlplane-02", "lost-controlplane-03"} {
		if !regexp.MustCompile(`(?m)^` + n + `\s+Ready\s`).MatchString(stdout) {
			t.Errorf("status does not list node %s as Ready:\n%s", n, stdout)
		}
	}

	if code, stdout, stderr := cli(t, "converge", "--yes", "-C", dir); code != 0 {
		t.Fatalf("converge after the kubeconfig was lost: exit %d\n%s%s", code, stdout, stderr)
	}
	if fi, err := os.Stat(kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("converge did not write the kubeconfig back with mode 0600: %v %v", fi, err)
	}
	code, stdout, stderr = cli(t, "status", "-C", dir)
	if code != 0 || strings.Contains(stdout+stderr, "kubeconfig") {
		t.Errorf("status after the recovery: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
