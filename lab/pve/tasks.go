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

// task is an asynchronous Proxmox VE worker (a fork_worker in pve-manager,
// qemu-server and pve-storage). The API call that starts it makes only the
// checks Proxmox VE makes before forking and answers the UPID; the worker's
// own checks and its effect run when the task ends (at its duration, or when
// a download's transfer has finished), so until then reads show the state
// before the task, GET .../tasks/{upid}/status answers "running", and once
// it answers "stopped" the effect is visible.
type task struct {
	upid, node, typ, id, user string
	pid, pstart               int
	start, end                time.Time
	// finished is set when the worker has run; exit is valid from then on.
	finished bool
	exit     string
	// dies is an injected worker failure: the task ends with it as its
	// exit status and without its effect.
	dies string
	// warnings counts the worker's warnings; a task that ends without
	// error and with warnings exits "WARNINGS: N".
	warnings int
	// work is the worker: its checks and its effect, run with s.mu held
	// when the task ends. An error ends the task with that error; work
	// undoes its own partial effects.
	work func(t *task) error
	// abort undoes what the API call did before forking (such as a
	// create's locked placeholder config) when the worker dies injected.
	abort func()
	// waiting is set while a download transfers; done is closed when it
	// has ended.
	waiting bool
	done    chan struct{}
	lines   []string
}

func (t *task) running() bool { return !t.finished }

func (t *task) logf(format string, args ...any) {
	t.lines = append(t.lines, fmt.Sprintf(format, args...))
}

// warnf logs a warning the way a Proxmox VE worker's warn does and counts
// it towards the "WARNINGS: N" exit status.
func (t *task) warnf(format string, args ...any) {
	t.warnings++
	t.logf("WARN: "+format, args...)
}

// newTask creates a task for the request's operation, consuming injected
// task failures and warnings. The caller holds s.mu, sets work (and abort)
// and then calls s.launch.
func (s *Server) newTask(r *http.Request, node, typ, id string) *task {
	s.taskSeq++
	now := time.Now()
	pstart := int(now.Sub(s.started)/(10*time.Millisecond)) + 1000
	t := &task{
		node:   node,
		typ:    typ,
		id:     id,
		user:   caller(r),
		pid:    0x10000 + s.taskSeq,
		pstart: pstart,
		start:  now,
		end:    now.Add(s.taskTime),
	}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, t.pid, t.pstart, now.Unix(), typ, id, t.user)
	op := requestOp(r)
	if rule := takeCount(s.faults.taskFail, op); rule != nil {
		t.dies = strings.TrimRight(rule.msg, "\n")
	} else if rule := takeCount(s.faults.warn, op); rule != nil {
		for i := range rule.n {
			t.warnf("emulated warning %d of %d", i+1, rule.n)
		}
	}
	s.tasks[t.upid] = t
	return t
}

// launch starts a task's clock: it ends at once when tasks take no time,
// otherwise when its duration has passed. The caller holds s.mu and returns
// t.upid to the client.
func (s *Server) launch(t *task) {
	s.active = append(s.active, t)
	if s.taskTime == 0 {
		s.settle()
		return
	}
	s.arm(t, s.taskTime)
}

// arm ends t after d (unless a request has ended it by then).
func (s *Server) arm(t *task, d time.Duration) {
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.settle()
		if !t.finished && !t.waiting {
			if rest := time.Until(t.end); rest > 0 {
				s.arm(t, rest)
			}
		}
	})
}

// lock takes s.mu and ends the tasks that are due, so that every read sees
// the effects of the tasks reported stopped.
func (s *Server) lock() {
	s.mu.Lock()
	s.settle()
}

// settle ends every task whose time has come, in the order they end (equal
// ends in the order they started, like workers serialised by the config
// lock). The caller holds s.mu.
func (s *Server) settle() {
	now := time.Now()
	var due []*task
	rest := s.active[:0]
	for _, t := range s.active {
		if !t.waiting && !t.end.After(now) {
			due = append(due, t)
		} else {
			rest = append(rest, t)
		}
	}
	clear(s.active[len(rest):])
	s.active = rest
	slices.SortStableFunc(due, func(a, b *task) int {
		if c := a.end.Compare(b.end); c != 0 {
			return c
		}
		return a.pid - b.pid
	})
	for _, t := range due {
		s.finish(t)
	}
}

