package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v60/github"
)

// demoGitOps drives the lab forge like a person would: it waits for the
// agent's first converge, pushes a branch that adds a worker, opens a pull
// request, shows the plan comment, merges, waits for the converge of the
// merge commit, and prints the statuses and a few of the agent's metrics.
func demoGitOps(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("taloslab demo-gitops", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the directory taloslab up wrote (required)")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for each step")
	if err := fs.Parse(args); err != nil {
		return err
	}
	env, err := readEnv(filepath.Join(*dir, "lab.env"))
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(env["TALOSLAB_CA"])
	if err != nil {
		return fmt.Errorf("reading the lab CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	gh := github.NewClient(hc).WithAuthToken(env["TALOSLAB_GITHUB_TOKEN"])
	api, err := url.Parse(env["TALOSLAB_GITHUB_API"])
	if err != nil {
		return err
	}
	gh.BaseURL, gh.UploadURL = api, api
	owner, repo, _ := strings.Cut(env["TALOSLAB_REPO"], "/")
	ctx := context.Background()
	const cluster, cloud = "clusters/gitops", "clusters/openstack"

	say := func(format string, a ...any) { fmt.Fprintf(stdout, "-- "+format+"\n", a...) }
	waitStatus := func(sha, context string) (*github.RepoStatus, error) {
		deadline := time.Now().Add(*timeout)
		for time.Now().Before(deadline) {
			sts, _, err := gh.Repositories.ListStatuses(ctx, owner, repo, sha, nil)
			if err == nil {
				for _, s := range sts { // newest first
					if s.GetContext() == context {
						if s.GetState() != "pending" {
							return s, nil
						}
						break
					}
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		return nil, fmt.Errorf("timed out waiting for status %q on %s", context, sha[:10])
	}

	// The forge does not emulate the branches API; git tells the head.
	head, err := gitHead(*dir, env)
	if err != nil {
		return err
	}
	var st *github.RepoStatus
	for _, c := range []string{cluster, cloud} {
		say("waiting for the agent to converge %s at %s (it was never converged)", c, head[:10])
		if st, err = waitStatus(head, "taloscluster/converge: "+c); err != nil {
			return err
		}
		say("status %s: %s (%s)", st.GetContext(), st.GetState(), st.GetDescription())
	}

	say("pushing branch add-worker: %s (Proxmox) and %s (OpenStack) get a second worker", cluster, cloud)
	prHead, err := pushWorker(*dir, env, cluster, cloud)
	if err != nil {
		return err
	}
	pr, _, err := gh.PullRequests.Create(ctx, owner, repo, &github.NewPullRequest{
		Title: github.String("Add a worker to the gitops cluster"), Head: github.String("add-worker"), Base: github.String("main"),
	})
	if err != nil {
		return fmt.Errorf("opening the pull request: %w", err)
	}
	say("opened pull request #%d; waiting for the agent's plans", pr.GetNumber())
	for _, c := range []string{cluster, cloud} {
		if st, err = waitStatus(prHead, "taloscluster/plan: "+c); err != nil {
			return err
		}
		say("status %s: %s (%s)", st.GetContext(), st.GetState(), st.GetDescription())
	}
	var comments []*github.IssueComment
	for deadline := time.Now().Add(*timeout); ; {
		comments, _, err = gh.Issues.ListComments(ctx, owner, repo, pr.GetNumber(), nil)
		if err == nil && len(comments) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no plan comment on pull request #%d: %v", pr.GetNumber(), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	say("the plan comment on #%d:", pr.GetNumber())
	fmt.Fprintln(stdout, comments[0].GetBody())

	res, _, err := gh.PullRequests.Merge(ctx, owner, repo, pr.GetNumber(), "Add a worker", nil)
	if err != nil {
		return fmt.Errorf("merging: %w", err)
	}
	merge := res.GetSHA()
	say("merged #%d as %s; waiting for the agent to converge it", pr.GetNumber(), merge[:10])
	for _, c := range []string{cluster, cloud} {
		if st, err = waitStatus(merge, "taloscluster/converge: "+c); err != nil {
			return err
		}
		say("status %s: %s (%s)", st.GetContext(), st.GetState(), st.GetDescription())
		if st.GetState() != "success" {
			return fmt.Errorf("the converge of the merge failed for %s", c)
		}
	}
	comments, _, _ = gh.Issues.ListComments(ctx, owner, repo, pr.GetNumber(), nil)
	for _, c := range comments[1:] {
		say("comment on #%d: %s", pr.GetNumber(), c.GetBody())
	}

	say("a few of the agent's metrics (%s/metrics):", env["TALOSLAB_AGENT_URL"])
	resp, err := http.Get(env["TALOSLAB_AGENT_URL"] + "/metrics")
	if err != nil {
		return fmt.Errorf("reading the agent's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "taloscluster_runs_total") && !strings.HasSuffix(line, " 0") ||
			strings.HasPrefix(line, "taloscluster_cluster_last_success_timestamp_seconds") ||
			strings.HasPrefix(line, "taloscluster_github_rate_limit_remaining") {
			fmt.Fprintln(stdout, line)
		}
	}
	return sc.Err()
}

// readEnv reads the export lines of lab.env.
func readEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		env[k] = v
	}
	return env, nil
}

// git runs plain git against the forge as alice.
func git(dir string, env map[string]string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "http.extraHeader=Authorization: token " + env["TALOSLAB_GITHUB_TOKEN"]}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_SSL_CAINFO="+env["TALOSLAB_CA"], "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Alice", "GIT_AUTHOR_EMAIL=alice@taloslab.invalid",
		"GIT_COMMITTER_NAME=Alice", "GIT_COMMITTER_EMAIL=alice@taloslab.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func gitHead(dir string, env map[string]string) (string, error) {
	out, err := git(dir, env, "ls-remote", env["TALOSLAB_GIT_URL"], "refs/heads/main")
	if err != nil {
		return "", err
	}
	sha, _, _ := strings.Cut(out, "\t")
	return sha, nil
}

// pushWorker clones the repository, raises the worker count and pushes the
// branch add-worker; it returns the new head.
func pushWorker(dir string, env map[string]string, clusters ...string) (string, error) {
	work := filepath.Join(dir, "work")
	_ = os.RemoveAll(work)
	if _, err := git(dir, env, "clone", "-q", env["TALOSLAB_GIT_URL"], work); err != nil {
		return "", err
	}
	for _, cluster := range clusters {
		file := filepath.Join(work, cluster, "cluster.yaml")
		data, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		grown := strings.Replace(string(data), "count: 1\n", "count: 2\n", 1)
		if grown == string(data) {
			return "", errors.New("the worker count is not 1 in " + cluster)
		}
		if err := os.WriteFile(file, []byte(grown), 0o644); err != nil {
			return "", err
		}
	}
	for _, args := range [][]string{{"checkout", "-q", "-b", "add-worker"}, {"commit", "-q", "-am", "Add a worker"}, {"push", "-q", "origin", "add-worker"}} {
		if _, err := git(work, env, args...); err != nil {
			return "", err
		}
	}
	return git(work, env, "rev-parse", "HEAD")
}
