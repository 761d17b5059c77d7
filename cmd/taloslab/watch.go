package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// listenError is an address the running lab needed and could not listen
// on: a node's Talos API or a cluster's Kubernetes API at its VIP.
type listenError struct {
	addr string // host:port
	what string
	err  string
}

func (e *listenError) Error() string {
	return fmt.Sprintf("the lab cannot listen on %s, %s: %s; another program uses the lab's network (choose another with --subnet)",
		e.addr, e.what, e.err)
}

// listenWatch is a slog.Handler that passes records on to next and
// reports the lab's listen failures, which the lab package only logs: the
// Talos world's "node api did not start" and the lab's "kube-failed"
// event. It sees every record of level Info and above, whatever next
// shows.
//
// This watches log messages of packages cmd/taloslab does not own; the
// test TestLabFailsWhenANodeCannotListen fails when they change.
type listenWatch struct {
	next   slog.Handler
	attrs  []slog.Attr
	report func(*listenError)
}

// newListenWatch returns a handler calling report once, for the first
// listen failure.
func newListenWatch(next slog.Handler, report func(*listenError)) *listenWatch {
	var once sync.Once
	return &listenWatch{next: next, report: func(e *listenError) { once.Do(func() { report(e) }) }}
}

func (h *listenWatch) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo || h.next.Enabled(ctx, level)
}

func (h *listenWatch) Handle(ctx context.Context, r slog.Record) error {
	if e := h.inspect(r); e != nil {
		h.report(e)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *listenWatch) WithAttrs(as []slog.Attr) slog.Handler {
	return &listenWatch{next: h.next.WithAttrs(as), attrs: append(append([]slog.Attr{}, h.attrs...), as...), report: h.report}
}

func (h *listenWatch) WithGroup(name string) slog.Handler {
	return &listenWatch{next: h.next.WithGroup(name), attrs: h.attrs, report: h.report}
}

// inspect recognises a listen failure in a record.
func (h *listenWatch) inspect(r slog.Record) *listenError {
	attrs := map[string]string{}
	for _, a := range h.attrs {
		attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	switch {
	case r.Message == "node api did not start" && strings.Contains(attrs["err"], "listen"):
		return &listenError{addr: net.JoinHostPort(attrs["node"], strconv.Itoa(talos.APIPort)),
			what: "the Talos API of a node", err: attrs["err"]}
	case r.Message == "lab event" && attrs["what"] == "kube-failed" && strings.Contains(attrs["detail"], "listening on "):
		_, rest, _ := strings.Cut(attrs["detail"], "listening on ")
		addr, _, _ := strings.Cut(rest, ": ")
		return &listenError{addr: addr, what: "the Kubernetes API of cluster " + attrs["subject"], err: attrs["detail"]}
	}
	return nil
}
