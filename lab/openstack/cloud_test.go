package openstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

// fakePorts stands in for Neutron behind Nova's port seam.
type fakePorts struct {
	mu    sync.Mutex
	ports map[string]*fakePort
}

type fakePort struct {
	network, mac, device string
	addr                 netip.Addr
}

func newFakePorts(ids ...string) *fakePorts {
	f := &fakePorts{ports: map[string]*fakePort{}}
	for i, id := range ids {
		f.ports[id] = &fakePort{
			network: "lab-net", mac: fmt.Sprintf("fa:16:3e:00:00:%02x", i+1),
			addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)}),
		}
	}
	return f
}

func (f *fakePorts) bindPort(portID, serverID, zone string) ([]netip.Addr, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.ports[portID]
	if p == nil {
		return nil, "", errPortNotFound
	}
	if p.device != "" && p.device != serverID {
		return nil, "", errPortInUse
	}
	p.device = serverID
	return []netip.Addr{p.addr}, p.mac, nil
}

func (f *fakePorts) unbindPorts(serverID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.ports {
		if p.device == serverID {
			p.device = ""
		}
	}
}

func (f *fakePorts) networkNameOfPort(portID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.ports[portID]; p != nil {
		return p.network
	}
	return ""
}

func (f *fakePorts) allocatePort(networkID, serverID, zone string) (string, []netip.Addr, string, error) {
	return "", nil, "", errNetworkNotFound
}

func (f *fakePorts) releasePort(string) {}

func (f *fakePorts) device(portID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ports[portID].device
}

// fakeMachines records the MachineHooks calls.
type fakeMachines struct {
	mu     sync.Mutex
	events []string
	up     map[string]ServerInfo
}

func (m *fakeMachines) ServerUp(s ServerInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, "up "+s.ID)
	if m.up == nil {
		m.up = map[string]ServerInfo{}
	}
	m.up[s.ID] = s
}

func (m *fakeMachines) ServerDown(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, "down "+id)
}

func (m *fakeMachines) ServerDeleted(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, "deleted "+id)
}

// of returns the events of one server, without its ID.
func (m *fakeMachines) of(id string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, e := range m.events {
		if verb, sid, _ := strings.Cut(e, " "); sid == id {
			out = append(out, verb)
		}
	}
	return out
}

// lab is a running Server with gophercloud clients.
type lab struct {
	srv      *Server
	provider *gophercloud.ProviderClient
	compute  *gophercloud.ServiceClient
	image    *gophercloud.ServiceClient
	machines *fakeMachines
	ports    *fakePorts
}

// startLab starts a Server whose Nova binds the given ports, and logs in.
func startLab(t *testing.T, o Options, portIDs ...string) *lab {
	t.Helper()
	l := &lab{machines: &fakeMachines{}, ports: newFakePorts(portIDs...)}
	if o.BuildDelay == 0 {
		o.BuildDelay = 20 * time.Millisecond
	}
	o.Machines = l.machines
	l.srv = start(t, o)
	l.srv.nova.ports = l.ports
	var err error
	if l.provider, err = authenticate(t, l.srv, l.srv.URL()+"/identity/v3", DefaultCredential.ID, DefaultCredential.Secret); err != nil {
		t.Fatal(err)
	}
	if l.compute, err = gcopenstack.NewComputeV2(l.provider, gophercloud.EndpointOpts{}); err != nil {
		t.Fatal(err)
	}
	if l.image, err = gcopenstack.NewImageV2(l.provider, gophercloud.EndpointOpts{}); err != nil {
		t.Fatalf("image endpoint: %v", err)
	}
	return l
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// activeImage creates and uploads an image and waits for it to be active.
func (l *lab) activeImage(t *testing.T, opts images.CreateOpts, data []byte) *images.Image {
	t.Helper()
	img, err := images.Create(t.Context(), l.image, opts).Extract()
	if err != nil {
		t.Fatalf("creating image: %v", err)
	}
	if err := imagedata.Upload(t.Context(), l.image, img.ID, bytes.NewReader(data)).ExtractErr(); err != nil {
		t.Fatalf("uploading: %v", err)
	}
	got, err := images.Get(t.Context(), l.image, img.ID).Extract()
	if err != nil || got.Status != images.ImageStatusActive {
		t.Fatalf("after upload: %+v, %v", got, err)
	}
	return got
}

// apiError is the status and body of a refused gophercloud call.
func apiError(t *testing.T, err error) (int, string) {
	t.Helper()
	var resp gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &resp) {
		t.Fatalf("err = %v, want an HTTP error", err)
	}
	return resp.Actual, string(resp.Body)
}

// novaMessage decodes Nova's fault body {"<name>": {"code", "message"}}.
func novaMessage(t *testing.T, body string) (string, string) {
	t.Helper()
	var doc map[string]struct {
		Code    int
		Message string
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || len(doc) != 1 {
		t.Fatalf("fault body %q: %v", body, err)
	}
	for name, f := range doc {
		return name, f.Message
	}
	return "", ""
}

// raw sends a request with the lab's token (unless noToken).
func (l *lab) raw(t *testing.T, method, path string, header map[string]string, body string, noToken bool) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, l.srv.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if !noToken {
		req.Header.Set("X-Auth-Token", l.provider.Token())
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient(l.srv).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp, b.String()
}
