package main

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// A cluster name belongs to one directory. A pull request that adds a
// directory holding a copy of another cluster's cluster.yaml (with a
// destroy marker, even) is refused in its plan naming both paths; merged
// anyway, the copy is never converged and destroys nothing, and the real
// cluster keeps converging.
func TestAgentNeverLetsTwoDirectoriesShareACluster(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.60.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	vms := len(w.lab.PVE.VMs())

	copyFiles := map[string]string{
		"clusters/copy/cluster.yaml": w.cluster,
		"clusters/copy/ca.pem":       string(w.lab.CA.PEM()),
		"clusters/copy/DESTROY":      "demo\n",
	}
	head, err := w.repo.Commit("copy", copyFiles, "a copy of demo, with a destroy marker")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "copy", "main", "Copy demo")
	if err != nil {
		t.Fatal(err)
	}
	const plan = "taloscluster/plan: clusters/copy"
	w.pollUntil(t, "the copy's plan status", func() bool {
		st := w.status(head, plan)
		return st != "" && st != "pending"
	})
	w.agent.Wait()
	desc := w.description(head, plan)
	if w.status(head, plan) != "failure" || !strings.Contains(desc, `cluster name "demo"`) || !strings.Contains(desc, "clusters/demo") {
		t.Fatalf("the copy's plan status is %s %q, want a refusal naming the name and clusters/demo", w.status(head, plan), desc)
	}
	var body string
	for _, c := range w.repo.Comments(pr.Number) {
		body += c.Body
	}
	if !strings.Contains(body, "clusters/copy") || !strings.Contains(body, "clusters/demo (on the default branch)") {
		t.Fatalf("the plan comment does not name both directories:\n%s", body)
	}

	// Merged anyway (an admin overriding the failed status): the copy is
	// refused, nothing is destroyed or created, and the copy's state has no
	// identity of its own.
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	const converge = "taloscluster/converge: clusters/copy"
	w.pollUntil(t, "the copy's converge status", func() bool { return w.final(merge, converge) })
	w.agent.Wait()
	if st, d := w.status(merge, converge), w.description(merge, converge); st != "failure" || !strings.Contains(d, "refused") {
		t.Fatalf("the copy's converge ended %s %q, want a refusal", st, d)
	}
	if n := len(w.lab.PVE.VMs()); n != vms {
		t.Fatalf("%d VMs after the copy was merged, want %d", n, vms)
	}
	store, err := agentStore(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(context.Background(), "clusters/copy", "talossecrets.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the copy has an identity of its own (err %v)", err)
	}

	// The real cluster still converges.
	grown := strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)
	next, err := w.repo.Commit("main", map[string]string{"clusters/demo/cluster.yaml": grown}, "grow demo")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "demo's converge", func() bool { return w.final(next, "taloscluster/converge: clusters/demo") })
	if st := w.status(next, "taloscluster/converge: clusters/demo"); st != "success" {
		t.Fatalf("demo's converge after the copy: %s %q", st, w.description(next, "taloscluster/converge: clusters/demo"))
	}
	for _, s := range w.secrets {
		if strings.Contains(body+w.logs.String(), s) {
			t.Fatal("a secret leaked")
		}
	}
}

// Two new directories of one pull request that share a cluster name are
// both refused, each naming the other.
func TestAgentRefusesTwoNewDirectoriesWithOneName(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.61.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	twin := strings.Replace(w.cluster, "name: demo\n", "name: twin\n", 1)
	if twin == w.cluster {
		t.Fatalf("the lab's cluster.yaml has no name: demo line:\n%s", w.cluster)
	}
	head, err := w.repo.Commit("twins", map[string]string{
		"clusters/a/cluster.yaml": twin, "clusters/a/ca.pem": string(w.lab.CA.PEM()),
		"clusters/b/cluster.yaml": twin, "clusters/b/ca.pem": string(w.lab.CA.PEM()),
	}, "two directories, one cluster")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.repo.OpenPR("alice", "twins", "main", "Twins"); err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan statuses", func() bool {
		for _, d := range []string{"a", "b"} {
			if st := w.status(head, "taloscluster/plan: clusters/"+d); st == "" || st == "pending" {
				return false
			}
		}
		return true
	})
	for d, other := range map[string]string{"a": "b", "b": "a"} {
		ctx := "taloscluster/plan: clusters/" + d
		if st, desc := w.status(head, ctx), w.description(head, ctx); st != "failure" || !strings.Contains(desc, "clusters/"+other+" (in this pull request)") {
			t.Errorf("clusters/%s: plan status %s %q, want a refusal naming clusters/%s", d, st, desc, other)
		}
	}
}

