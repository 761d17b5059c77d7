package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is an io.Writer tests read while up writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runningLab is a `taloslab up` run in-process by a test.
type runningLab struct {
	dir    string
	env    map[string]string
	done   chan error
	stderr *syncBuffer
	http   *http.Client
}

// startUp runs `taloslab up --dir DIR args...` until the test ends and
// waits for its lab.env.
func startUp(t *testing.T, args ...string) *runningLab {
	t.Helper()
	r, err := launch(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// launch is startUp for any goroutine: it returns its failure.
func launch(t *testing.T, args ...string) (*runningLab, error) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningLab{dir: t.TempDir(), done: make(chan error, 1), stderr: &syncBuffer{}}
	go func() {
		// The Argo CD side only where a test asks for it (--argocd=true
		// after these).
		r.done <- up(ctx, append([]string{"--dir", r.dir, "--boot-delay", "10ms", "--install-delay", "10ms", "--argocd=false"}, args...), io.Discard, r.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("taloslab up did not stop")
		}
	})
	// The lab.env comes after the legacy cluster is built and Proxmox's
	// status broadcast (every 10 s) reports its VMs.
	deadline := time.Now().Add(45 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(r.dir, "lab.env")); err == nil {
			break
		}
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			return nil, fmt.Errorf("taloslab up ended before it was up: %v\n%s", err, r.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("taloslab up did not write lab.env\n%s", r.stderr)
		}
	}
	env, err := readEnv(filepath.Join(r.dir, "lab.env"))
	if err != nil {
		return nil, err
	}
	r.env = env
	ca, err := os.ReadFile(env["TALOSLAB_CA"])
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	r.http = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return r, nil
}

// nets returns the lab's networks from lab.env, in bridge order.
func (r *runningLab) nets(t *testing.T) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range strings.Split(r.env["TALOSLAB_SUBNETS"], ",") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			t.Fatalf("TALOSLAB_SUBNETS=%q: %v", r.env["TALOSLAB_SUBNETS"], err)
		}
		out = append(out, p)
	}
	if len(out) != len(bridgeNames) {
		t.Fatalf("TALOSLAB_SUBNETS=%q, want %d networks", r.env["TALOSLAB_SUBNETS"], len(bridgeNames))
	}
	return out
}

// startVM creates and starts a VM on a bridge through the lab's Proxmox
// API, as a client would; the lab boots it into a Talos node.
func (r *runningLab) startVM(t *testing.T, vmid int, bridge string) {
	t.Helper()
	form := url.Values{"vmid": {fmt.Sprint(vmid)}, "name": {fmt.Sprintf("vm-%d", vmid)}, "net0": {"virtio,bridge=" + bridge}, "start": {"1"}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.env["PROXMOX_URL"]+"/api2/json/nodes/pve1/qemu", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "PVEAPIToken="+r.env["PROXMOX_TOKEN_ID"]+"="+r.env["PROXMOX_TOKEN_SECRET"])
	resp, err := r.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("creating VM %d: %d %s", vmid, resp.StatusCode, body)
	}
}

