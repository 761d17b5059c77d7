package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A pull request cannot send the cluster's Proxmox token, or its trust, to
// a host of its choosing: the classic trick of putting an allowed host in
// the user info of the URL, turning TLS verification off, swapping the CA
// bundle, or pointing the Image Factory elsewhere, is refused before any
// request, with a failed plan status that says why.
func TestAgentEndpointPolicyCannotBeFooled(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	var auth atomic.Value
	attacker := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		auth.Store(r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(attacker.Close)
	evil, err := url.Parse(attacker.URL)
	if err != nil {
		t.Fatal(err)
	}

	w := newAgentWorld(t, "127.88.0.0/24")
	pve, err := url.Parse(w.lab.PVEURL)
	if err != nil {
		t.Fatal(err)
	}
	// The operators allow the Proxmox host itself.
	w.cfg.AllowedEndpoints = []string{w.lab.PVEURL}
	w.restart(t)
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})

	const tlsLine = "tls_verify: ca.pem            # the lab's CA: TLS is verified"
	if !strings.Contains(w.cluster, tlsLine) || !strings.Contains(w.cluster, "url: "+w.lab.PVEURL) {
		t.Fatalf("the lab's cluster.yaml changed; update this test:\n%s", w.cluster)
	}
	cases := []struct {
		branch string
		files  map[string]string
		reason string // in the plan status
	}{{
		branch: "userinfo",
		files: map[string]string{"clusters/demo/cluster.yaml": strings.NewReplacer(
			"url: "+w.lab.PVEURL, "url: https://"+pve.Host+"@"+evil.Host,
			tlsLine, "tls_verify: false").Replace(w.cluster)},
		reason: "user info",
	}, {
		branch: "no-tls",
		files:  map[string]string{"clusters/demo/cluster.yaml": strings.Replace(w.cluster, tlsLine, "tls_verify: false", 1)},
		reason: "turns off TLS verification",
	}, {
		branch: "new-ca",
		files:  map[string]string{"clusters/demo/ca.pem": string(mustPEM(t, attacker))},
		reason: "CA bundle differs",
	}, {
		branch: "factory",
		files: map[string]string{"clusters/demo/cluster.yaml": strings.Replace(w.cluster,
			"image_factory: "+w.lab.FactoryURL, "image_factory: "+attacker.URL, 1)},
		reason: "proxmox.image_factory " + attacker.URL + " is neither",
	}, {
		// The same host as the allowed endpoint, on another port.
		branch: "port",
		files: map[string]string{"clusters/demo/cluster.yaml": strings.Replace(w.cluster,
			"url: "+w.lab.PVEURL, "url: "+attacker.URL, 1)},
		reason: "is neither the default branch's endpoint nor in allowed_endpoints",
	}}
	heads := map[string]string{}
	for _, c := range cases {
		head, err := w.repo.Commit(c.branch, c.files, c.branch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.repo.OpenPR("alice", c.branch, "main", c.branch); err != nil {
			t.Fatal(err)
		}
		heads[c.branch] = head
	}
	w.pollUntil(t, "the plan statuses", func() bool {
		for _, h := range heads {
			if st := w.status(h, "taloscluster/plan: clusters/demo"); st == "" || st == "pending" {
				return false
			}
		}
		return true
	})
	w.agent.Wait()
	for _, c := range cases {
		var desc string
		for _, s := range w.repo.Statuses(heads[c.branch]) {
			if s.Context == "taloscluster/plan: clusters/demo" {
				desc = s.Description
				break
			}
		}
		if st := w.status(heads[c.branch], "taloscluster/plan: clusters/demo"); st != "failure" || !strings.HasPrefix(desc, "not planned: ") || !strings.Contains(desc, c.reason) {
			t.Errorf("%s: plan status %q, want a refusal saying %q", c.branch, desc, c.reason)
		}
	}
	if n := hits.Load(); n != 0 {
		sent, _ := auth.Load().(string)
		t.Fatalf("the attacker's server got %d requests (a Proxmox token among them: %v)", n, strings.HasPrefix(sent, "PVEAPIToken="))
	}
}

