package httpapi

import (
	"html/template"
	"time"
)

// shortSHA is how many characters of a commit SHA the page shows.
const shortSHA = 7

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
	"resultClass": func(result string) string {
		switch result {
		case "success", "failure", "refused", "cancelled", "retried":
			return result
		}
		return "other"
	},
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
}).Parse(pageTemplates))

// The pages link relative to themselves, so they work behind a proxy
// that serves the agent under a path prefix.
const pageTemplates = `
{{define "head"}}<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5rem; }
th, td { border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code, pre { font-family: ui-monospace, monospace; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 1rem; overflow-x: auto; white-space: pre-wrap; }
.success { color: #176f2c; } .failure, .refused { color: #b00020; } .cancelled { color: #666; } .retried { color: #8a5a00; }
.drift { color: #b00020; font-weight: bold; }
.nowrap { white-space: nowrap; }
</style>
</head>
<body>
{{end}}

{{define "run"}}{{if .}}<code>{{short .Commit}}</code> <span class="{{resultClass .Result}}">{{.Result}}</span> <time datetime="{{iso .Time}}">{{when .Time}}</time>{{if .PlanID}} <a href="plans/{{.PlanID}}">plan</a>{{end}}{{else}}none{{end}}{{end}}

{{define "status"}}{{template "head" "taloscluster agent"}}
<h1>taloscluster agent</h1>
<p>{{if .Repository}}Repository <code>{{.Repository}}</code>{{if .Branch}}, branch <code>{{.Branch}}</code>{{end}}. {{end}}Last fetch: <time datetime="{{iso .LastFetch}}">{{when .LastFetch}}</time>. Page generated <time datetime="{{iso .Generated}}">{{when .Generated}}</time>.</p>
{{if .Replica}}<p>This is {{.Replica}}.</p>{{end}}
<h2>Clusters</h2>
{{if .Clusters}}<table>
<thead><tr><th>Cluster</th><th>Last plan</th><th>Last converge</th><th>Drift</th><th>Running</th></tr></thead>
<tbody>
{{range .Clusters}}<tr>
<td><code>{{.Path}}</code></td>
<td>{{template "run" .LastPlan}}</td>
<td>{{template "run" .LastConverge}}</td>
<td{{if not .DriftError}} class="nowrap"{{end}}>{{if .DriftError}}<span class="failure">drift check failed: {{.DriftError}}</span>{{if .Drift}} (the last check that worked found drift){{end}}{{else if .Drift}}<span class="drift">drift</span>{{else}}in sync{{end}}</td>
<td class="nowrap">{{if .Elsewhere}}handled by another replica{{else if .Running}}{{.Running}}{{else}}idle{{end}}</td>
</tr>
{{end}}</tbody>
</table>{{else}}<p>No clusters found in the repository yet.</p>{{end}}
<h2>Queue</h2>
{{if .Queue}}<table>
<thead><tr><th>#</th><th>Cluster</th><th>Kind</th><th>Commit</th><th>Queued</th></tr></thead>
<tbody>
{{range $i, $j := .Queue}}<tr><td>{{inc $i}}</td><td><code>{{$j.Cluster}}</code></td><td>{{$j.Kind}}{{if gt $j.Attempt 1}} (attempt {{$j.Attempt}}{{if not $j.NotBefore.IsZero}}, not before <time datetime="{{iso $j.NotBefore}}">{{when $j.NotBefore}}</time>{{end}}){{end}}</td><td><code>{{short $j.Commit}}</code></td><td><time datetime="{{iso $j.Queued}}">{{when $j.Queued}}</time></td></tr>
{{end}}</tbody>
</table>{{else}}<p>Nothing queued.</p>{{end}}
<h2>Reports to GitHub</h2>
{{with .Reports}}{{if .Pending}}<p><span class="retried">{{.Pending}} not yet delivered</span>, the oldest queued <time datetime="{{iso .Oldest}}">{{when .Oldest}}</time> ({{since .Oldest}} ago){{if .Failing}}; {{.Failing}} failed at least once, the last with: <span class="failure">{{.LastError}}</span>{{end}}. They are tried again with backoff.</p>{{else}}<p>All delivered.</p>{{end}}
{{if .Dropped}}<p class="failure">{{.Dropped}} given up on since the agent started (GitHub kept refusing them; see the log).</p>{{end}}
{{if .SaveError}}<p class="failure">The outbox cannot be saved to the state backend, so a restart would lose what waits: {{.SaveError}}</p>{{end}}{{end}}
<p><a href="metrics">metrics</a> · <a href="readyz">readiness</a></p>
</body>
</html>
{{end}}

{{define "plan"}}{{template "head" (printf "plan %s" .ID)}}
<p><a href="../">status</a> · <a href="{{.ID}}?format=text">plain text</a></p>
<h1>Plan <code>{{.ID}}</code></h1>
<pre>{{.Body}}</pre>
</body>
</html>
{{end}}
`
