package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/report/metrics"
)

// CheckResult is what Runner.Check found.
type CheckResult struct {
	// Report is check.Run's report, its messages without secrets.
	Report *check.Report
	// Kube holds the Kubernetes nodes the check's observation listed, by
	// name; nil when the Kubernetes API was not read.
	Kube map[string]KubeNode
}

// KubeNode is a Kubernetes node as the check's observation read it.
type KubeNode struct {
	Ready, Cordoned bool
}

// Run kinds on the status page besides the job kinds.
const (
	// runDrift is a drift check: a plan of the default branch.
	runDrift = "drift"
	// runCheck is a check of the pins and the running cluster.
	runCheck = "check"
)

// maxDriftChanges bounds the steps of a drift plan listed on the status
// page; the full plan is linked.
const maxDriftChanges = 20

// checkCluster runs check on cluster at head: its metrics, the status
// page's nodes and updates, and a run in the history. The last report
// is kept (LastCheck).
func (a *Agent) checkCluster(ctx context.Context, cluster, head string) {
	started := time.Now()
	var res *CheckResult
	err := a.withFiles(head, cluster, func(files fs.FS) error {
		var err error
		res, err = a.runner.Check(ctx, cluster, files)
		return err
	})
	if err == nil && (res == nil || res.Report == nil) {
		err = errors.New("the engine returned no report")
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		reason := firstLine(a.redact.String(err.Error()))
		if a.quiet.allow("check "+cluster, reason) {
			a.log.Warn("check failed", "cluster", cluster, "commit", head, "error", reason)
		}
		if a.metrics != nil {
			a.metrics.CheckFinished(cluster, false)
		}
		a.board.record(cluster, func(s *httpapi.ClusterStatus) {
			s.Check = &httpapi.CheckStatus{Time: time.Now(), Error: reason}
		})
		a.board.addRun(cluster, httpapi.Run{Kind: runCheck, Commit: head, Result: "failure", Detail: reason, Duration: time.Since(started)})
		return
	}
	a.quiet.forget("check " + cluster)
	r := res.Report
	a.board.keepCheck(cluster, res)
	if a.metrics != nil {
		for _, comp := range r.Components {
			if comp.Unknown != "" {
				continue // the releases were not read: the last known values stay
			}
			a.metrics.ComponentChecked(cluster, metrics.Component(comp.Name), comp.Update != nil, comp.PatchesBehind)
		}
		switch {
		case res.Kube != nil:
			a.metrics.NodesCordoned(cluster, len(r.Cordoned))
		case r.Scope == check.ScopeVersions && !r.Incomplete:
			a.metrics.NodesCordoned(cluster, 0) // no running cluster to cordon
		}
		if r.Scope == check.ScopeCluster {
			var configured []string
			for _, p := range r.Plugins {
				configured = append(configured, p.Name)
			}
			a.metrics.PluginsConfigured(cluster, configured)
		}
		for _, p := range r.Plugins {
			switch p.State {
			case check.StateInSync, check.StateDrift:
				a.metrics.PluginChecked(cluster, p.Name, p.State == check.StateDrift)
			}
		}
		a.metrics.CheckFinished(cluster, !r.Incomplete)
	}
	view := a.checkView(res)
	a.board.record(cluster, func(s *httpapi.ClusterStatus) { s.Check = view })
	result, detail := "ok", ""
	switch {
	case r.Incomplete:
		result, detail = "incomplete", r.IncompleteReasons[0]
	case r.NeedsAttention:
		result, detail = "needs attention", findingsSummary(r)
	}
	a.board.addRun(cluster, httpapi.Run{Kind: runCheck, Commit: head, Result: result, Detail: detail, Duration: time.Since(started)})
}

// findingsSummary counts a report's findings by kind: "1 update, 2
// cordons".
func findingsSummary(r *check.Report) string {
	var parts []string
	for _, k := range []struct{ kind, one, many string }{
		{check.KindUpdate, "update", "updates"}, {check.KindDrift, "drift finding", "drift findings"}, {check.KindCordon, "cordon", "cordons"},
	} {
		n := 0
		for _, f := range r.Findings {
			if f.Kind == k.kind {
				n++
			}
		}
		switch {
		case n == 1:
			parts = append(parts, "1 "+k.one)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", n, k.many))
		}
	}
	return strings.Join(parts, ", ")
}

