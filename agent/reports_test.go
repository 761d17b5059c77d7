package agent_test

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// gauge reads one series without labels from the world's registry.
func (w *world) gauge(name string) float64 {
	w.t.Helper()
	families, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			return value(m)
		}
	}
	w.t.Fatalf("no series %s", name)
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

// TestReportMetricsFollowTheOutboxDuringAPass holds GitHub's status
// requests while a pull request is planned: reports_pending counts the
// reports as they are queued, while the delivery pass is still stuck on
// the first, and comes back to 0 once they are delivered.
func TestReportMetricsFollowTheOutboxDuringAPass(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	gate := make(chan struct{})
	w.forge.mu.Lock()
	w.forge.gate = gate
	w.forge.mu.Unlock()
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		w.openPR(1, "h1", "worker-1")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending := w.agent.Status().Reports.Pending
		if got := w.gauge("taloscluster_reports_pending"); pending >= 1 && got == float64(pending) {
			break
		} else if time.Now().After(deadline) {
			close(gate)
			t.Fatalf("reports_pending %v while %d reports wait behind a held status request; want it to count them as they are queued", got, pending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(gate)
	<-polled
	if got := w.gauge("taloscluster_reports_pending"); got != 0 {
		t.Fatalf("reports_pending %v after delivery", got)
	}
	if page := w.get("/"); !strings.Contains(page, "All delivered") {
		t.Fatalf("status page after delivery:\n%s", page)
	}
}
