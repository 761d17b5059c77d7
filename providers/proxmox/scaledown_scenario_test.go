package proxmox_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/internal/labtest"
	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/pve"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// Scale-down scenarios of Proxmox's own rules (the token's privileges, the
// config ISOs): each proves one rule of docs/safety.md against the lab,
// from the lab's operation log. The scenarios of the rules every provider
// keeps run against Proxmox and OpenStack in providers/scenario; the
// helpers here serve this package's other lab tests too.

// built starts a lab and converges a cluster of three control planes and
// the given workers.
func built(t *testing.T, name string, workers int) (*world, context.Context) {
	t.Helper()
	w := newWorld(t, name, workers)
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
				if e.Op != "get nodes" && e.Op != "list nodes" && !strings.HasPrefix(e.Op, "qemu.status") {
					lines = append(lines, e.Source+" "+e.Op+" "+e.Target+" "+e.Result)
				}
			}
			t.Fatalf("no %s %s %s after entry %d; the log:\n%s", s[0], s[1], s[2], at, strings.Join(lines, "\n"))
		}
		at = i + 1
	}
}

func vmID(t *testing.T, w *world, name string) (string, bool) {
	t.Helper()
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == name {
			return "/qemu/" + strconv.Itoa(v.ID), true
		}
	}
	return "", false
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

// vm returns the lab's VM of that name.
func (w *world) vm(t *testing.T, name string) pve.VMState {
	t.Helper()
	for _, v := range w.lab.PVE.VMs() {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no VM %s", name)
	return pve.VMState{}
}

// stopVM powers a VM off through the Proxmox API, as a crash would look,
// and waits until it is stopped.
func (w *world) stopVM(t *testing.T, name string) {
	t.Helper()
	v := w.vm(t, name)
	w.pve(t, http.MethodPost, fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", v.Node, v.ID), nil)
	waitFor(t, name+" stopped", func() bool { return !w.vm(t, name).Running })
}

func waitFor(t *testing.T, what string, cond func() bool) { t.Helper(); labtest.WaitFor(t, what, cond) }

func TestScenarioRestrictedTokenRefusesScaleDown(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "perm", 2)
	secrets := fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", w.lab.RestrictedTokenID, w.lab.RestrictedTokenSecret)
	if err := os.WriteFile(filepath.Join(w.dir, "secrets.yaml"), []byte(secrets), 0o600); err != nil {
		t.Fatal(err)
	}
	w.set(t, "workers.worker.count", "1")
	mark := time.Now()
	err := w.engine(t).Converge(ctx)
	if err == nil || !strings.Contains(err.Error(), "VM.Allocate on /vms/") || !strings.Contains(err.Error(), w.name+"-worker-02") {
		t.Fatalf("scale-down with a token that cannot delete VMs: %v, want a refusal naming VM.Allocate, the path and the machine", err)
	}
	for _, e := range since(w.lab, mark) {
		if e.Source == "proxmox" && !strings.HasPrefix(e.Target, "GET ") {
			t.Errorf("the refused scale-down called %s %s", e.Op, e.Target)
		}
		if e.Source == "kubernetes" && !strings.HasPrefix(e.Op, "get ") && !strings.HasPrefix(e.Op, "list ") {
			t.Errorf("the refused scale-down changed Kubernetes: %s %s", e.Op, e.Target)
		}
		if e.Source == "talos" && e.Op == "Reset" {
			t.Error("the refused scale-down reset a node")
		}
	}
}

// TestScenarioOrphanedConfigISOIsDeleted: a config ISO of a machine that
// has no VM and is not desired (a run was killed between deleting a VM
// and its ISO, or a create failed) holds a machine config: converge and
// destroy delete it. One of another cluster whose name starts with this
// one's is left alone.
func TestScenarioOrphanedConfigISOIsDeleted(t *testing.T) {
	t.Parallel()
	w, ctx := built(t, "orphan", 1)
	upload := func(name string) {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("content", "iso")
		fw, err := mw.CreateFormFile("filename", name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write([]byte("machine config"))
		_ = mw.Close()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.lab.CA.Pool(), MinVersion: tls.VersionTLS12}}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.lab.PVEURL+"/api2/json/nodes/pve1/storage/local/upload", &body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "PVEAPIToken="+w.lab.TokenID+"="+w.lab.TokenSecret)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("upload %s: %s", name, resp.Status)
		}
		waitFor(t, name+" uploaded", func() bool { return hasVolume(w, "local:iso/"+name) })
	}
	mine, theirs := "cidata-"+w.name+"-worker-07.iso", "cidata-"+w.name+"-x-worker-01.iso"
	upload(mine)
	upload(theirs)
	p, err := w.engine(t).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Changes, func(ch plan.Change) bool {
		return ch.Resource.Kind == plan.KindCIData && ch.Action == plan.ActionDelete && ch.Resource.Name == w.name+"-worker-07"
	}) {
		t.Fatalf("the orphaned config ISO is not deleted by the plan: %s", p.Summary())
	}
	if err := w.engine(t).Converge(ctx); err != nil {
		t.Fatalf("converge: %v", err)
	}
	if hasVolume(w, "local:iso/"+mine) {
		t.Error("the orphaned config ISO is still there")
	}
	if !hasVolume(w, "local:iso/"+theirs) {
		t.Error("the config ISO of another cluster was deleted")
	}
}

func hasVolume(w *world, volid string) bool {
	for _, v := range w.lab.PVE.Volumes() {
		if v.VolID == volid {
			return true
		}
	}
	return false
}