// checkView turns a check's result into what the status page shows,
// every text through the redactor.
func (a *Agent) checkView(res *CheckResult) *httpapi.CheckStatus {
	r := res.Report
	red := a.redact.String
	v := &httpapi.CheckStatus{Time: r.CheckedAt, Compared: r.Scope == check.ScopeCluster, NotCompared: red(r.ScopeReason),
		KubernetesRead: res.Kube != nil}
	if v.Time.IsZero() {
		v.Time = time.Now()
	}
	for _, reason := range r.IncompleteReasons {
		v.Incomplete = append(v.Incomplete, red(reason))
	}
	for _, c := range r.Components {
		cs := httpapi.ComponentStatus{Name: red(c.Name), Pinned: red(c.Pinned), PatchesBehind: c.PatchesBehind, Unknown: red(c.Unknown)}
		if c.Update != nil {
			cs.Update, cs.UpdateKind = red(c.Update.Version), c.Update.Kind
		}
		v.Components = append(v.Components, cs)
	}
	for _, n := range r.Nodes {
		ns := httpapi.NodeStatus{Name: red(n.Name), Role: red(n.Role), Talos: red(n.Talos.Have), Kubernetes: red(n.Kubelet.Have)}
		if n.Talos.State == check.StateDrift {
			ns.TalosWant = red(n.Talos.Want)
		}
		if n.Kubelet.State == check.StateDrift {
			ns.KubernetesWant = red(n.Kubelet.Want)
		}
		if k, ok := res.Kube[n.Name]; ok {
			ns.InKubernetes, ns.Ready, ns.Cordoned = true, k.Ready, k.Cordoned
		}
		v.Nodes = append(v.Nodes, ns)
	}
	for _, m := range r.Missing {
		v.Missing = append(v.Missing, red(m))
	}
	for _, p := range r.Plugins {
		ps := httpapi.PluginStatus{Name: red(p.Name), State: p.State, Reason: red(p.Reason)}
		for _, st := range p.Steps {
			ps.Steps = append(ps.Steps, red(st))
		}
		v.Plugins = append(v.Plugins, ps)
	}
	return v
}

// LastCheck returns the report of the last check of cluster that ran,
// and whether one did.
func (a *Agent) LastCheck(cluster string) (*check.Report, bool) {
	return a.board.lastCheck(cluster)
}

// driftLines describes the steps and refusals of a drift plan, one line
// each, secrets removed: at most maxDriftChanges, and how many more.
func (a *Agent) driftLines(pl *plan.Plan) ([]string, int) {
	var out []string
	more := 0
	add := func(s string) {
		if len(out) == maxDriftChanges {
			more++
			return
		}
		out = append(out, fitLine(firstLine(a.redact.String(s)), 300))
	}
	for _, c := range pl.Changes {
		line := c.Action.Symbol() + " " + c.Resource.String()
		if c.Reason != "" {
			line += ": " + c.Reason
		}
		add(line)
	}
	for _, r := range pl.Refusals {
		add("refused " + r.Resource.String() + ": " + r.Reason)
	}
	return out, more
}

// stepLine matches a progress line of the executor: "[3/12] + machine x",
// after the phase.
var stepLine = regexp.MustCompile(`\[(\d+)/(\d+)\]\s+(.*)$`)

// progressLog returns the log func of a mutating run: it keeps every line
// for the run's page and the current step for the status page.
func (a *Agent) progressLog(cluster string, keep func(string)) func(string) {
	return func(s string) {
		keep(s)
		for _, line := range strings.Split(s, "\n") {
			m := stepLine.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				continue
			}
			i, err1 := strconv.Atoi(m[1])
			n, err2 := strconv.Atoi(m[2])
			if err1 != nil || err2 != nil || n <= 0 || i < 1 || i > n {
				continue
			}
			text := fitLine(a.redact.String(strings.TrimSpace(m[3])), 200)
			a.board.record(cluster, func(s *httpapi.ClusterStatus) {
				if s.Progress != nil {
					s.Progress.Step, s.Progress.Steps, s.Progress.Text = i, n, text
				}
			})
		}
	}
}

// repositoryURL is the web address of the repository the agent reports
// to, for pull request links: github.com for GitHub's API
// (api.github.com), else the API URL's scheme and host (GitHub
// Enterprise serves the web pages and /api/v3/ on one host). Empty when
// it cannot be told.
func repositoryURL(apiURL, repo string) string {
	u, err := url.Parse(apiURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return ""
	}
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.ContainsAny(name, "/?#") {
		return ""
	}
	host := u.Host
	if strings.EqualFold(u.Hostname(), "api.github.com") {
		host = "github.com"
	}
	return (&url.URL{Scheme: u.Scheme, Host: host, Path: "/" + owner + "/" + name}).String()
}
