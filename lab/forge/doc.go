// Package forge is an emulator of the subset of GitHub the agent uses: the
// REST API calls it makes through go-github (pull requests, issue comments,
// commit statuses, collaborator permissions, rate limits), the releases
// API that "taloscluster check" reads upstream versions from, and git over
// smart HTTP on real bare repositories, so go-github, go-git and plain git
// talk to it unchanged. SeedUpstreamReleases creates siderolabs/talos and
// kubernetes/kubernetes with a fixed release history (see TalosLatest and
// KubernetesLatest).
//
// Repositories are real bare git repositories under Options.Dir, one per
// owner/name, created with CreateRepo and CreateFork. git's smart-HTTP
// protocol is served at /{owner}/{repo}.git (and /{owner}/{repo}) by git's
// own "git http-backend" run as a CGI program. go-git's server-side
// transport was the first choice and was rejected: its upload-pack ignores
// the "have" lines a client sends and always answers NAK followed by a pack,
// so a plain "git fetch" from a clone with more than a handful of commits
// (which negotiates in rounds without "done") fails with "protocol error:
// bad line length character: PACK". Everything the forge itself writes
// (commits made by Repo.Commit, merge commits, refs/pull/N/head and
// refs/pull/N/merge, fork copies) is written with go-git.
//
// Every API response carries GitHub's rate-limit headers; each user has its
// own hourly budget, and conditional GET requests answered 304 Not Modified
// do not count against it. Faults (failing operations, secondary rate
// limits with Retry-After, an exhausted primary limit, latency) are injected
// per operation name, and every request is recorded in an ordered log that
// tests assert on. A request for anything not emulated is answered 501 Not
// Implemented naming its method and path.
//
// The package provides an http.Handler; the caller serves it, over TLS, on a
// loopback address. Requests from non-loopback clients are refused.
package forge
