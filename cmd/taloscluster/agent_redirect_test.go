package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A pull request that only changes the path of an allowed Proxmox URL to
// one that answers a redirect never gets the Proxmox token sent anywhere:
// not to another port of the same host, not over plain http. The plan
// fails, saying which endpoint redirected where.
func TestAgentNeverFollowsARedirectWithTheProxmoxToken(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.200.0.0/24")

	// Where a followed redirect would land: any request with an
	// Authorization header is a leak.
	var leaks, hits atomic.Int64
	record := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "" {
			leaks.Add(1)
		}
		rw.WriteHeader(http.StatusNotFound)
	})
	plain := httptest.NewServer(record)
	t.Cleanup(plain.Close)
	otherPort := httptest.NewUnstartedServer(record)
	var err error
	if otherPort.TLS, err = w.lab.CA.ServerTLS("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	otherPort.StartTLS()
	t.Cleanup(otherPort.Close)

	// The operators allow a host whose TLS certificate the cluster's CA
	// bundle trusts; some of its paths redirect.
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/to-http/"):
			http.Redirect(rw, r, plain.URL+r.URL.Path, http.StatusTemporaryRedirect)
		case strings.HasPrefix(r.URL.Path, "/to-port/"):
			http.Redirect(rw, r, otherPort.URL+r.URL.Path, http.StatusPermanentRedirect)
		default:
			rw.WriteHeader(http.StatusNotFound)
		}
	}))
	if front.TLS, err = w.lab.CA.ServerTLS("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	front.StartTLS()
	t.Cleanup(front.Close)
	w.cfg.AllowedEndpoints = []string{w.lab.PVEURL, front.URL}
	w.restart(t)
	main, _ := w.repo.Branch("main")
	w.pollUntil(t, "the first converge", func() bool {
		return w.status(main, "taloscluster/converge: clusters/demo") == "success"
	})

	heads, prs := map[string]string{}, map[string]int{}
	for _, path := range []string{"/to-http", "/to-port"} {
		branch := strings.TrimPrefix(path, "/")
		yaml := strings.Replace(w.cluster, "url: "+w.lab.PVEURL, "url: "+front.URL+path, 1)
		if yaml == w.cluster {
			t.Fatalf("the lab's cluster.yaml has no url: %s line; update this test", w.lab.PVEURL)
		}
		head, err := w.repo.Commit(branch, map[string]string{"clusters/demo/cluster.yaml": yaml}, branch)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := w.repo.OpenPR("alice", branch, "main", branch)
		if err != nil {
			t.Fatal(err)
		}
		heads[branch], prs[branch] = head, pr.Number
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
	for branch, head := range heads {
		if st := w.status(head, "taloscluster/plan: clusters/demo"); st == "success" {
			t.Errorf("%s: the plan succeeded through a redirect", branch)
		}
		var body string
		for _, c := range w.repo.Comments(prs[branch]) {
			body += c.Body + "\n"
		}
		if !strings.Contains(body, "answered with a redirect to ") || !strings.Contains(body, "refusing to follow it with credentials") {
			t.Errorf("%s: the plan comment does not say the endpoint redirected:\n%s", branch, body)
		}
	}
	if n := leaks.Load(); n != 0 {
		t.Fatalf("the redirect targets got %d requests with an Authorization header (%d requests in all)", n, hits.Load())
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the redirect targets got %d requests; a redirect was followed", n)
	}
}