// mustPEM returns the certificate of an httptest TLS server as PEM.
func mustPEM(t *testing.T, srv *httptest.Server) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// With GitHub's primary rate limit used up and its reset an hour ahead, a
// merge is still fetched and converged at once; its statuses wait and the
// log says so, once; /readyz names the limit; and when the limit is back
// the waiting status and comment are posted.
func TestAgentConvergesMergesWhileGitHubIsRateLimited(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.89.0.0/24")
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})
	grown := strings.Replace(w.cluster, "count: 1\n", "count: 2\n", 1)
	if _, err := w.repo.Commit("grow", map[string]string{"clusters/demo/cluster.yaml": grown}, "grow"); err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "grow", "main", "Grow")
	if err != nil {
		t.Fatal(err)
	}
	reset := time.Now().Add(time.Hour)
	w.forge.PrimaryExhausted(reset)
	merge, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	logged := len(w.logs.String())
	start := time.Now()
	w.pollUntil(t, "the converge of the merge while GitHub is rate limited", func() bool {
		for _, c := range w.agent.Status().Clusters {
			if c.Path == "clusters/demo" && c.LastConverge != nil && c.LastConverge.Commit == merge && c.LastConverge.Result == "success" {
				return true
			}
		}
		return false
	})
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("the converge took %v under the rate limit", took)
	}
	if n := len(w.lab.PVE.VMs()); n != 5 {
		t.Fatalf("%d VMs after the merge, want 5", n)
	}
	// More polls under the limit: nothing new is logged about it, and
	// GitHub is not asked again and again.
	before403 := w.forbidden()
	for range 20 {
		if err := w.agent.Poll(t.Context()); err == nil || !strings.Contains(err.Error(), "rate limit") {
			t.Fatalf("a poll under the rate limit returned %v", err)
		}
	}
	if n := w.forbidden() - before403; n > 0 {
		t.Errorf("%d more API requests answered 403 while the agent knew the limit", n)
	}
	since := w.logs.String()[logged:]
	if got := strings.Count(since, "GitHub API rate limited"); got != 1 {
		t.Errorf("the rate limit was logged %d times, want once:\n%s", got, since)
	}
	if got := strings.Count(since, "reports wait until the GitHub rate limit is over"); got != 1 {
		t.Errorf("pending statuses were logged %d times, want once:\n%s", got, since)
	}
	if got := w.status(merge, "taloscluster/converge: clusters/demo"); got != "" {
		t.Errorf("the merge has converge status %q under the rate limit", got)
	}
	rec := httptest.NewRecorder()
	w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	want := "GitHub API rate limit exhausted until " + reset.UTC().Truncate(time.Second).Format(time.RFC3339)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), want) {
		t.Errorf("/readyz: %d %q, want 503 saying %q", rec.Code, rec.Body.String(), want)
	}

	// The limit is back early (GitHub's /rate_limit says so): the status
	// and the comment that waited are posted.
	w.forge.PrimaryExhausted(time.Now().Add(-time.Second))
	w.pollUntil(t, "the converge status after the limit", func() bool {
		return w.status(merge, "taloscluster/converge: clusters/demo") == "success"
	})
	commented := false
	for _, c := range w.repo.Comments(pr.Number) {
		commented = commented || strings.Contains(c.Body, "taloscluster converge")
	}
	if !commented {
		t.Errorf("no converge comment on the merged pull request after the limit: %+v", w.repo.Comments(pr.Number))
	}
	rec = httptest.NewRecorder()
	w.http.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz after the limit: %d %q", rec.Code, rec.Body.String())
	}
}

// forbidden counts the forge's API answers 403.
func (w *agentWorld) forbidden() int {
	n := 0
	for _, r := range w.forge.Log() {
		if r.Status == http.StatusForbidden {
			n++
		}
	}
	return n
}
