package main

import (
	"strings"
	"testing"
)

// TestAgentRefusesACommitPushedAfterTheReviewedPlan: under
// require_reviewed_plan, a commit pushed to a pull request after its plan
// was shown and merged before the agent planned it, changing only what a
// new node is given (its pool's config_patches and tags, so its machine
// config and node labels), is refused: the plan about to run differs from
// the reviewed one in the new machine's config digest and labels. The
// converge comment names the reviewed commit and the merge. A pull request
// whose plan was shown then converges that plan, which ran at a commit
// other than the one it was shown at: the digests are stable.
func TestAgentRefusesACommitPushedAfterTheReviewedPlan(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.223.0.0/24")
	const converge = "taloscluster/converge: clusters/demo"
	main, err := w.repo.Branch("main")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the first converge", func() bool { return w.status(main, converge) == "success" })
	w.cfg.RequireReviewedPlan = true
	w.restart(t)

	// The pull request adds a worker pool: changing the patches or tags
	// of a pool with running nodes would change their configs, which is
	// refused on its own.
	const pool = "    disk: 50\n"
	const gpu = pool + "  gpu:\n    count: 1\n    cores: 2\n    memory: 4\n    disk: 20\n"
	grown := strings.Replace(w.cluster, pool, gpu, 1)
	if grown == w.cluster {
		t.Fatal("the worker pool was not found in cluster.yaml")
	}
	head1, err := w.repo.Commit("grow", map[string]string{"clusters/demo/cluster.yaml": grown}, "add a worker pool")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "grow", "main", "Add a worker")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan of the pull request", func() bool {
		return w.status(head1, "taloscluster/plan: clusters/demo") != "" && w.status(head1, "taloscluster/plan: clusters/demo") != "pending"
	})
	if s := w.status(head1, "taloscluster/plan: clusters/demo"); s != "success" {
		t.Fatalf("plan status %s", s)
	}

	// A push after the plan: the new worker gets a patch and a tag. It is
	// merged before the agent plans it.
	tagged := strings.Replace(grown, gpu,
		gpu+"    tags:\n      team: payments\n    config_patches:\n      - |\n        machine:\n          sysctls:\n            vm.nr_hugepages: \"64\"\n", 1)
	if tagged == grown {
		t.Fatal("the worker pool was not found in cluster.yaml")
	}
	if _, err := w.repo.Commit("grow", map[string]string{"clusters/demo/cluster.yaml": tagged}, "tag the workers"); err != nil {
		t.Fatal(err)
	}
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the refused converge", func() bool { s := w.status(merge, converge); return s != "" && s != "pending" })
	if s := w.status(merge, converge); s != "failure" {
		t.Fatalf("converge of a commit pushed after the plan: %s, want failure", s)
	}
	if n := len(w.lab.PVE.VMs()); n != 4 {
		t.Fatalf("%d VMs after the refused converge, want the 4 there were", n)
	}
	var comment string
	for _, c := range w.repo.Comments(pr.Number) {
		if strings.Contains(c.Body, "taloscluster converge") {
			comment = c.Body
		}
	}
	for _, want := range []string{
		"**Refused:** `require_reviewed_plan` is set",
		"at `" + head1[:10] + "`, the reviewed commit; the commit it would have converged is `" + merge[:10] + "`",
		"+ compute provider create machine demo-gpu-01 ",
		"- compute provider create machine demo-gpu-01 ",
		"team=payments",
	} {
		if !strings.Contains(comment, want) {
			t.Errorf("the converge comment lacks %q:\n%s", want, comment)
		}
	}
	if !strings.Contains(comment, "config=\"sha256:") {
		t.Errorf("the comment does not show the config digest:\n%s", comment)
	}

	// A pull request whose plan was shown converges it.
	head3, err := w.repo.Commit("note", map[string]string{"clusters/demo/notes.txt": "tagged\n"}, "note")
	if err != nil {
		t.Fatal(err)
	}
	pr2, err := w.repo.OpenPR("alice", "note", "main", "Note")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan of the second pull request", func() bool {
		return w.status(head3, "taloscluster/plan: clusters/demo") != "" && w.status(head3, "taloscluster/plan: clusters/demo") != "pending"
	})
	if s := w.status(head3, "taloscluster/plan: clusters/demo"); s != "success" {
		t.Fatalf("plan status of the second pull request %s", s)
	}
	merge2, err := w.repo.Merge(pr2.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the reviewed converge", func() bool {
		s := w.status(merge2, converge)
		return s == "success" || s == "failure" || s == "error"
	})
	comment = ""
	for _, c := range w.repo.Comments(pr2.Number) {
		if strings.Contains(c.Body, "taloscluster converge") {
			comment = c.Body
		}
	}
	if s := w.status(merge2, converge); s != "success" {
		t.Fatalf("converge of the reviewed plan: %s\n%s\nagent log:\n%s", s, comment, w.logs.String())
	}
	if n := len(w.lab.PVE.VMs()); n != 5 {
		t.Fatalf("%d VMs after the reviewed converge, want 5", n)
	}
	if want := "The plan that ran is the plan shown on this pull request at `" + head3[:10] + "`, the reviewed commit; the commit converged is `" + merge2[:10] + "`."; !strings.Contains(comment, want) {
		t.Errorf("the converge comment lacks %q:\n%s", want, comment)
	}
}
