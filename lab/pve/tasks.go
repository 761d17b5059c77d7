package pve

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const exitOK = "OK"

// task is an asynchronous Proxmox VE worker. Its effect is applied when it
// starts; it reports "running" until its duration has passed (and, for
// downloads, until the transfer has finished).
type task struct {
	upid, node, typ, id, user string
	pid, pstart               int
	start, end                time.Time
	exit                      string
	waiting                   bool
	done                      chan struct{} // closed when waiting ends
	lines                     []string
}

func (t *task) running(now time.Time) bool { return t.waiting || now.Before(t.end) }

// failed reports whether the task ended (or will end) with an error.
func (t *task) failed() bool {
	return t.exit != exitOK && !strings.HasPrefix(t.exit, "WARNINGS")
}

// fail makes the task end with an error text.
func (t *task) fail(msg string) {
	t.exit = strings.TrimRight(msg, "\n")
}

func (t *task) logf(format string, args ...any) {
	t.lines = append(t.lines, fmt.Sprintf(format, args...))
}

// startTask creates a task for the request's operation, consuming injected
// task failures and warnings. The caller holds s.mu and applies the effect
// only when the task has not failed.
func (s *Server) startTask(r *http.Request, node, typ, id string) *task {
	s.taskSeq++
	now := time.Now()
	pstart := int(now.Sub(s.started)/(10*time.Millisecond)) + 1000
	t := &task{
		node:   node,
		typ:    typ,
		id:     id,
		user:   s.tokenID,
		pid:    0x10000 + s.taskSeq,
		pstart: pstart,
		start:  now,
		end:    now.Add(s.taskTime),
		exit:   exitOK,
	}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, t.pid, t.pstart, now.Unix(), typ, id, t.user)
	op := requestOp(r)
	if rule := takeCount(s.faults.taskFail, op); rule != nil {
		t.fail(rule.msg)
	} else if rule := takeCount(s.faults.warn, op); rule != nil {
		for i := range rule.n {
			t.logf("WARN: emulated warning %d of %d", i+1, rule.n)
		}
		t.exit = fmt.Sprintf("WARNINGS: %d", rule.n)
	}
	s.tasks[t.upid] = t
	return t
}

func (s *Server) taskRoutes() {
	s.route("GET", "/nodes/{node}/tasks", "task.list", s.listTasks)
	s.route("GET", "/nodes/{node}/tasks/{upid}", "task.get", s.getTaskIndex)
	s.route("GET", "/nodes/{node}/tasks/{upid}/status", "task.status", s.getTaskStatus)
	s.route("GET", "/nodes/{node}/tasks/{upid}/log", "task.log", s.getTaskLog)
}

func (s *Server) lookupTask(r *http.Request) (*task, error) {
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	upid := r.PathValue("upid")
	t, ok := s.tasks[upid]
	if !ok || t.node != nodeName {
		if !strings.HasPrefix(upid, "UPID:") {
			return nil, errorf("unable to parse worker upid '%s'", upid)
		}
		return nil, errorf("no such task")
	}
	return t, nil
}

func (t *task) status(now time.Time) map[string]any {
	m := map[string]any{
		"upid":      t.upid,
		"node":      t.node,
		"pid":       t.pid,
		"pstart":    t.pstart,
		"starttime": t.start.Unix(),
		"type":      t.typ,
		"id":        t.id,
		"user":      t.user,
		"status":    "running",
	}
	if strings.Contains(t.user, "!") {
		user, token, _ := strings.Cut(t.user, "!")
		m["user"] = user
		m["tokenid"] = token
	}
	if !t.running(now) {
		m["status"] = "stopped"
		m["exitstatus"] = t.exit
	}
	return m
}

func (s *Server) getTaskIndex(r *http.Request) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.lookupTask(r); err != nil {
		return nil, err
	}
	return []map[string]string{{"name": "log"}, {"name": "status"}}, nil
}

// statusWait is how long a status request waits for a transfer that is
// about to finish, sparing pollers a long sleep.
const statusWait = 200 * time.Millisecond

func (s *Server) getTaskStatus(r *http.Request) (any, error) {
	s.mu.Lock()
	t, err := s.lookupTask(r)
	var done chan struct{}
	if err == nil && t.waiting {
		done = t.done
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if done != nil {
		timer := time.NewTimer(statusWait)
		select {
		case <-done:
		case <-timer.C:
		case <-r.Context().Done():
		}
		timer.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.status(time.Now()), nil
}

func (s *Server) getTaskLog(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.lookupTask(r)
	if err != nil {
		return nil, err
	}
	lines := append([]string(nil), t.lines...)
	if !t.running(time.Now()) {
		switch {
		case t.exit == exitOK:
			lines = append(lines, "TASK OK")
		case strings.HasPrefix(t.exit, "WARNINGS"):
			lines = append(lines, "TASK "+t.exit)
		default:
			lines = append(lines, "TASK ERROR: "+t.exit)
		}
	}
	start, _ := strconv.Atoi(q.Get("start"))
	limit := 50
	if v := q.Get("limit"); v != "" {
		limit, _ = strconv.Atoi(v)
	}
	out := []map[string]any{}
	for i, l := range lines {
		if i < start || len(out) >= limit {
			continue
		}
		out = append(out, map[string]any{"n": i + 1, "t": l})
	}
	return out, nil
}

func (s *Server) listTasks(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	now := time.Now()
	var list []*task
	for _, t := range s.tasks {
		if t.node != nodeName {
			continue
		}
		if v := q.Get("vmid"); v != "" && t.id != v {
			continue
		}
		if v := q.Get("typefilter"); v != "" && t.typ != v {
			continue
		}
		if q.Get("source") != "all" && q.Get("source") != "active" && t.running(now) {
			continue
		}
		if q.Get("source") == "active" && !t.running(now) {
			continue
		}
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *task) int { return b.pid - a.pid })
	out := []map[string]any{}
	for _, t := range list {
		m := t.status(now)
		if !t.running(now) {
			m["status"] = t.exit
			m["endtime"] = t.end.Unix()
		}
		delete(m, "exitstatus")
		out = append(out, m)
	}
	return out, nil
}
