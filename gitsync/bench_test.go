package gitsync_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/gitsync"
)

// BenchmarkIdleFetch measures a fetch when nothing moved, on a repository
// of 1,000 cluster directories with 50 open pull requests: over smart HTTP
// (git http-backend as a CGI, so each fetch includes starting that
// process), reporting the bytes on the wire per fetch, and over the
// in-process local transport.
func BenchmarkIdleFetch(b *testing.B) {
	ctx := b.Context()
	o := newOrigin(b)
	files := make(map[string]string, 1000)
	for i := range 1000 {
		files[fmt.Sprintf("clusters/c%04d/cluster.yaml", i)] = fmt.Sprintf(
			"name: c%04d\ntalos: v1.9.0\nkubernetes: v1.32.0\nnodes:\n  - cp-01\n  - cp-02\n  - cp-03\n", i)
	}
	o.write(files)
	o.commit("1000 clusters")
	o.pushMain()
	o.git(o.work, "checkout", "-q", "-b", "prs")
	open50 := make([]int, 50)
	push := []string{"push", "-q", "origin"}
	for n := 1; n <= 50; n++ {
		open50[n-1] = n
		o.write(map[string]string{fmt.Sprintf("clusters/c%04d/patch.yaml", n): "machine: {}\n"})
		push = append(push, fmt.Sprintf("%s:refs/pull/%d/head", o.commit(fmt.Sprintf("pr %d", n)), n))
	}
	o.git(o.work, push...)
	_, url := o.gitHTTP(false, nil)

	b.Run("http", func(b *testing.B) {
		var w wire
		r := open(b, ctx, gitsync.Options{URL: url, HTTPClient: w.client(nil)})
		if _, err := r.Fetch(ctx, open50); err != nil {
			b.Fatal(err)
		}
		w.reset()
		fetches := 0
		for b.Loop() {
			h, err := r.Fetch(ctx, open50)
			if err != nil {
				b.Fatal(err)
			}
			if len(h.PRs) != 50 {
				b.Fatalf("%d PRs, want 50", len(h.PRs))
			}
			fetches++
		}
		for _, req := range w.requests() {
			if !strings.HasPrefix(req, "GET ") {
				b.Fatalf("idle fetch made request %s", req)
			}
		}
		b.ReportMetric(float64(w.bytes.Load())/float64(fetches), "wire-B/op")
	})

	b.Run("local", func(b *testing.B) {
		r := open(b, ctx, gitsync.Options{URL: o.bare})
		if _, err := r.Fetch(ctx, open50); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := r.Fetch(ctx, open50); err != nil {
				b.Fatal(err)
			}
		}
	})
}
