package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab/forge"
	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// A merge's reports reach GitHub although GitHub refuses them for a
// while and the agent restarts in between: the converge comment that a
// 502 refused is posted once, the final status that failed five times
// ends as success, never before the comment, and every failed attempt is
// logged. While they wait, the status page and the metrics say so.
func TestAgentDeliversReportsThroughFailuresAndRestart(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.90.0.0/24")
	w.cfg.ReportRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond}
	w.restart(t)
	w.convergedFirst(t)
	head, pr := w.openGrowPR(t)
	w.pollUntil(t, "the plan", func() bool { return w.status(head, "taloscluster/plan: clusters/demo") == "success" })
	w.agent.Wait()
	planComments := len(w.repo.Comments(pr.Number))

	// Slow the converge down, so the faults can be set once it has
	// reported that it runs: from then on only its comment and its final
	// status are owed.
	w.lab.PVE.SetLatency("qemu.create", 500*time.Millisecond)
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	logged := len(w.logs.String())
	w.pollUntil(t, "the converge's pending status", func() bool {
		for _, s := range w.repo.Statuses(merge) {
			if s.Context == "taloscluster/converge: clusters/demo" && s.Description == "converging" {
				return true
			}
		}
		return false
	})
	w.forge.Fail("statuses.create", 5, 502)
	w.forge.Fail("comments.create", 1, 502)
	w.lab.PVE.SetLatency("qemu.create", 0)
	w.agent.Wait() // the converge ran; its reports wait
	if n := len(w.lab.PVE.VMs()); n != 5 {
		t.Fatalf("%d VMs after the merge, want 5", n)
	}
	if st := w.status(merge, "taloscluster/converge: clusters/demo"); st != "pending" {
		t.Fatalf("the merge has status %q, want the converge's pending one: GitHub refused the rest", st)
	}
	rec := httptest.NewRecorder()
	w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if !strings.Contains(rec.Body.String(), "2 not yet delivered") {
		t.Errorf("the status page does not show the reports owed:\n%s", rec.Body.String())
	}
	rec = httptest.NewRecorder()
	w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "taloscluster_reports_pending 2") {
		t.Errorf("metrics do not show the reports owed:\n%s", rec.Body.String())
	}

	// The agent restarts: what it owed comes back from the state backend.
	w.restart(t)
	w.pollUntil(t, "the final converge status", func() bool {
		return w.status(merge, "taloscluster/converge: clusters/demo") == "success"
	})
	var converge []string
	for _, c := range w.repo.Comments(pr.Number) {
		if strings.Contains(c.Body, "taloscluster converge") {
			converge = append(converge, c.Body)
		}
	}
	if len(converge) != 1 || len(w.repo.Comments(pr.Number)) != planComments+1 {
		t.Fatalf("%d converge comments (%d in all), want exactly one more than the %d plan comments",
			len(converge), len(w.repo.Comments(pr.Number)), planComments)
	}
	var final *forge.Status
	for _, s := range w.repo.Statuses(merge) { // newest first
		if s.Context == "taloscluster/converge: clusters/demo" {
			final = &s
			break
		}
	}
	for _, c := range w.repo.Comments(pr.Number) {
		if strings.Contains(c.Body, "taloscluster converge") && final != nil && c.Created.After(final.Created) {
			t.Errorf("the final status (%s) was posted before the converge comment (%s)", final.Created, c.Created)
		}
	}
	since := w.logs.String()[logged:]
	if n := strings.Count(since, "report not delivered; trying again"); n < 6 {
		t.Errorf("%d failed attempts logged, want at least 6 (5 statuses, 1 comment):\n%s", n, since)
	}
	if !strings.Contains(since, "reports still owed from before the restart") {
		t.Errorf("the restart does not say what it still owes:\n%s", since)
	}
	rec = httptest.NewRecorder()
	w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "taloscluster_reports_pending 0") {
		t.Errorf("reports still pending after delivery:\n%s", rec.Body.String())
	}
}