// A change to a file a cluster reads plans that cluster wherever the file
// lives: demo includes a file that sits inside a nested cluster's
// directory, and a pull request changing only that file is planned for
// both clusters, not only for the nested one.
func TestAgentPlansEveryClusterThatReadsAChangedFile(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.78.0.0/24")
	withInclude := strings.Replace(w.cluster, "include: [secrets.yaml]\n", "include: [secrets.yaml, team/shared.yaml]\n", 1)
	if withInclude == w.cluster {
		t.Fatalf("the lab's cluster.yaml has no include line:\n%s", w.cluster)
	}
	nested := strings.Replace(w.cluster, "name: demo\n", "name: team\n", 1)
	base, err := w.repo.Commit("main", map[string]string{
		"clusters/demo/cluster.yaml":      withInclude,
		"clusters/demo/team/shared.yaml":  "# settings both clusters share\n{}\n",
		"clusters/demo/team/cluster.yaml": nested,
		"clusters/demo/team/ca.pem":       string(w.lab.CA.PEM()),
	}, "demo reads a file in the team cluster's directory")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the first converge", func() bool {
		return w.final(base, "taloscluster/converge: clusters/demo")
	})
	w.agent.Wait()
	head, err := w.repo.Commit("shared", map[string]string{
		"clusters/demo/team/shared.yaml": "# settings both clusters share, touched\n{}\n",
	}, "change the shared file only")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.repo.OpenPR("alice", "shared", "main", "Shared"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"clusters/demo", "clusters/demo/team"} {
		ctx := "taloscluster/plan: " + c
		w.pollUntil(t, "the plan of "+c, func() bool {
			st := w.status(head, ctx)
			return st != "" && st != "pending"
		})
	}
}

// A cluster directory whose cluster.yaml is a symbolic link is not read,
// and its plan status says so instead of nothing.
func TestAgentSaysWhyASymlinkedClusterIsSkipped(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.62.0.0/24")
	if _, err := w.repo.Commit("link", map[string]string{"clusters/linked/real.yaml": w.cluster}, "a cluster file"); err != nil {
		t.Fatal(err)
	}
	head, err := w.repo.Symlink("link", "clusters/linked/cluster.yaml", "real.yaml", "cluster.yaml as a link")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.repo.OpenPR("alice", "link", "main", "Linked"); err != nil {
		t.Fatal(err)
	}
	const ctx = "taloscluster/plan: clusters/linked"
	w.pollUntil(t, "the linked directory's status", func() bool { return w.status(head, ctx) != "" })
	if st, d := w.status(head, ctx), w.description(head, ctx); st != "failure" || !strings.Contains(d, "symbolic link") {
		t.Fatalf("the linked directory's plan status is %s %q, want a failure naming the link", st, d)
	}
}

// A converge that resumes after a restart reports on the pull request
// whose merge changed the cluster, even when a later commit that did not
// touch it is the head it converges.
func TestAgentResumedConvergeReportsOnTheMergeThatChangedTheCluster(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.63.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	w.agent.Wait()
	w.agent.Close()

	// While the agent is down: a merge that grows demo, then a commit
	// that touches only the README.
	grown := strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)
	merge, pr := w.merge(t, "grow", map[string]string{"clusters/demo/cluster.yaml": grown})
	if _, err := w.repo.Commit("main", map[string]string{"README.md": "clusters, documented\n"}, "docs"); err != nil {
		t.Fatal(err)
	}
	a, handler, err := buildAgent(t.Context(), w.cfg, w.logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	w.agent, w.http = a, handler
	const ctx = "taloscluster/converge: clusters/demo"
	w.pollUntil(t, "the resumed converge", func() bool { return w.final(merge, ctx) })
	w.agent.Wait()
	if st := w.status(merge, ctx); st != "success" {
		t.Fatalf("the merge's converge status is %s %q", st, w.description(merge, ctx))
	}
	var found bool
	for _, c := range w.repo.Comments(pr) {
		found = found || strings.Contains(c.Body, "**taloscluster converge** of `clusters/demo`")
	}
	if !found {
		t.Fatalf("no converge comment on #%d, the pull request that grew demo: %+v", pr, w.repo.Comments(pr))
	}
}

// A pull request that deletes a cluster directory gets a plan saying that
// merging destroys nothing and how to destroy the cluster; merged, the
// machines keep running.
func TestAgentPlansADeletedDirectory(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.65.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	w.agent.Wait()
	vms := len(w.lab.PVE.VMs())
	head, err := w.repo.Remove("unmanage", []string{"clusters/demo"}, "stop managing demo")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "unmanage", "main", "Unmanage demo")
	if err != nil {
		t.Fatal(err)
	}
	const ctx = "taloscluster/plan: clusters/demo"
	w.pollUntil(t, "the deletion's plan", func() bool { return w.final(head, ctx) })
	if st, d := w.status(head, ctx), w.description(head, ctx); st != "success" || !strings.Contains(d, "nothing is destroyed") {
		t.Fatalf("the deletion's plan status is %s %q", st, d)
	}
	w.agent.Wait()
	var body string
	for _, c := range w.repo.Comments(pr.Number) {
		body += c.Body
	}
	if !strings.Contains(body, "Merging it destroys nothing") || !strings.Contains(body, "DESTROY") {
		t.Fatalf("the plan comment does not say the cluster keeps running and how to destroy it:\n%s", body)
	}
	if _, err := w.repo.Merge(pr.Number, "alice"); err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the merge seen", func() bool { return strings.Contains(w.logs.String(), "cluster directory removed; not destroying") })
	w.agent.Wait()
	if n := len(w.lab.PVE.VMs()); n != vms {
		t.Fatalf("%d VMs after the directory was deleted, want %d", n, vms)
	}
}
