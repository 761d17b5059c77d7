package main

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// A pull request that adds 2,100 cluster directories, opened while a
// merge's reports wait for GitHub, gets one comment and one status saying
// it changes too many clusters, and nothing per cluster; every report of
// the merge arrives, and no report is dropped.
func TestAgentBoundsAPullRequestOfManyClusters(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.232.0.0/24")
	w.cfg.ReportRetry = retry.Policy{Initial: 2 * time.Second, Max: 2 * time.Second}
	w.restart(t)
	w.convergedFirst(t)
	head, grow := w.openGrowPR(t)
	w.pollUntil(t, "the plan", func() bool { return w.status(head, "taloscluster/plan: clusters/demo") == "success" })
	w.agent.Wait()
	growComments := len(w.repo.Comments(grow.Number))

	// The merge's first status is refused once: its reports wait for the
	// retry while the large pull request comes in.
	merge, err := w.repo.Merge(grow.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.forge.Fail("statuses.create", 1, 502)
	const many = 2100
	files := map[string]string{}
	for i := range many {
		files[fmt.Sprintf("clusters/bulk%04d/cluster.yaml", i)] = strings.Replace(w.cluster, "name: demo\n", fmt.Sprintf("name: bulk%04d\n", i), 1)
	}
	bulkHead, err := w.repo.Commit("bulk", files, "add many clusters")
	if err != nil {
		t.Fatal(err)
	}
	bulk, err := w.repo.OpenPR("alice", "bulk", "main", "Many clusters")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the merge's reports and the large pull request's comment", func() bool {
		return w.status(merge, "taloscluster/converge: clusters/demo") == "success" &&
			len(w.repo.Comments(grow.Number)) > growComments && len(w.repo.Comments(bulk.Number)) > 0
	})
	w.agent.Wait()

	if c := w.repo.Comments(bulk.Number); len(c) != 1 || !strings.Contains(c[0].Body, fmt.Sprintf("changes %d clusters, more than the 200", many)) {
		t.Fatalf("the large pull request has %d comments, want one saying it changes too many clusters: %+v", len(c), c)
	}
	statuses := w.repo.Statuses(bulkHead)
	if len(statuses) != 1 || statuses[0].Context != "taloscluster/plan" || statuses[0].State != "failure" ||
		!strings.Contains(statuses[0].Description, "max_clusters_per_pr") {
		t.Fatalf("the large pull request's head has %d statuses, want one failure naming max_clusters_per_pr: %+v", len(statuses), statuses[:min(len(statuses), 3)])
	}
	if c := w.repo.Comments(grow.Number); !strings.Contains(c[len(c)-1].Body, "clusters/demo") {
		t.Fatalf("the merge's comment: %+v", c[len(c)-1])
	}
	rec := httptest.NewRecorder()
	w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"taloscluster_reports_pending 0", "taloscluster_reports_dropped_total 0"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !strings.Contains(w.logs.String(), "pull request not planned: it changes too many clusters") {
		t.Errorf("the refusal is not logged")
	}
}
