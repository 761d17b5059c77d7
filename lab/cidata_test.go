package lab_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/providers/proxmox"
)

// workerConfig is the machine config of a worker of a new cluster.
func workerConfig(t *testing.T, cluster, endpoint string) []byte {
	t.Helper()

	contract, err := config.ParseContractFromVersion("v1.13.0")
	if err != nil {
		t.Fatal(err)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		t.Fatal(err)
	}

	in, err := generate.NewInput(cluster, endpoint, "v1.35.1", generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machine.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}

	data, err := cfg.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	return data
}

// TestReadsTheProvidersConfigISO reads the config ISO the Proxmox provider
// writes with the lab's own reader, which reads it the way Talos does.
func TestReadsTheProvidersConfigISO(t *testing.T) {
	t.Parallel()

	user := workerConfig(t, "iso", "https://127.0.0.1:6443")

	iso, err := proxmox.CIDataISO("iso-worker-01", user)
	if err != nil {
		t.Fatal(err)
	}

	got, err := talos.ReadNoCloudISO(iso)
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(got.UserData, user) {
		t.Errorf("user-data differs: %d bytes read, %d written", len(got.UserData), len(user))
	}

	if want := "instance-id: iso-worker-01\nlocal-hostname: iso-worker-01\n"; string(got.MetaData) != want || got.Label != "cidata" {
		t.Errorf("label %q, meta-data %q", got.Label, got.MetaData)
	}
}

// pveAPI calls the lab's Proxmox API and waits for the task a call starts.
type pveAPI struct {
	lab    *lab.Lab
	client *http.Client
}

func (p pveAPI) do(t *testing.T, method, path, contentType string, body io.Reader) any {
	t.Helper()

	req, err := http.NewRequestWithContext(t.Context(), method, p.lab.PVEURL+"/api2/json"+path, body)
	if err != nil {
		t.Fatal(err)
	}

	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}

	req.Header.Set("Authorization", "PVEAPIToken="+p.lab.TokenID+"="+p.lab.TokenSecret)

	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	var out struct {
		Data any `json:"data"`
	}

	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, raw)
	}

	return out.Data
}

// task runs a call that starts a task and waits until it ended well.
func (p pveAPI) task(t *testing.T, method, path string, params url.Values) {
	t.Helper()

	var (
		upid any
		ct   string
		body io.Reader
	)

	if method == http.MethodDelete {
		path += "?" + params.Encode()
	} else {
		ct, body = "application/x-www-form-urlencoded", strings.NewReader(params.Encode())
	}

	upid = p.do(t, method, path, ct, body)
	p.wait(t, upid)
}

func (p pveAPI) wait(t *testing.T, upid any) {
	t.Helper()

	id, ok := upid.(string)
	if !ok {
		t.Fatalf("no UPID: %v", upid)
	}

	eventually(t, "task "+id, func() error {
		st, _ := p.do(t, http.MethodGet, "/nodes/pve1/tasks/"+url.PathEscape(id)+"/status", "", nil).(map[string]any)
		if st["status"] != "stopped" {
			return fmt.Errorf("task %v", st)
		}

		if st["exitstatus"] != "OK" {
			t.Fatalf("task %s ended %v", id, st["exitstatus"])
		}

		return nil
	})
}

func (p pveAPI) upload(t *testing.T, name string, data []byte) {
	t.Helper()

	var buf bytes.Buffer

	w := multipart.NewWriter(&buf)
	_ = w.WriteField("content", "iso")

	fw, err := w.CreateFormFile("filename", name)
	if err != nil {
		t.Fatal(err)
	}

	_, _ = fw.Write(data)
	_ = w.Close()

	p.wait(t, p.do(t, http.MethodPost, "/nodes/pve1/storage/local/upload", w.FormDataContentType(), &buf))
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	for {
		err := cond()
		if err == nil {
			return
		}

		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestDeletedVMTakesItsNode deletes a VM and builds it again with the same
// name and MAC: the new VM boots a new machine from its new config ISO, not
// the old disk.
func TestDeletedVMTakesItsNode(t *testing.T) {
	t.Parallel()

	l, err := lab.Start(t.Context(), lab.Options{Bridges: map[string]netip.Prefix{"vmbr0": netip.MustParsePrefix("127.57.0.0/24")}, TaskDuration: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	api := pveAPI{lab: l, client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: l.CA.Pool(), MinVersion: tls.VersionTLS12}}}}

	for _, cluster := range []string{"old", "new"} {
		iso, err := proxmox.CIDataISO("w1", workerConfig(t, cluster, "https://127.57.0.5:6443"))
		if err != nil {
			t.Fatal(err)
		}

		api.upload(t, "cidata-"+cluster+".iso", iso)
	}

	create := func(cluster string) {
		api.task(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{
			"vmid": {"100"}, "name": {"w1"}, "memory": {"2048"}, "scsi0": {"local-lvm:4"},
			"net0": {"virtio=02:00:00:57:00:01,bridge=vmbr0"},
			"ide2": {"local:iso/cidata-" + cluster + ".iso,media=cdrom"},
		})
		api.task(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	}

	node := func(cluster string) talos.NodeState {
		t.Helper()

		var st talos.NodeState

		eventually(t, "a node of cluster "+cluster, func() error {
			nodes := l.Talos.Nodes()
			if len(nodes) != 1 || !nodes[0].Up || nodes[0].Mode != talos.ModeRunning || nodes[0].Cluster != cluster {
				return fmt.Errorf("nodes %+v", nodes)
			}

			st = nodes[0]

			return nil
		})

		return st
	}

	create("old")
	first := node("old")

	api.task(t, http.MethodPost, "/nodes/pve1/qemu/100/status/stop", nil)

	eventually(t, "the node to stop", func() error {
		if st, ok := l.Talos.Node(first.Addr); !ok || st.Up || st.Mode != talos.ModeOff {
			return fmt.Errorf("node %+v, known %v", st, ok)
		}

		return nil
	})

	api.task(t, http.MethodDelete, "/nodes/pve1/qemu/100", nil)

	eventually(t, "the node to go with its VM", func() error {
		if st, ok := l.Talos.Node(first.Addr); ok {
			return fmt.Errorf("node %+v is still known", st)
		}

		return nil
	})

	create("new")

	if second := node("new"); second.Boots != 1 || second.Addr != first.Addr {
		t.Errorf("the rebuilt VM's node is %+v; the first was %+v", second, first)
	}
}