// finish runs a task's worker and fixes its exit status. The caller holds
// s.mu.
func (s *Server) finish(t *task) {
	t.finished = true
	switch {
	case t.dies != "":
		t.exit = t.dies
		if t.abort != nil {
			t.abort()
		}
		return
	case t.work != nil:
		if err := t.work(t); err != nil {
			t.exit = strings.TrimRight(err.Error(), "\n")
			return
		}
	}
	t.exit = exitOK
	if t.warnings > 0 {
		t.exit = fmt.Sprintf("WARNINGS: %d", t.warnings)
	}
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
	if !strings.HasPrefix(upid, "UPID:") {
		return nil, errorf("unable to parse worker upid '%s'", upid)
	}
	t, ok := s.tasks[upid]
	if !ok || t.node != nodeName {
		return nil, errorf("no such task")
	}
	return t, nil
}

// ownsTask is Tasks.pm's $check_task_user: a token sees its own tasks, a
// user its own and its tokens'.
func ownsTask(taskUser, authid string) bool {
	if user, _, ok := splitToken(taskUser); ok {
		return authid == taskUser || authid == user
	}
	return authid == taskUser
}

// checkTaskAccess is read_task_log's and read_task_status's check: the
// task's owner, or Sys.Audit on /nodes/<node>. The user is read from the
// UPID, before the task is looked up. The caller holds s.mu.
func (s *Server) checkTaskAccess(r *http.Request) error {
	upid := r.PathValue("upid")
	fields := strings.Split(upid, ":")
	if len(fields) < 9 || fields[0] != "UPID" {
		return nil // the lookup reports the malformed UPID
	}
	if authid := caller(r); !ownsTask(fields[7], authid) {
		return s.check(authid, "/nodes/"+r.PathValue("node"), "Sys.Audit")
	}
	return nil
}

func (t *task) status() map[string]any {
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
	if !t.running() {
		m["status"] = "stopped"
		m["exitstatus"] = t.exit
	}
	return m
}

func (s *Server) getTaskIndex(r *http.Request) (any, error) {
	s.lock()
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
	s.lock()
	err := s.checkTaskAccess(r)
	var t *task
	if err == nil {
		t, err = s.lookupTask(r)
	}
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
	s.lock()
	defer s.mu.Unlock()
	return t.status(), nil
}

func (s *Server) getTaskLog(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	if err := s.checkTaskAccess(r); err != nil {
		return nil, err
	}
	t, err := s.lookupTask(r)
	if err != nil {
		return nil, err
	}
	lines := append([]string(nil), t.lines...)
	if !t.running() {
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
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	// node_tasks: the caller's own tasks, or every task with Sys.Audit on
	// the node.
	authid := caller(r)
	auditor := s.check(authid, "/nodes/"+nodeName, "Sys.Audit") == nil
	var list []*task
	for _, t := range s.tasks {
		if t.node != nodeName {
			continue
		}
		if !auditor && !ownsTask(t.user, authid) {
			continue
		}
		if v := q.Get("vmid"); v != "" && t.id != v {
			continue
		}
		if v := q.Get("typefilter"); v != "" && t.typ != v {
			continue
		}
		if q.Get("source") != "all" && q.Get("source") != "active" && t.running() {
			continue
		}
		if q.Get("source") == "active" && !t.running() {
			continue
		}
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b *task) int { return b.pid - a.pid })
	out := []map[string]any{}
	for _, t := range list {
		m := t.status()
		if !t.running() {
			m["status"] = t.exit
			m["endtime"] = t.end.Unix()
		}
		delete(m, "exitstatus")
		out = append(out, m)
	}
	return out, nil
}