// control calls the lab's control API.
func (r *runningLab) control(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, r.env["TALOSLAB_CONTROL_URL"]+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// waitListening waits until something answers TCP at addr.
func waitListening(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func host(p netip.Prefix, n byte) netip.Addr {
	a := p.Addr().As4()
	a[3] = n
	return netip.AddrFrom4(a)
}

// TestTwoLabsAtOnce starts two labs at the same time: they choose
// different networks, write them into everything they hand out, and both
// serve nodes at their own addresses.
func TestTwoLabsAtOnce(t *testing.T) {
	t.Parallel()
	labs := make([]*runningLab, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range labs {
		wg.Go(func() { labs[i], errs[i] = launch(t) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var all []netip.Prefix
	for _, l := range labs {
		all = append(all, l.nets(t)...)
	}
	if len(slices.Compact(slices.SortedFunc(slices.Values(all), netip.Prefix.Compare))) != len(all) {
		t.Fatalf("the labs share a network: %v", all)
	}
	for i, l := range labs {
		nets := l.nets(t)
		if l.env["TALOSLAB_VMBR0_NET"] != nets[0].String() || l.env["TALOSLAB_VMBR1_NET"] != nets[1].String() {
			t.Errorf("lab %d: lab.env networks disagree: %v", i, l.env)
		}
		// The example on vmbr0 and the GitOps cluster on vmbr1 use the
		// lab's networks, with the VIP at host .5.
		example, err := os.ReadFile(filepath.Join(l.dir, "examples", "proxmox", "cluster.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		gitops, err := exec.CommandContext(t.Context(), "git", "--git-dir", filepath.Join(l.dir, "forge", "org", "clusters.git"),
			"show", "main:clusters/gitops/cluster.yaml").Output()
		if err != nil {
			t.Fatalf("reading the GitOps cluster from the forge: %v", err)
		}
		for _, c := range []struct {
			name, body string
			net        netip.Prefix
		}{{"examples/proxmox", string(example), nets[0]}, {"clusters/gitops", string(gitops), nets[1]}} {
			for _, want := range []string{"cidr: " + c.net.String(), "kubeapi_vip: " + host(c.net, 5).String()} {
				if !strings.Contains(c.body, want) {
					t.Errorf("lab %d: %s lacks %q:\n%s", i, c.name, want, c.body)
				}
			}
		}
		// A VM on vmbr0 and vmbr1 boots into a node at the bridge's
		// first lease address (vmbr2's are the legacy cluster's).
		for j, bridge := range bridgeNames[:2] {
			l.startVM(t, 1000+j, bridge)
		}
		for _, p := range nets[:2] {
			waitListening(t, netip.AddrPortFrom(host(p, 100), 50000))
		}
		status, body := l.control(t, http.MethodGet, "/lab/v1/nodes", "")
		var nodes []struct {
			Addr    string `json:"addr"`
			Up      bool   `json:"up"`
			Cluster string `json:"cluster"`
		}
		if err := json.Unmarshal(body, &nodes); status != http.StatusOK || err != nil {
			t.Fatalf("lab %d nodes: %d %s", i, status, body)
		}
		started := 0
		for _, n := range nodes {
			if n.Cluster != "legacy" {
				started++
			}
		}
		if started != 2 {
			t.Fatalf("lab %d has %d nodes besides the legacy cluster's, want 2: %s", i, started, body)
		}
		for _, n := range nodes {
			if a, err := netip.ParseAddr(n.Addr); err != nil || !slices.ContainsFunc(nets, func(p netip.Prefix) bool { return p.Contains(a) }) {
				t.Errorf("lab %d has node %s outside its networks %v", i, n.Addr, nets)
			}
		}
	}
}

// TestLabFailsWhenANodeCannotListen: a node whose address another program
// took ends taloslab up with an error naming the address, at once.
func TestLabFailsWhenANodeCannotListen(t *testing.T) {
	t.Parallel()
	l := startUp(t, "--subnet", "127.208.0.0/24,127.209.0.0/24")
	squatter, err := net.Listen("tcp", "127.208.0.100:50000")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	l.startVM(t, 1000, "vmbr0")
	select {
	case err := <-l.done:
		var lerr *listenError
		if !errors.As(err, &lerr) || !strings.Contains(err.Error(), "127.208.0.100:50000") {
			t.Fatalf("taloslab up ended with %v, want an error naming 127.208.0.100:50000", err)
		}
		l.done <- err // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatalf("taloslab up kept running with a node that cannot listen\n%s", l.stderr)
	}
}

// TestUpRefusesBusySubnet: a network given with --subnet that another
// program uses is an error naming the address, before anything starts.
func TestUpRefusesBusySubnet(t *testing.T) {
	t.Parallel()
	squatter, err := net.Listen("tcp", "127.210.0.5:6443")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	dir := t.TempDir()
	err = up(t.Context(), []string{"--dir", dir, "--subnet", "127.210.0.0/24"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "127.210.0.5:6443") || !strings.Contains(err.Error(), "--subnet") {
		t.Fatalf("up = %v, want an error naming 127.210.0.5:6443", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lab.env")); err == nil {
		t.Errorf("lab.env written by a lab that did not start")
	}
}

func TestReserveSkipsBusyBlocks(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	// 127.202 has a program on a lease address; another lab holds 127.203.
	squatter, err := net.Listen("tcp", "127.202.0.150:50000")
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	held, _, err := lockBlock(block(203))
	if err != nil || held == nil {
		t.Fatalf("locking 127.203.0.0/24: %v", err)
	}
	defer held.release()

	r, err := reserve(nil, []int{202, 203, 204, 205, 206}, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.list(); got[0] != block(204) || got[1] != block(205) || got[2] != block(206) {
		t.Errorf("reserved %v, want 127.204.0.0/24, 127.205.0.0/24 and 127.206.0.0/24", got)
	}
	// While r holds them, nobody else gets them.
	if _, err := reserve(nil, []int{204, 205}, log); err == nil || !strings.Contains(err.Error(), "another taloslab") {
		t.Errorf("second reservation of held blocks: %v", err)
	}
	r.release()
	r2, err := reserve([]netip.Prefix{block(205)}, []int{202, 203, 204, 206}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.release()
	if got := r2.list(); got[0] != block(205) || got[1] != block(204) {
		t.Errorf("reserved %v, want the requested 127.205.0.0/24, then 127.204.0.0/24", got)
	}
	if _, err := reserve([]netip.Prefix{block(202)}, nil, log); err == nil || !strings.Contains(err.Error(), "127.202.0.150:50000") {
		t.Errorf("requesting a busy network: %v", err)
	}
}

func TestSubnetFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // the list, or a part of the error
	}{
		{[]string{"127.50.0.0/24"}, "127.50.0.0/24"},
		{[]string{"127.50.0.0/24,127.51.0.0/24"}, "127.50.0.0/24,127.51.0.0/24"},
		{[]string{"127.50.0.0/24", "127.51.0.0/24"}, "127.50.0.0/24,127.51.0.0/24"},
		{[]string{"127.50.0.0/24,127.51.0.0/24,127.52.0.0/24,127.53.0.0/24"}, "the lab has 3 bridges"},
		{[]string{"127.50.0.0/24,127.50.0.0/24"}, "given twice"},
		{[]string{"127.50.0.1/24"}, "did you mean 127.50.0.0/24"},
		{[]string{"127.50.0.0/16"}, "/24 blocks inside 127.0.0.0/8"},
		{[]string{"10.0.0.0/24"}, "/24 blocks inside 127.0.0.0/8"},
		{[]string{"127.0.0.0/24"}, "holds 127.0.0.1"},
		{[]string{"vmbr0"}, "not a network"},
	} {
		var s subnetList
		var err error
		for _, a := range tc.args {
			if err = s.Set(a); err != nil {
				break
			}
		}
		got := s.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("--subnet %v: %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestControlAPIGitHubFaults injects the forge's faults through the
// control API and sees go-github's view of them.
func TestControlAPIGitHubFaults(t *testing.T) {
	t.Parallel()
	l := startUp(t, "--subnet", "127.211.0.0/24,127.212.0.0/24")
	api := func() (int, http.Header) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, l.env["TALOSLAB_GITHUB_API"]+"repos/"+l.env["TALOSLAB_REPO"]+"/pulls", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "token "+l.env["TALOSLAB_GITHUB_TOKEN"])
		resp, err := l.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	inject := func(body string, want int) {
		t.Helper()
		if status, resp := l.control(t, http.MethodPost, "/lab/v1/faults", body); status != want {
			t.Fatalf("POST /lab/v1/faults %s: %d %s, want %d", body, status, resp, want)
		}
	}

	inject(`{"kind":"github-fail","op":"pulls.list","n":1,"status":502}`, http.StatusOK)
	if status, _ := api(); status != http.StatusBadGateway {
		t.Errorf("after github-fail: %d, want 502", status)
	}
	if status, _ := api(); status != http.StatusOK {
		t.Errorf("after the failure was used: %d, want 200", status)
	}
	inject(`{"kind":"github-secondary-limit","n":1,"millis":2500}`, http.StatusOK)
	if status, h := api(); status != http.StatusForbidden || h.Get("Retry-After") != "3" {
		t.Errorf("after github-secondary-limit: %d Retry-After %q, want 403 and 3", status, h.Get("Retry-After"))
	}
	inject(`{"kind":"github-rate-limit","millis":60000}`, http.StatusOK)
	if status, h := api(); status != http.StatusForbidden || h.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("after github-rate-limit: %d remaining %q, want 403 and 0", status, h.Get("X-RateLimit-Remaining"))
	}

	inject(`{"kind":"github-fail","op":"pull.list"}`, http.StatusBadRequest)
	inject(`{"kind":"github-fail","op":"pulls.list","status":200}`, http.StatusBadRequest)
	inject(`{"kind":"github-nonsense"}`, http.StatusBadRequest)
	inject(`{"kind":"github-latency","op":"comments.*","millis":-1}`, http.StatusBadRequest)
	// The lab's own kinds still reach the lab.
	inject(`{"kind":"proxmox-fail","op":"qemu.create","n":1,"status":500}`, http.StatusOK)
	inject(`{"kind":"no-such-kind"}`, http.StatusBadRequest)

	status, body := l.control(t, http.MethodGet, "/lab/v1/", "")
	var index struct {
		FaultKinds []string `json:"fault_kinds"`
		Ops        []string `json:"github_operations"`
	}
	if err := json.Unmarshal(body, &index); status != http.StatusOK || err != nil {
		t.Fatalf("GET /lab/v1/: %d %s", status, body)
	}
	for _, k := range append(slices.Clone(githubFaultKinds), "proxmox-fail") {
		if !slices.Contains(index.FaultKinds, k) {
			t.Errorf("GET /lab/v1/ fault_kinds lacks %s: %v", k, index.FaultKinds)
		}
	}
	if !slices.Contains(index.Ops, "statuses.create") {
		t.Errorf("GET /lab/v1/ github_operations: %v", index.Ops)
	}

	status, body = l.control(t, http.MethodGet, "/lab/v1/log", "")
	var entries []struct {
		Source, Op, Target, Result string
	}
	if err := json.Unmarshal(body, &entries); status != http.StatusOK || err != nil {
		t.Fatalf("GET /lab/v1/log: %d %s", status, body)
	}
	var github, faults []string
	for _, e := range entries {
		switch {
		case e.Source == "github" && e.Op == "pulls.list":
			github = append(github, e.Result)
		case e.Source == "lab" && e.Op == "fault":
			faults = append(faults, e.Target)
		}
	}
	if want := []string{"502", "200", "403", "403"}; !slices.Equal(github, want) {
		t.Errorf("the log's pulls.list results %v, want %v", github, want)
	}
	if want := []string{"github-fail", "github-secondary-limit", "github-rate-limit", "proxmox-fail"}; !slices.Equal(faults, want) {
		t.Errorf("the log's faults %v, want %v", faults, want)
	}
	t.Run("rancher", func(t *testing.T) { testRancher(t, l) })
}

// TestControlAPIGitHubConnectionFaults injects github-reset,
// github-lost-reply and github-hang through the control API and sees them
// with a net/http client of the forge and in the log.
func TestControlAPIGitHubConnectionFaults(t *testing.T) {
	t.Parallel()
	l := startUp(t, "--subnet", "127.213.0.0/24,127.214.0.0/24")
	api := func(ctx context.Context, method, path, body string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, l.env["TALOSLAB_GITHUB_API"]+"repos/"+l.env["TALOSLAB_REPO"]+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "token "+l.env["TALOSLAB_GITHUB_TOKEN"])
		resp, err := l.http.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp.StatusCode, data, err
	}
	inject := func(body string, want int, wantMsg string) {
		t.Helper()
		status, resp := l.control(t, http.MethodPost, "/lab/v1/faults", body)
		if status != want || !strings.Contains(string(resp), wantMsg) {
			t.Fatalf("POST /lab/v1/faults %s: %d %s, want %d naming %q", body, status, resp, want, wantMsg)
		}
	}
	reset := func(err error) bool {
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
	}

	status, body, err := api(t.Context(), http.MethodGet, "/commits/main/status", "")
	var combined struct {
		SHA string `json:"sha"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &combined) != nil {
		t.Fatalf("the combined status of main: %d %s %v", status, body, err)
	}
	createStatus := func() error {
		status, body, err := api(t.Context(), http.MethodPost, "/statuses/"+combined.SHA, `{"state":"pending","context":"lab/test"}`)
		if err == nil {
			err = fmt.Errorf("answered %d %s", status, body)
		}
		return err
	}
	statuses := func() int {
		status, body, err := api(t.Context(), http.MethodGet, "/commits/"+combined.SHA+"/statuses", "")
		var list []json.RawMessage
		if err != nil || status != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Fatalf("listing statuses: %d %s %v", status, body, err)
		}
		return len(list)
	}

	inject(`{"kind":"github-reset","op":"statuses.create","n":1}`, http.StatusOK, "github-reset")
	if err := createStatus(); !reset(err) {
		t.Fatalf("reset status: %v, want a connection reset", err)
	}
	if n := statuses(); n != 0 {
		t.Errorf("%d statuses after the reset, want 0", n)
	}
	inject(`{"kind":"github-lost-reply","op":"statuses.*"}`, http.StatusOK, "github-lost-reply")
	if err := createStatus(); !reset(err) {
		t.Fatalf("status with a lost reply: %v, want a connection reset", err)
	}
	if n := statuses(); n != 1 {
		t.Errorf("%d statuses after the lost reply, want 1", n)
	}
	inject(`{"kind":"github-hang","op":"pulls.list","n":1}`, http.StatusOK, "github-hang")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, _, err = api(ctx, http.MethodGet, "/pulls", "")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung request: %v, want the client's deadline", err)
	}
	if status, body, err := api(t.Context(), http.MethodGet, "/pulls", ""); err != nil || status != http.StatusOK {
		t.Fatalf("the request after the hang: %d %s %v", status, body, err)
	}

	inject(`{"kind":"github-hang"}`, http.StatusBadRequest, "needs op")
	inject(`{"kind":"github-reset","op":"status.create"}`, http.StatusBadRequest, "needs op")
	inject(`{"kind":"github-lost-reply","op":"["}`, http.StatusBadRequest, "needs op")
	inject(`{"kind":"github-crash","op":"*"}`, http.StatusBadRequest, "unknown fault kind")

	var results []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, body := l.control(t, http.MethodGet, "/lab/v1/log", "")
		var entries []struct {
			Source, Op, Result string
		}
		if err := json.Unmarshal(body, &entries); status != http.StatusOK || err != nil {
			t.Fatalf("GET /lab/v1/log: %d %s", status, body)
		}
		results = nil
		for _, e := range entries {
			if e.Source == "github" && (strings.HasPrefix(e.Result, "no answer (") || strings.Contains(e.Result, "not sent")) {
				results = append(results, e.Op+": "+e.Result)
			}
		}
		if len(results) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := []string{"statuses.create: no answer (reset)", "statuses.create: 201 not sent (lost-reply)", "pulls.list: no answer (hang)"}
	if !slices.Equal(results, want) {
		t.Errorf("the log's faulted requests %q, want %q", results, want)
	}
}
