package httpapi

import (
	"fmt"
	"html/template"
	"time"
)

// shortSHA is how many characters of a commit SHA the page shows.
const shortSHA = 7

// headData is what the "head" template sees: the page's title, and how
// often it reloads itself in seconds (0: never).
type headData struct {
	Title   string
	Refresh int
}

var pages = template.Must(template.New("pages").Funcs(template.FuncMap{
	"short": func(sha string) string {
		if len(sha) > shortSHA {
			return sha[:shortSHA]
		}
		return sha
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"inc":   func(i int) int { return i + 1 },
	"since": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	// until says how long until t, "now" once it passed.
	"until": func(t time.Time) string {
		d := time.Until(t).Round(time.Second)
		if d <= 0 {
			return "now"
		}
		return "in " + d.String()
	},
	"resultClass": func(result string) string {
		switch result {
		case "success", "failure", "refused", "cancelled", "retried", "drift":
			return result
		case "no drift", "ok":
			return "success"
		case "needs attention", "incomplete", "waiting":
			return "retried"
		}
		return "other"
	},
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"duration": humanDuration,
	// behind says how far a component is behind, for its update line.
	"behind": func(c ComponentStatus) string {
		switch {
		case c.UpdateKind == "minor" && c.PatchesBehind == 0:
			return "a newer minor release"
		case c.PatchesBehind == 1:
			return "1 patch release behind"
		}
		return fmt.Sprintf("%d patch releases behind", c.PatchesBehind)
	},
	"head": func(title string, refresh int) headData { return headData{Title: title, Refresh: refresh} },
}).Parse(pageTemplates))

// humanDuration writes how long a run took: "850ms", "42s", "3m7s".
func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// The pages link relative to themselves, so they work behind a proxy
// that serves the agent under a path prefix. They hold no script: the
// status page reloads itself with a meta refresh.
const pageTemplates = `
{{define "head"}}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">
{{end}}<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5rem; }
caption { text-align: left; font-weight: bold; padding: .3rem 0; }
th, td { border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code, pre { font-family: ui-monospace, monospace; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 1rem; overflow-x: auto; white-space: pre-wrap; }
section.cluster { border-top: 2px solid #ccc; margin-top: 2rem; }
.progress { border: 1px solid #8a5a00; background: #fff8e6; padding: .5rem .8rem; margin: 1rem 0; }
.progress progress { width: 16rem; vertical-align: middle; }
.success { color: #176f2c; } .failure, .refused { color: #b00020; } .cancelled, .note { color: #555; } .retried { color: #8a5a00; }
.drift { color: #b00020; font-weight: bold; }
.nowrap { white-space: nowrap; }
</style>
</head>
<body>
{{end}}

{{define "run"}}{{if .}}<code>{{short .Commit}}</code> <span class="{{resultClass .Result}}">{{.Result}}</span> <time datetime="{{iso .Time}}">{{when .Time}}</time>{{if .PlanID}} <a href="plans/{{.PlanID}}">plan</a>{{end}}{{else}}none{{end}}{{end}}

{{define "status"}}{{template "head" (head "taloscluster agent" .Refresh)}}
<h1>taloscluster agent</h1>
<p>{{if .Repository}}Repository <code>{{.Repository}}</code>{{if .Branch}}, branch <code>{{.Branch}}</code>{{end}}. {{end}}Last fetch: <time datetime="{{iso .LastFetch}}">{{when .LastFetch}}</time>. Page generated <time datetime="{{iso .Generated}}">{{when .Generated}}</time>.</p>
{{if .Replica}}<p>This is {{.Replica}}.</p>{{end}}
<p class="note">This page reloads itself every {{.Refresh}} seconds{{if .Converging}} while a converge runs (every 30 seconds otherwise){{else}} (every 5 seconds while a converge runs){{end}}.</p>
<h2>Clusters</h2>
{{if .Sections}}<ul>
{{range .Sections}}<li><a href="#cluster-{{.Slug}}"><code>{{.Path}}</code></a>{{if .Elsewhere}} (another replica){{else if .Running}} ({{.Running}} running){{else if .Waiting}} (waiting){{end}}</li>
{{end}}</ul>{{else}}<p>No clusters found in the repository yet.</p>{{end}}
<h2>Queue</h2>
{{if .Queue}}<table><caption>Jobs waiting, first to run first</caption>
<thead><tr><th scope="col">#</th><th scope="col">Cluster</th><th scope="col">Kind</th><th scope="col">Commit</th><th scope="col">Queued</th></tr></thead>
<tbody>
{{range $i, $j := .Queue}}<tr><td>{{inc $i}}</td><td><code>{{$j.Cluster}}</code></td><td>{{$j.Kind}}{{if $j.Waiting}} (waiting: {{$j.Waiting}}{{if not $j.NotBefore.IsZero}}, not before <time datetime="{{iso $j.NotBefore}}">{{when $j.NotBefore}}</time>{{end}}){{else if gt $j.Attempt 1}} (attempt {{$j.Attempt}}{{if not $j.NotBefore.IsZero}}, not before <time datetime="{{iso $j.NotBefore}}">{{when $j.NotBefore}}</time>{{end}}){{end}}</td><td><code>{{short $j.Commit}}</code></td><td><time datetime="{{iso $j.Queued}}">{{when $j.Queued}}</time></td></tr>
{{end}}</tbody>
</table>{{else}}<p>Nothing queued.</p>{{end}}
<h2>Reports to GitHub</h2>
{{with .Reports}}{{if .Pending}}<p><span class="retried">{{.Pending}} not yet delivered</span>, the oldest queued <time datetime="{{iso .Oldest}}">{{when .Oldest}}</time> ({{since .Oldest}} ago){{if .Failing}}; {{.Failing}} failed at least once, the last with: <span class="failure">{{.LastError}}</span>{{end}}. They are tried again with backoff.</p>{{else}}<p>All delivered.</p>{{end}}
{{if .Dropped}}<p class="failure">{{.Dropped}} given up on since the agent started; the last, {{.LastDropped}}, <time datetime="{{iso .DroppedAt}}">{{when .DroppedAt}}</time>, because {{.DropReason}} (each is in the log).</p>{{end}}
{{if .SaveError}}<p class="failure">The outbox cannot be saved to the state backend, so a restart would lose what waits: {{.SaveError}}</p>{{end}}{{end}}
{{range .Sections}}{{template "cluster" .}}{{end}}
<p><a href="metrics">metrics</a> · <a href="readyz">readiness</a></p>
</body>
</html>
{{end}}

{{define "cluster"}}<section class="cluster" id="cluster-{{.Slug}}" aria-labelledby="h-{{.Slug}}">
<h2 id="h-{{.Slug}}"><code>{{.Path}}</code></h2>
{{if .Elsewhere}}<p>This cluster is handled by another replica: its plans, converges and checks run there, so this page shows nothing live about it.</p>
{{else}}<p>{{if .Running}}Running: {{.Running}}.{{else if .Waiting}}Waiting.{{else}}Idle.{{end}} Last plan: {{template "run" .LastPlan}}. Last converge: {{template "run" .LastConverge}}.</p>
{{with .Waiting}}<div class="progress waiting" role="status">{{.Kind}} of <code>{{short .Commit}}</code> <span class="retried">waiting: {{.Reason}}</span> (since <time datetime="{{iso .Since}}">{{when .Since}}</time>); it runs again <time datetime="{{iso .Next}}">{{when .Next}}</time> ({{until .Next}}).</div>
{{end}}{{with .Progress}}<div class="progress" role="status" aria-live="polite">{{if .Steps}}<progress value="{{.Step}}" max="{{.Steps}}">{{.Step}} of {{.Steps}}</progress> {{.Kind}} of <code>{{short .Commit}}</code>: step {{.Step}} of {{.Steps}}: {{.Text}}{{else}}{{.Kind}} of <code>{{short .Commit}}</code>: planning, no step started yet{{end}} (running for {{since .Started}}).{{template "rollout" .Nodes}}</div>
{{end}}{{template "nodes" .Check}}
<h3>Updates available</h3>
{{with .Check}}{{if .Error}}<p class="failure">The last check failed: {{.Error}}</p>
{{else}}<ul class="updates">
{{range .Components}}<li data-component="{{.Name}}">{{if .Unknown}}{{.Name}} {{.Pinned}}: <span class="failure">releases unknown: {{.Unknown}}</span>{{else if .Update}}{{.Name}} {{.Pinned}} → {{.Update}} ({{behind .}}){{else}}{{.Name}} {{.Pinned}}: up to date{{end}}</li>
{{end}}</ul>
{{end}}{{else}}<p>No check has run yet: updates show after the first one, one drift interval after the agent started.</p>
{{end}}<h3>Remediation</h3>
{{with .Remediation}}<p data-remediation="{{if .On}}on{{else}}off{{end}}">{{if .On}}On: a worker NotReady longer than {{.After}} is replaced, at most {{.MaxUnhealthy}} of a pool at once, {{if .Pools}}in pools {{range $i, $p := .Pools}}{{if $i}}, {{end}}<code>{{$p}}</code>{{end}}{{else}}in every worker pool{{end}}; never a control plane, never while the cluster itself is unhealthy.{{else}}Off: cluster.yaml has no remediation section.{{end}}</p>
{{if .Events}}<ul class="remediations">
{{range .Events}}<li><time datetime="{{iso .At}}">{{when .At}}</time>: <code>{{.Node}}</code> of pool <code>{{.Pool}}</code> replaced by the converge of <code>{{short .Commit}}</code></li>
{{end}}</ul>
{{end}}{{else}}<p>Known after the first converge since the agent started.</p>
{{end}}<h3>Drift</h3>
<p>{{if .DriftError}}<span class="failure">drift unknown: {{.DriftError}}</span>{{if .Drift}} (the last check that worked found drift){{end}}{{else if .Drift}}<span class="drift">drift</span>: {{.DriftSummary}}{{else if .DriftChecked.IsZero}}No drift check has run yet.{{else}}in sync{{end}}{{if not .DriftChecked.IsZero}} (checked <time datetime="{{iso .DriftChecked}}">{{when .DriftChecked}}</time>){{end}}{{if and .Drift (not .DriftError) .DriftPlanID}} <a href="plans/{{.DriftPlanID}}">plan</a>{{end}}</p>
{{if and .Drift (not .DriftError) .DriftChanges}}<ul class="drift-changes">
{{range .DriftChanges}}<li>{{.}}</li>
{{end}}{{if .DriftMore}}<li>and {{.DriftMore}} more (see the plan)</li>
{{end}}</ul>
{{end}}{{with .Check}}{{if .Plugins}}<h3>Plugins</h3>
<ul class="plugins">
{{range .Plugins}}<li data-plugin="{{.Name}}" data-state="{{.State}}"><code>{{.Name}}</code>: {{if eq .State "in_sync"}}in sync{{else if eq .State "drift"}}<span class="drift">drift</span>, a converge would make {{len .Steps}} {{if eq (len .Steps) 1}}step{{else}}steps{{end}}{{if .Steps}}:<ul>{{range .Steps}}<li>{{.}}</li>{{end}}</ul>{{end}}{{else if eq .State "deferred"}}deferred: {{.Reason}}{{else}}<span class="failure">unknown: {{.Reason}}</span>{{end}}</li>
{{end}}</ul>
{{end}}{{if .Incomplete}}<h3>Check incomplete</h3>
<p>The last check could not read everything, so it cannot say all is well:</p>
<ul class="incomplete">
{{range .Incomplete}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{end}}{{template "runs" .}}{{end}}</section>
{{end}}

{{define "nodes"}}{{if not .}}<p>Nodes: no check has run yet, so no node was read.</p>
{{else if .Error}}<p>Nodes: the last check failed, so no node was read.</p>
{{else if not .Compared}}<p>Nodes: the last check did not compare the running cluster: {{.NotCompared}}</p>
{{else}}{{$kube := .KubernetesRead}}<table class="nodes"><caption>Nodes</caption>
<thead><tr><th scope="col">Node</th><th scope="col">Role</th><th scope="col">Talos</th><th scope="col">Kubernetes</th><th scope="col">Ready</th><th scope="col">Scheduling</th></tr></thead>
<tbody>
{{range .Nodes}}<tr data-node="{{.Name}}"><th scope="row"><code>{{.Name}}</code></th><td>{{.Role}}</td><td>{{if .Talos}}{{.Talos}}{{else}}unknown{{end}}{{if .TalosWant}} <span class="drift">(want {{.TalosWant}})</span>{{end}}</td><td>{{if .Kubernetes}}{{.Kubernetes}}{{else}}unknown{{end}}{{if .KubernetesWant}} <span class="drift">(want {{.KubernetesWant}})</span>{{end}}</td><td>{{if .InKubernetes}}{{if .Ready}}<span class="success">Ready</span>{{else}}<span class="failure">Not ready</span>{{end}}{{else if $kube}}not registered{{else}}unknown{{end}}</td><td>{{if .InKubernetes}}{{if .Cordoned}}<span class="retried">cordoned</span>{{else}}schedulable{{end}}{{else}}unknown{{end}}</td></tr>
{{else}}<tr><td colspan="6">No machine of the cluster exists.</td></tr>
{{end}}</tbody>
</table>
{{if .Missing}}<p>In cluster.yaml but not created yet: {{range $i, $m := .Missing}}{{if $i}}, {{end}}<code>{{$m}}</code>{{end}}.</p>
{{end}}{{end}}{{end}}

{{define "rollout"}}{{if .}}
<table class="rollout"><caption>Nodes in this run</caption>
<thead><tr><th scope="col">Node</th><th scope="col">Step</th><th scope="col">Phase</th><th scope="col">Doing</th><th scope="col">Why</th><th scope="col">Since</th></tr></thead>
<tbody>
{{range .}}<tr data-rollout-node="{{.Node}}"><th scope="row"><code>{{.Node}}</code></th><td>{{.Step}}</td><td>{{.Phase}}</td><td>{{.Name}}{{if .Batch}} <span class="note">(batch {{.Batch}}, in parallel)</span>{{end}}</td><td>{{.Reason}}</td><td class="nowrap">{{if .Ended.IsZero}}running for {{since .Started}}{{else if .Failed}}<span class="failure">failed</span> {{since .Ended}} ago{{else}}ended {{since .Ended}} ago, {{.Done}} {{if eq .Done 1}}step{{else}}steps{{end}} done{{end}}</td></tr>
{{end}}</tbody>
</table>
{{end}}{{end}}

{{define "runs"}}{{$repo := .RepositoryURL}}{{if .Runs}}<table class="runs"><caption>Last runs</caption>
<thead><tr><th scope="col">Kind</th><th scope="col">Commit</th><th scope="col">Pull request</th><th scope="col">Result</th><th scope="col">Duration</th><th scope="col">Finished</th><th scope="col">Plan</th></tr></thead>
<tbody>
{{range .Runs}}<tr><td>{{.Kind}}</td><td><code title="{{.Commit}}">{{short .Commit}}</code></td><td>{{if .PR}}{{if $repo}}<a href="{{$repo}}/pull/{{.PR}}">#{{.PR}}</a>{{else}}#{{.PR}}{{end}}{{else}}none{{end}}</td><td><span class="{{resultClass .Result}}">{{.Result}}</span>{{if .Detail}}: {{.Detail}}{{end}}</td><td class="nowrap">{{duration .Duration}}</td><td class="nowrap"><time datetime="{{iso .Finished}}">{{when .Finished}}</time></td><td>{{if .PlanID}}<a href="plans/{{.PlanID}}">plan</a>{{else}}none{{end}}</td></tr>
{{end}}</tbody>
</table>
{{else}}<p>Last runs: none since the agent started.</p>
{{end}}{{end}}

{{define "plan"}}{{template "head" (head (printf "plan %s" .ID) .Refresh)}}
<p><a href="../">status</a> · <a href="{{.ID}}?format=text">plain text</a></p>
<h1>Plan <code>{{.ID}}</code></h1>
<pre>{{.Body}}</pre>
</body>
</html>
{{end}}
`
