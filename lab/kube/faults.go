package kube

import (
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Op is one request as the emulator saw it, in the order requests arrived.
type Op struct {
	// Time is when the request arrived.
	Time time.Time
	// User is the common name of the verified client certificate; empty for
	// a request that was not authenticated.
	User string
	// Method and Path are the HTTP method and URL path; Query is the raw
	// query string.
	Method, Path, Query string
	// Verb is the Kubernetes verb: get, list, watch, create, update, patch,
	// delete or deletecollection.
	Verb string
	// Resource is the resource with its subresource, like "nodes",
	// "pods/eviction" or "poddisruptionbudgets"; for the non-resource
	// endpoints it is "version", "discovery" or "health".
	Resource string
	// Namespace and Name identify the object, where the request names one.
	Namespace, Name string
	// Code is the HTTP status code of the answer; 0 while the request is
	// being served and for a request that was hung or whose connection was
	// reset. For a lost reply it is the code the answer would have had.
	Code int
	// Fault is the injected fault that shaped the answer: "fail", "hang",
	// "delay", "reset", "lost-reply" or empty.
	Fault string
}

// Key returns the operation's name for fault injection: the verb and the
// resource, like "create pods/eviction" or "get version".
func (o Op) Key() string { return o.Verb + " " + o.Resource }

type fault struct {
	kind   string // fail, hang, delay, reset, lost-reply
	match  string
	left   int
	status int
	delay  time.Duration
}

// matchOp reports whether the pattern names op: "VERB RESOURCE" with either
// part "*" for any, or "*" alone for every operation.
func matchOp(pattern string, op *Op) bool {
	pattern = strings.TrimSpace(pattern)
	if pattern == "*" {
		return true
	}
	verb, res, ok := strings.Cut(pattern, " ")
	if !ok {
		return false
	}
	res = strings.TrimSpace(res)
	return (verb == "*" || verb == op.Verb) && (res == "*" || res == op.Resource)
}

// Fail makes the next n requests matching op fail with the HTTP status code
// status and a metav1.Status body with the reason kube-apiserver gives that
// code (500 InternalError, 503 ServiceUnavailable, 429 TooManyRequests,
// 409 Conflict, 404 NotFound and so on). op is "VERB RESOURCE" as in
// Op.Key, with "*" for any verb or resource, or "*" for every request.
func (s *Server) Fail(op string, n, status int) {
	s.addFault(&fault{kind: "fail", match: op, left: n, status: status})
}

// Hang makes the next n requests matching op (see Fail) hang: the request
// is read and never answered until the client gives up (its context ends)
// or the server closes.
func (s *Server) Hang(op string, n int) {
	s.addFault(&fault{kind: "hang", match: op, left: n})
}

// ResetConn makes the next n requests matching op (see Fail) get no
// answer: the connection is aborted with a TCP reset before the request has
// any effect, as when a proxy or the API server crashes. Over HTTP/2 every
// request sharing the connection loses it too, as with a real reset.
func (s *Server) ResetConn(op string, n int) {
	s.addFault(&fault{kind: "reset", match: op, left: n})
}

// LoseReply makes the next n requests matching op (see Fail) take full
// effect (the object is written) and then lose their answer: the
// connection is aborted with a TCP reset instead, as when the API server
// crashes after committing.
func (s *Server) LoseReply(op string, n int) {
	s.addFault(&fault{kind: "lost-reply", match: op, left: n})
}

// Delay makes the next n requests matching op (see Fail) wait d before they
// are served.
func (s *Server) Delay(op string, n int, d time.Duration) {
	s.addFault(&fault{kind: "delay", match: op, left: n, delay: d})
}

// ClearFaults drops every fault not yet used up.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

func (s *Server) addFault(f *fault) {
	if f.left <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// takeFaults consumes the faults that apply to op, in the order they were
// added: at most one delay and at most one failure or hang.
func (s *Server) takeFaults(op *Op) (delay time.Duration, final *fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.faults[:0]
	for _, f := range s.faults {
		use := matchOp(f.match, op) && ((f.kind == "delay" && delay == 0) || (f.kind != "delay" && final == nil))
		if use {
			if f.kind == "delay" {
				delay = f.delay
			} else {
				final = f
			}
			f.left--
		}
		if f.left > 0 {
			kept = append(kept, f)
		}
	}
	s.faults = kept
	return delay, final
}

// injectedError is the Status a failed request gets.
func injectedError(op *Op, status int) error {
	gr := schema.ParseGroupResource(strings.SplitN(op.Resource, "/", 2)[0])
	// kube-apiserver's priority and fairness answers 429 with Retry-After: 1,
	// which client-go honours by retrying; other codes reach the caller.
	retry := 0
	if status == http.StatusTooManyRequests {
		retry = 1
	}
	err := apierrors.NewGenericServerResponse(status, strings.ToUpper(op.Method), gr, op.Name,
		"injected fault", retry, false)
	if status == http.StatusConflict && strings.Contains(op.Resource, "/") {
		// A POST to a subresource conflicts; only a create collides.
		err.ErrStatus.Reason = metav1.StatusReasonConflict
	}
	return err
}

// Log returns a copy of the request log, in arrival order.
func (s *Server) Log() []Op {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Op, len(s.log))
	for i, op := range s.log {
		out[i] = *op
	}
	return out
}

// ResetLog empties the request log.
func (s *Server) ResetLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}
