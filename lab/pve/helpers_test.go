package pve_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// lab is an emulator served over verified TLS with a proxmox-api-go client.
type lab struct {
	srv    *pve.Server
	ts     *httptest.Server
	client *proxmox.Client
	pool   *x509.CertPool
}

// newLab starts an emulator; tasks end at once unless opts says otherwise.
func newLab(t *testing.T, opts pve.Options) *lab {
	t.Helper()
	if opts.TaskDuration == 0 {
		opts.TaskDuration = -1
	}
	srv := pve.New(opts)
	ts := httptest.NewTLSServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
	})
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	l := &lab{srv: srv, ts: ts, pool: pool}
	l.client = l.newClient(t, pve.DefaultTokenID, pve.DefaultTokenSecret)
	return l
}

func (l *lab) newClient(t *testing.T, tokenID, secret string) *proxmox.Client {
	t.Helper()
	c, err := proxmox.NewClient(l.ts.URL+"/api2/json", nil, "", &tls.Config{RootCAs: l.pool, MinVersion: tls.VersionTLS12}, "", 30, false)
	if err != nil {
		t.Fatalf("creating the client: %v", err)
	}
	var id proxmox.ApiTokenID
	if err := id.Parse(tokenID); err != nil {
		t.Fatalf("parsing the token ID: %v", err)
	}
	c.SetAPIToken(id, proxmox.ApiTokenSecret(secret))
	return c
}

// call makes a raw API request with the lab token and decodes the answer.
func (l *lab) call(t *testing.T, method, path string, params url.Values) (int, map[string]any) {
	t.Helper()
	return l.callAuth(t, method, path, params, "PVEAPIToken="+pve.DefaultTokenID+"="+pve.DefaultTokenSecret)
}

func (l *lab) callAuth(t *testing.T, method, path string, params url.Values, auth string) (int, map[string]any) {
	t.Helper()
	target := l.ts.URL + "/api2/json" + path
	var body io.Reader
	if method == http.MethodGet || method == http.MethodDelete {
		if len(params) > 0 {
			target += "?" + params.Encode()
		}
	} else {
		body = strings.NewReader(params.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, target, body)
	if err != nil {
		t.Fatalf("building the request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := l.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %q", method, path, raw)
	}
	return resp.StatusCode, out
}

// waitTask polls a task until it stops and returns its exit status.
func (l *lab) waitTask(t *testing.T, node, upid string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		code, body := l.call(t, http.MethodGet, "/nodes/"+node+"/tasks/"+upid+"/status", nil)
		if code != http.StatusOK {
			t.Fatalf("task status: %d %v", code, body)
		}
		data := body["data"].(map[string]any)
		if data["status"] == "stopped" {
			return data["exitstatus"].(string)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("task %s did not stop", upid)
	return ""
}

// machines records power events and serves guest agent addresses.
type machines struct {
	on  chan pve.VM
	off chan int

	mu     sync.Mutex
	addrs  map[int][]netip.Prefix
	perNIC map[int]map[string][]netip.Prefix
}

func newMachines() *machines {
	return &machines{
		on:     make(chan pve.VM, 32),
		off:    make(chan int, 32),
		addrs:  map[int][]netip.Prefix{},
		perNIC: map[int]map[string][]netip.Prefix{},
	}
}

func (m *machines) PowerOn(vm pve.VM) { m.on <- vm }
func (m *machines) PowerOff(id int)   { m.off <- id }

func (m *machines) Addresses(id int) []netip.Prefix {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addrs[id]
}

func (m *machines) setAddresses(id int, p ...netip.Prefix) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addrs[id] = p
}

func (m *machines) wantOn(t *testing.T) pve.VM {
	t.Helper()
	select {
	case vm := <-m.on:
		return vm
	case <-time.After(5 * time.Second):
		t.Fatal("no PowerOn")
	}
	return pve.VM{}
}

func (m *machines) wantOff(t *testing.T) int {
	t.Helper()
	select {
	case id := <-m.off:
		return id
	case <-time.After(5 * time.Second):
		t.Fatal("no PowerOff")
	}
	return 0
}

// nicMachines reports addresses per NIC.
type nicMachines struct {
	*machines
}

func (m nicMachines) InterfaceAddresses(id int) map[string][]netip.Prefix {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.perNIC[id]
}

func ptr[T any](v T) *T { return &v }

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func itoa(n int) string { return strconv.Itoa(n) }

// deletePool deletes a pool through the library, which empties a pool that
// is not empty first.
func deletePool(ctx context.Context, c *proxmox.Client, name proxmox.PoolName) error {
	_, err := c.New().Pool.Delete(ctx, name)
	return err
}
