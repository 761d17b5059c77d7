package pve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

// AnyOp matches every operation in Fail, TaskWarnings, TaskFail, SetLatency,
// Hang, ResetConn and LoseReply.
const AnyOp = "*"

type failRule struct {
	left   int
	status int
	msg    string
}

type countRule struct {
	left int
	n    int    // warnings
	msg  string // task failure
}

type faultTable struct {
	fail     map[string][]*failRule
	warn     map[string][]*countRule
	taskFail map[string][]*countRule
	latency  map[string]time.Duration
	hang     map[string]int
	reset    map[string]int
	lost     map[string]int
}

func newFaultTable() faultTable {
	return faultTable{
		fail:     map[string][]*failRule{},
		warn:     map[string][]*countRule{},
		taskFail: map[string][]*countRule{},
		latency:  map[string]time.Duration{},
		hang:     map[string]int{},
		reset:    map[string]int{},
		lost:     map[string]int{},
	}
}

// Fail makes the next n requests of operation op (or of any operation, with
// AnyOp) fail with the given HTTP status (500 if it is not an HTTP status)
// and message, before they have any effect. Rules queue up in the order they
// are given.
func (s *Server) Fail(op string, n int, status int, msg string) {
	if n <= 0 {
		return
	}
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.fail[op] = append(s.faults.fail[op], &failRule{left: n, status: status, msg: msg})
}

// TaskWarnings makes the next n tasks started by operation op end with exit
// status "WARNINGS: <warnings>" (with as many WARN lines in the task log).
// The operation still takes effect when the task ends (unless its worker
// fails for a real reason, which then decides the exit status).
func (s *Server) TaskWarnings(op string, n int, warnings int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.warn[op] = append(s.faults.warn[op], &countRule{left: n, n: warnings})
}

// TaskFail makes the next n tasks started by operation op end with the given
// exit status (an error text) without taking effect, like a worker that dies
// at its start. The HTTP request itself succeeds and returns the task's
// UPID; what the call did before forking is undone when the task ends (a
// create's locked placeholder configuration is removed, as qemu-server's
// create worker removes the config file on error).
func (s *Server) TaskFail(op string, n int, exitStatus string) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.taskFail[op] = append(s.faults.taskFail[op], &countRule{left: n, msg: exitStatus})
}

// SetLatency delays every request of operation op by d before it is
// handled (a client that gives up meanwhile gets no answer); zero removes
// the delay.
func (s *Server) SetLatency(op string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.faults.latency, op)
		return
	}
	s.faults.latency[op] = d
}

// Hang makes the next n requests of operation op never answer, without
// taking effect: they block until the client gives up (the connection is
// then dropped with no answer) or Close is called (they then answer 503).
func (s *Server) Hang(op string, n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.hang[op] += n
}

// ResetConn makes the next n requests of operation op (or of any operation,
// with AnyOp) get no answer: the connection is aborted with a TCP reset
// before the request has any effect, as when a proxy or the API server
// crashes. The log shows them with status 0 and fault "reset".
func (s *Server) ResetConn(op string, n int) {
	s.addCount(s.faults.reset, op, n)
}

// LoseReply makes the next n requests of operation op (or of any
// operation, with AnyOp) take full effect and then lose their answer: the
// connection is aborted with a TCP reset instead. An asynchronous
// operation's task is started and ends as usual; only the answer with its
// UPID is lost. The log shows the status the answer would have had and
// fault "lost-reply".
func (s *Server) LoseReply(op string, n int) {
	s.addCount(s.faults.lost, op, n)
}

func (s *Server) addCount(m map[string]int, op string, n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m[op] += n
}

// ConnContext is a hook for the http.Server.ConnContext of the server
// serving Handler. ResetConn and LoseReply need it to reset HTTP/2
// connections; HTTP/1 connections are reset without it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return connabort.ConnContext(ctx, c)
}

// takeFail consumes a failure rule for op. The caller holds s.mu.
func (f *faultTable) takeFail(op string) *failRule {
	for _, key := range []string{op, AnyOp} {
		rules := f.fail[key]
		for len(rules) > 0 && rules[0].left <= 0 {
			rules = rules[1:]
		}
		f.fail[key] = rules
		if len(rules) > 0 {
			rules[0].left--
			return rules[0]
		}
	}
	return nil
}

func takeCount(m map[string][]*countRule, op string) *countRule {
	for _, key := range []string{op, AnyOp} {
		rules := m[key]
		for len(rules) > 0 && rules[0].left <= 0 {
			rules = rules[1:]
		}
		m[key] = rules
		if len(rules) > 0 {
			rules[0].left--
			return rules[0]
		}
	}
	return nil
}

// takeN consumes one of the counted faults of m for op. The caller holds
// s.mu.
func takeN(m map[string]int, op string) bool {
	for _, key := range []string{op, AnyOp} {
		if m[key] > 0 {
			m[key]--
			return true
		}
	}
	return false
}

func (f *faultTable) latencyOf(op string) time.Duration {
	if d, ok := f.latency[op]; ok {
		return d
	}
	return f.latency[AnyOp]
}

// inject applies latency, hangs, failures and resets to a request. It
// reports whether the request should be handled, and whether its answer is
// then to be lost (see LoseReply).
func (s *Server) inject(w http.ResponseWriter, r *http.Request, op string) (handle, lose bool) {
	s.mu.Lock()
	d := s.faults.latencyOf(op)
	s.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			panic(http.ErrAbortHandler) // the client is gone: answer nothing
		}
	}

	s.mu.Lock()
	var rule *failRule
	hang := takeN(s.faults.hang, op)
	if !hang {
		rule = s.faults.takeFail(op)
	}
	reset := !hang && rule == nil && takeN(s.faults.reset, op)
	lose = !hang && rule == nil && !reset && takeN(s.faults.lost, op)
	s.mu.Unlock()

	switch {
	case hang:
		markFault(r, "hang")
		select {
		case <-r.Context().Done():
			panic(http.ErrAbortHandler) // the client is gone: answer nothing
		case <-s.closed:
			writeError(w, &apiError{status: http.StatusServiceUnavailable, msg: "hung request released"})
		}
		return false, false
	case rule != nil:
		writeError(w, &apiError{status: rule.status, msg: rule.msg})
		return false, false
	case reset:
		markFault(r, "reset")
		abort(w, r)
		return false, false
	}
	return true, lose
}

// loseReply aborts the connection of a request that was carried out,
// instead of answering it; the log keeps the status the answer would have
// had.
func loseReply(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusOK, ""
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = errorf("%s", err.Error())
		}
		status, msg = ae.status, ae.msg
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.status, sw.msg = status, msg
	}
	markFault(r, "lost-reply")
	abort(w, r)
}

// abort logs a request that gets no answer and resets its connection; it
// is logged first so that the log has it before the client notices.
func abort(w http.ResponseWriter, r *http.Request) {
	if sw, ok := w.(*statusWriter); ok {
		sw.logNow()
	}
	connabort.HTTP(w, r)
}

// markFault notes in the request's log entry the fault that kept its
// answer from the client.
func markFault(r *http.Request, fault string) {
	if rec, ok := r.Context().Value(ctxKey{}).(*Op); ok {
		rec.Fault = fault
	}
}
