package pve_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// isReset reports whether err is what a client sees of a connection reset
// by the server: ECONNRESET, or an EOF when another goroutine of the
// client's transport took the reset error first.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// createVM posts a VM creation with a raw client, as the library would
// (the library itself retries transport errors with sleeps), and returns
// the status and body of the answer.
func (l *lab) createVM(ctx context.Context, vmid string) (int, string, error) {
	form := url.Values{"vmid": {vmid}, "name": {"vm-" + vmid}, "cores": {"1"}, "memory": {"512"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.ts.URL+"/api2/json/nodes/pve1/qemu", strings.NewReader(form.Encode()))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "PVEAPIToken="+pve.DefaultTokenID+"="+pve.DefaultTokenSecret)
	resp, err := l.ts.Client().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (l *lab) hasVM(id int) bool {
	for _, vm := range l.srv.VMs() {
		if vm.ID == id {
			return true
		}
	}
	return false
}

// logged returns the log entries of an operation.
func (l *lab) logged(op string) []pve.Op {
	var out []pve.Op
	for _, o := range l.srv.Log() {
		if o.Name == op {
			out = append(out, o)
		}
	}
	return out
}

// TestResetAndLostReply checks the connection faults with a net/http
// client: a reset create has no effect, a create whose reply is lost
// creates the VM, and both show in the log.
func TestResetAndLostReply(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	ctx := t.Context()

	l.srv.ResetConn("qemu.create", 1)
	if code, body, err := l.createVM(ctx, "100"); !isReset(err) {
		t.Fatalf("reset create = %d %s, %v; want a connection reset", code, body, err)
	}
	if l.hasVM(100) {
		t.Error("a reset create made the VM")
	}

	l.srv.LoseReply("qemu.create", 1)
	if code, body, err := l.createVM(ctx, "101"); !isReset(err) {
		t.Fatalf("create with a lost reply = %d %s, %v; want a connection reset", code, body, err)
	}
	if !l.hasVM(101) {
		t.Error("the create whose reply was lost made no VM")
	}
	code, body := l.call(t, http.MethodGet, "/nodes/pve1/tasks", url.Values{"vmid": {"101"}, "typefilter": {"qmcreate"}})
	tasks, _ := body["data"].([]any)
	if code != http.StatusOK || len(tasks) != 1 || tasks[0].(map[string]any)["status"] != "OK" {
		t.Errorf("the lost reply's task: %d %v", code, body)
	}

	// The faults are used up: the next create answers.
	if code, body, err := l.createVM(ctx, "102"); err != nil || code != http.StatusOK || !strings.Contains(body, "UPID:pve1:") {
		t.Fatalf("create after the faults = %d %s, %v", code, body, err)
	}

	got := l.logged("qemu.create")
	if len(got) != 3 {
		t.Fatalf("log of creates: %+v", got)
	}
	if got[0].Status != 0 || got[0].Fault != "reset" {
		t.Errorf("reset create logged as %+v", got[0])
	}
	if got[1].Status != http.StatusOK || got[1].Fault != "lost-reply" {
		t.Errorf("lost reply logged as %+v", got[1])
	}
	if got[2].Status != http.StatusOK || got[2].Fault != "" {
		t.Errorf("answered create logged as %+v", got[2])
	}
}

// TestLostReplyOfAFailure checks that a request failing for a real reason
// loses its error answer too, with the error kept in the log.
func TestLostReplyOfAFailure(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	if code, body, err := l.createVM(t.Context(), "100"); err != nil || code != http.StatusOK {
		t.Fatalf("create = %d %s, %v", code, body, err)
	}
	l.srv.LoseReply(pve.AnyOp, 1)
	if code, body, err := l.createVM(t.Context(), "100"); !isReset(err) {
		t.Fatalf("colliding create with a lost reply = %d %s, %v; want a connection reset", code, body, err)
	}
	got := l.logged("qemu.create")
	if last := got[len(got)-1]; last.Status != http.StatusInternalServerError || last.Fault != "lost-reply" || !strings.Contains(last.Message, "already exists") {
		t.Errorf("the lost failure logged as %+v", last)
	}
}

// TestResetOverHTTP2 checks that a reset reaches an HTTP/2 client when the
// server has the ConnContext hook.
func TestResetOverHTTP2(t *testing.T) {
	t.Parallel()
	srv := pve.New(pve.Options{TaskDuration: -1})
	ts := newH2Server(t, srv)
	srv.ResetConn("version.get", 1)
	get := func() (int, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api2/json/version", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "PVEAPIToken="+pve.DefaultTokenID+"="+pve.DefaultTokenSecret)
		resp, err := ts.Client().Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("answered over %s", resp.Proto)
		}
		return resp.StatusCode, nil
	}
	if code, err := get(); !isReset(err) {
		t.Fatalf("reset GET over HTTP/2 = %d, %v; want a connection reset", code, err)
	}
	if code, err := get(); err != nil || code != http.StatusOK {
		t.Fatalf("GET after the reset = %d, %v", code, err)
	}
}

// newH2Server serves the emulator over TLS with HTTP/2 and the
// ConnContext hook, as the lab serves it.
func newH2Server(t *testing.T, srv *pve.Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.EnableHTTP2 = true
	ts.Config.ConnContext = pve.ConnContext
	ts.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
	})
	return ts
}
