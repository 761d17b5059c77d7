package main

import (
	"runtime"
	"strings"
	"testing"
)

// A path in a pull request's cluster.yaml is a file of the cluster's
// directory in the pull request's tree, never of the agent's host: a CA
// bundle at /dev/zero (which once grew the agent to 1.9 GB and crash-looped
// it), at a readable host file, or up out of the directory gets a failed
// plan status naming proxmox.tls_verify, even with allow_tls_changes, and
// nothing of the host is read. Merged anyway, the converge fails the same
// way.
func TestAgentReadsClusterPathsOnlyFromTheTree(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.236.0.0/24")
	// TLS changes are allowed: only where the bundle comes from is checked.
	w.cfg.AllowTLSChanges = true
	w.restart(t)
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	const tlsLine = "tls_verify: ca.pem            # the lab's CA: TLS is verified"
	if !strings.Contains(w.cluster, tlsLine) {
		t.Fatalf("the lab's cluster.yaml changed; update this test:\n%s", w.cluster)
	}
	hostCA := w.cfg.GitHub.CAFile // a real CA bundle on the agent's host
	cases := []struct {
		branch, caFile string
		extra          map[string]string
		reason         string
	}{
		{branch: "dev-zero", caFile: "/dev/zero", reason: "proxmox.tls_verify: /dev/zero is an absolute path"},
		{branch: "host-ca", caFile: hostCA, reason: "proxmox.tls_verify: " + hostCA + " is an absolute path"},
		{branch: "parent", caFile: "../shared/ca.pem", extra: map[string]string{"clusters/shared/ca.pem": "not read"},
			reason: "proxmox.tls_verify: ../shared/ca.pem leaves the cluster's directory"},
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	heads := map[string]string{}
	for _, c := range cases {
		files := map[string]string{"clusters/demo/cluster.yaml": strings.Replace(w.cluster, tlsLine, "tls_verify: "+c.caFile, 1)}
		for k, v := range c.extra {
			files[k] = v
		}
		head, err := w.repo.Commit(c.branch, files, c.branch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.repo.OpenPR("alice", c.branch, "main", c.branch); err != nil {
			t.Fatal(err)
		}
		heads[c.branch] = head
	}
	const planCtx = "taloscluster/plan: clusters/demo"
	w.pollUntil(t, "the plan statuses", func() bool {
		for _, h := range heads {
			if !w.final(h, planCtx) {
				return false
			}
		}
		return true
	})
	w.agent.Wait()
	for _, c := range cases {
		desc := w.description(heads[c.branch], planCtx)
		if st := w.status(heads[c.branch], planCtx); st != "failure" || !strings.Contains(desc, c.reason) {
			t.Errorf("%s: plan status %s %q, want a failure saying %q", c.branch, st, desc, c.reason)
		}
	}

	// Merged anyway: the converge reads no host file either.
	merge, _ := w.merge(t, "dev-zero-merged", map[string]string{
		"clusters/demo/cluster.yaml": strings.Replace(w.cluster, tlsLine, "tls_verify: /dev/zero", 1)})
	const convergeCtx = "taloscluster/converge: clusters/demo"
	w.pollUntil(t, "the converge status of the merge", func() bool { return w.final(merge, convergeCtx) })
	if st, desc := w.status(merge, convergeCtx), w.description(merge, convergeCtx); st != "failure" || !strings.Contains(desc, "proxmox.tls_verify: /dev/zero is an absolute path") {
		t.Errorf("converge status %s %q, want a failure naming proxmox.tls_verify", st, desc)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<30 {
		t.Errorf("the agent allocated %d MiB planning and converging these", grew>>20)
	}
	for _, s := range w.secrets {
		if strings.Contains(w.logs.String(), s) {
			t.Error("a secret reached the agent's log")
		}
	}
}
