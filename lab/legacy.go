package lab

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/kdomanski/iso9660"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"gopkg.in/yaml.v3"
)

// The cluster shape ClusterYAML writes, as the Python tool reads it.
const (
	legacyTalos      = "v1.13.8"
	legacyKubernetes = "1.36.1"
	legacyStorage    = "local-lvm"
	legacyISOStorage = "local"
)

// legacyExtraManifests are the two manifests the Python tool adds to every
// control plane's config (lab/FIDELITY.md, "Clusters left by the Python
// tool").
var legacyExtraManifests = []string{
	"https://raw.githubusercontent.com/alex1989hu/kubelet-serving-cert-approver/main/deploy/standalone-install.yaml",
	"https://github.com/kubernetes-sigs/metrics-server/releases/latest/download/components.yaml",
}

// legacyMachine is one VM the Python tool makes.
type legacyMachine struct {
	hostname, role, pool string
	cores, memoryGB      int
	diskGB               int
	node                 string // Proxmox node
	vmid                 int
	addr                 netip.Addr
}

// WriteLegacyCluster writes the cluster directory of c into dir, as
// WriteCluster does, and builds the cluster in the lab the way the Python
// taloscluster leaves it on Proxmox (lab/FIDELITY.md, "Clusters left by the
// Python tool"): its pool, VMs, firewalls and boot ISO made through the
// lab's Proxmox API, its nodes configured with machine configs of the
// Python tool's shape from a secrets bundle minted here, etcd bootstrapped,
// talossecrets.yaml, talosconfig and kubeconfig beside cluster.yaml, and
// the config ISOs detached and deleted. It returns when every node is a
// Ready Kubernetes node.
func (l *Lab) WriteLegacyCluster(ctx context.Context, dir string, c Cluster) error {
	if err := l.WriteCluster(dir, c); err != nil {
		return err
	}
	b := &legacyBuild{l: l, c: c, dir: dir}
	if err := b.run(ctx); err != nil {
		return fmt.Errorf("building the Python taloscluster's cluster %s: %w", c.Name, err)
	}
	return nil
}

type legacyBuild struct {
	l        *Lab
	c        Cluster
	dir      string
	cidr     netip.Prefix
	vip      netip.Addr
	machines []*legacyMachine
	bundle   *secrets.Bundle
	api      *http.Client
	// installImage is the Image Factory installer of the boot ISO's
	// schematic.
	installImage, bootISO string
}

func (b *legacyBuild) run(ctx context.Context) error {
	prefix, ok := b.l.opts.Bridges[b.c.Bridge]
	if !ok {
		return fmt.Errorf("bridge %q has no lab network", b.c.Bridge)
	}
	b.cidr = prefix.Masked()
	b.vip = b.cidr.Addr()
	for range 5 {
		b.vip = b.vip.Next()
	}
	b.api = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.l.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	nodes := b.l.opts.Nodes
	for i := range 3 {
		b.machines = append(b.machines, &legacyMachine{hostname: fmt.Sprintf("%s-controlplane-%02d", b.c.Name, i+1), role: "controlplane", pool: "controlplane",
			cores: 2, memoryGB: 4, diskGB: 20})
	}
	for i := range b.c.Workers {
		b.machines = append(b.machines, &legacyMachine{hostname: fmt.Sprintf("%s-worker-%02d", b.c.Name, i+1), role: "worker", pool: "worker",
			cores: 4, memoryGB: 8, diskGB: 50})
	}
	for i, m := range b.machines {
		m.node = nodes[i%len(nodes)]
	}
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"minting talossecrets.yaml", b.secrets},
		{"creating the pool", b.pool},
		{"fetching the boot ISO", b.bootImage},
		{"creating the VMs", b.vms},
		{"bootstrapping etcd", b.bootstrap},
		{"writing talosconfig and kubeconfig", b.clientFiles},
		{"removing the config ISOs", b.finalize},
		{"waiting for Proxmox to report the VMs", b.reported},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// secrets mints the bundle `talosctl gen secrets` would and writes it as
// talossecrets.yaml (mode 0600).
func (b *legacyBuild) secrets(context.Context) error {
	contract, err := config.ParseContractFromVersion(legacyTalos)
	if err != nil {
		return err
	}
	if b.bundle, err = secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract); err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(4)
	if err := enc.Encode(b.bundle); err != nil {
		return err
	}
	return writeNew(filepath.Join(b.dir, "talossecrets.yaml"), buf.Bytes(), 0o600)
}

// writeNew writes a file through a temporary one in the same directory.
func writeNew(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (b *legacyBuild) poolID() string      { return "taloscluster-" + b.c.Name }
func (b *legacyBuild) poolComment() string { return "managed-by=taloscluster cluster=" + b.c.Name }

func (b *legacyBuild) pool(ctx context.Context) error {
	_, err := b.call(ctx, http.MethodPost, "/pools", url.Values{"poolid": {b.poolID()}, "comment": {b.poolComment()}})
	return err
}

// bootImage registers the schematic with the Image Factory and has each
// Proxmox node download its nocloud ISO as talos-<version>-tailscale.iso.
func (b *legacyBuild) bootImage(ctx context.Context) error {
	doc := "customization:\n  systemExtensions:\n    officialExtensions:\n      - siderolabs/qemu-guest-agent\n      - siderolabs/tailscale\n"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.l.FactoryURL+"/schematics", strings.NewReader(doc))
	if err != nil {
		return err
	}
	resp, err := b.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck
	var got struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.ID == "" {
		return fmt.Errorf("registering the schematic: status %d: %v", resp.StatusCode, err)
	}
	host := strings.TrimPrefix(b.l.FactoryURL, "https://")
	b.installImage = fmt.Sprintf("%s/nocloud-installer/%s:%s", host, got.ID, legacyTalos)
	b.bootISO = "talos-" + legacyTalos + "-tailscale.iso"
	isoURL := fmt.Sprintf("%s/image/%s/%s/nocloud-amd64.iso", b.l.FactoryURL, got.ID, legacyTalos)
	seen := map[string]bool{}
	for _, m := range b.machines {
		if seen[m.node] {
			continue
		}
		seen[m.node] = true
		if _, err := b.task(ctx, m.node, http.MethodPost, "/nodes/"+m.node+"/storage/"+legacyISOStorage+"/download-url",
			url.Values{"url": {isoURL}, "content": {"iso"}, "filename": {b.bootISO}}); err != nil {
			return err
		}
	}
	return nil
}

// cidataName is the Python tool's config ISO name of a machine.
func (b *legacyBuild) cidataName(m *legacyMachine) string {
	sum := sha256.Sum256([]byte(b.c.Name + "/" + m.hostname))
	return "taloscluster-cidata-" + hex.EncodeToString(sum[:])[:12] + ".iso"
}

// legacyMAC is 02: and the first five bytes of SHA-256 of
// "<cluster>/<hostname>/<index>".
func legacyMAC(cluster, hostname string, index int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", cluster, hostname, index))
	parts := []string{"02"}
	for _, x := range sum[:5] {
		parts = append(parts, fmt.Sprintf("%02x", x))
	}
	return strings.Join(parts, ":")
}

func (b *legacyBuild) vms(ctx context.Context) error {
	for _, m := range b.machines {
		cfg, err := b.machineConfig(m)
		if err != nil {
			return fmt.Errorf("the config of %s: %w", m.hostname, err)
		}
		iso, err := cidataISO(m.hostname, cfg)
		if err != nil {
			return err
		}
		if err := b.upload(ctx, m.node, b.cidataName(m), iso); err != nil {
			return err
		}
		id, err := b.call(ctx, http.MethodGet, "/cluster/nextid", nil)
		if err != nil {
			return err
		}
		if _, err := fmt.Sscan(fmt.Sprint(id), &m.vmid); err != nil {
			return fmt.Errorf("reading the next VM id %v: %w", id, err)
		}
		tags := []string{"taloscluster", "cluster_" + b.c.Name, "role_" + m.role, "pool_" + m.pool}
		slices.Sort(tags)
		vmid := fmt.Sprint(m.vmid)
		form := url.Values{
			"vmid": {vmid}, "name": {m.hostname}, "pool": {b.poolID()}, "tags": {strings.Join(tags, ";")},
			"description": {b.poolComment()},
			"cores":       {fmt.Sprint(m.cores)}, "memory": {fmt.Sprint(m.memoryGB * 1024)}, "cpu": {"host"},
			"ostype": {"l26"}, "machine": {"q35"}, "bios": {"ovmf"},
			"efidisk0": {legacyStorage + ":1,efitype=4m,pre-enrolled-keys=0"},
			"scsihw":   {"virtio-scsi-single"}, "scsi0": {fmt.Sprintf("%s:%d", legacyStorage, m.diskGB)},
			"ide2":  {legacyISOStorage + ":iso/" + b.bootISO + ",media=cdrom"},
			"ide3":  {legacyISOStorage + ":iso/" + b.cidataName(m) + ",media=cdrom"},
			"agent": {"enabled=1"}, "onboot": {"1"}, "boot": {"order=scsi0;ide2"},
			"smbios1": {"uuid=" + uuid.NewSHA1(uuid.NameSpaceDNS, []byte("taloscluster:"+b.c.Name+":"+m.hostname)).String()},
			"net0":    {"virtio=" + legacyMAC(b.c.Name, m.hostname, 0) + ",bridge=" + b.c.Bridge + ",firewall=1"},
		}
		base := "/nodes/" + m.node + "/qemu"
		if _, err := b.task(ctx, m.node, http.MethodPost, base, form); err != nil {
			return err
		}
		if err := b.firewall(ctx, m); err != nil {
			return err
		}
		if _, err := b.task(ctx, m.node, http.MethodPost, base+"/"+vmid+"/status/start", nil); err != nil {
			return err
		}
	}
	return nil
}

// firewall sets the Python tool's VM firewall: its options and its rules,
// each with the comment marker "taloscluster: ".
func (b *legacyBuild) firewall(ctx context.Context, m *legacyMachine) error {
	base := fmt.Sprintf("/nodes/%s/qemu/%d/firewall", m.node, m.vmid)
	if _, err := b.call(ctx, http.MethodPut, base+"/options",
		url.Values{"enable": {"1"}, "policy_in": {"DROP"}, "policy_out": {"ACCEPT"}, "dhcp": {"1"}}); err != nil {
		return err
	}
	type rule struct{ proto, dport, source, what string }
	// The cluster.yaml of ClusterYAML: security rules kubernetes (6443)
	// and talos (50000) from the host "loopback", so 80 and 443 are open.
	rules := []rule{
		{"icmp", "", "", "icmp"},
		{"tcp", "80", "", "tcp/80 open"},
		{"tcp", "443", "", "tcp/443 open"},
		{"tcp", "6443", "127.0.0.0/8", "kubernetes from loopback"},
		{"tcp", "50000", "127.0.0.0/8", "talos from loopback"},
		{"tcp", "", b.cidr.String(), "intra-cluster tcp"},
		{"udp", "", b.cidr.String(), "intra-cluster udp"},
	}
	for _, r := range rules {
		form := url.Values{"type": {"in"}, "action": {"ACCEPT"}, "enable": {"1"}, "proto": {r.proto}, "comment": {"taloscluster: " + r.what}}
		if r.dport != "" {
			form.Set("dport", r.dport)
		}
		if r.source != "" {
			form.Set("source", r.source)
		}
		if _, err := b.call(ctx, http.MethodPost, base+"/rules", form); err != nil {
			return err
		}
	}
	return nil
}

// machineConfig is `talosctl gen config` with the Python tool's patches
// stacked (docs/migration.md §1, "Machine configs").
func (b *legacyBuild) machineConfig(m *legacyMachine) ([]byte, error) {
	contract, err := config.ParseContractFromVersion(legacyTalos)
	if err != nil {
		return nil, err
	}
	in, err := generate.NewInput(b.c.Name, "https://"+b.vip.String()+":6443", legacyKubernetes,
		generate.WithSecretsBundle(b.bundle), generate.WithVersionContract(contract),
		generate.WithInstallImage(b.installImage), generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		return nil, err
	}
	typ := machinetype.TypeWorker
	if m.role == "controlplane" {
		typ = machinetype.TypeControlPlane
	}
	base, err := in.Config(typ)
	if err != nil {
		return nil, err
	}
	cidr := b.cidr.String()
	patches := []string{
		fmt.Sprintf(`machine:
  certSANs: [%[1]s]
  nodeLabels:
    ncsa/role: %[2]s
    ncsa/pool: %[3]s
  kubelet:
    extraArgs:
      rotate-server-certificates: "true"
    nodeIP:
      validSubnets: [%[4]s]
  install:
    wipe: true
  time:
    servers: [pool.ntp.org]
`, b.vip, m.role, m.pool, cidr),
		fmt.Sprintf("apiVersion: v1alpha1\nkind: HostnameConfig\nauto: off\nhostname: %s\n", m.hostname),
	}
	if m.role == "controlplane" {
		patches = append(patches, fmt.Sprintf(`cluster:
  allowSchedulingOnControlPlanes: false
  extraManifests: [%s]
  apiServer:
    certSANs: [%s]
  etcd:
    advertisedSubnets: [%s]
`, strings.Join(legacyExtraManifests, ", "), b.vip, cidr),
			fmt.Sprintf("machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n        vip:\n          ip: %s\n", b.vip))
	}
	var loaded []configpatcher.Patch
	for _, p := range patches {
		lp, err := configpatcher.LoadPatch([]byte(p))
		if err != nil {
			return nil, fmt.Errorf("loading a patch: %w", err)
		}
		loaded = append(loaded, lp)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(base), loaded)
	if err != nil {
		return nil, err
	}
	return out.Bytes()
}

// cidataISO is a NoCloud config disk (volume label cidata) with the
// machine config as user-data.
func cidataISO(hostname string, userData []byte) ([]byte, error) {
	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, err
	}
	defer w.Cleanup() //nolint:errcheck
	files := map[string][]byte{"user-data": userData, "meta-data": fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\n", hostname, hostname)}
	for _, name := range []string{"meta-data", "user-data"} {
		if err := w.AddFile(bytes.NewReader(files[name]), name); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := w.WriteTo(&buf, "cidata"); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// bootstrap waits for every node to be up with its config, bootstraps
// etcd on control plane 01, and waits for every control plane to be an
// etcd voter and every Kubernetes node to be Ready.
func (b *legacyBuild) bootstrap(ctx context.Context) error {
	for _, m := range b.machines {
		m := m
		if err := waitFor(ctx, "the node of "+m.hostname, func() error {
			for _, n := range b.l.Talos.Nodes() {
				if n.Hostname == m.hostname && n.Cluster == b.c.Name && n.Up {
					m.addr = n.Addr
					return nil
				}
			}
			return errors.New("not up")
		}); err != nil {
			return err
		}
	}
	c, err := b.client(ctx, b.machines[0].addr)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck
	if err := waitFor(ctx, "the bootstrap", func() error {
		err := c.Bootstrap(ctx, &machine.BootstrapRequest{})
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "already") {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	// talosctl health, the Python tool's last wait, also needs every
	// control plane an etcd voter: a member joins as a learner first.
	cps := 0
	for _, m := range b.machines {
		if m.role == "controlplane" {
			cps++
		}
	}
	if err := waitFor(ctx, "every control plane an etcd voter", func() error {
		voters := 0
		for _, m := range b.l.Talos.EtcdMembers(b.c.Name) {
			if !m.Learner && m.Started {
				voters++
			}
		}
		if voters < cps {
			return fmt.Errorf("%d of %d etcd voters", voters, cps)
		}
		return nil
	}); err != nil {
		return err
	}
	return waitFor(ctx, "every Kubernetes node Ready", func() error {
		k, ok := b.l.Kube(b.c.Name)
		if !ok {
			return errors.New("no Kubernetes API yet")
		}
		ready := 0
		for _, n := range k.Nodes() {
			for _, cond := range n.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					ready++
				}
			}
		}
		if ready < len(b.machines) {
			return fmt.Errorf("%d of %d Ready", ready, len(b.machines))
		}
		return nil
	})
}

// client is the Talos API client of the node at addr, with the admin
// certificate.
func (b *legacyBuild) client(ctx context.Context, addr netip.Addr) (*client.Client, error) {
	in, err := generate.NewInput(b.c.Name, "https://"+b.vip.String()+":6443", legacyKubernetes, generate.WithSecretsBundle(b.bundle))
	if err != nil {
		return nil, err
	}
	tc, err := in.Talosconfig()
	if err != nil {
		return nil, err
	}
	return client.New(ctx, client.WithConfig(tc), client.WithEndpoints(addr.String()))
}

// clientFiles writes talosconfig (`talosctl gen config --output-types
// talosconfig`: endpoint 127.0.0.1, the default of talosctl's --endpoints)
// and kubeconfig (`talosctl kubeconfig` from control plane 01).
func (b *legacyBuild) clientFiles(ctx context.Context) error {
	in, err := generate.NewInput(b.c.Name, "https://"+b.vip.String()+":6443", legacyKubernetes,
		generate.WithSecretsBundle(b.bundle), generate.WithEndpointList([]string{"127.0.0.1"}))
	if err != nil {
		return err
	}
	tc, err := in.Talosconfig()
	if err != nil {
		return err
	}
	data, err := tc.Bytes()
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(b.dir, "talosconfig"), data, 0o600); err != nil {
		return err
	}
	c, err := b.client(ctx, b.machines[0].addr)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck
	var kc []byte
	if err := waitFor(ctx, "the kubeconfig", func() (err error) {
		kc, err = c.Kubeconfig(ctx)
		return err
	}); err != nil {
		return err
	}
	return writeNew(filepath.Join(b.dir, "kubeconfig"), kc, 0o600)
}

// finalize is the Python tool's cleanup once the cluster is healthy:
// detach ide3 and delete the config ISO; the boot ISO stays on ide2.
func (b *legacyBuild) finalize(ctx context.Context) error {
	for _, m := range b.machines {
		if _, err := b.call(ctx, http.MethodPut, fmt.Sprintf("/nodes/%s/qemu/%d/config", m.node, m.vmid), url.Values{"delete": {"ide3"}}); err != nil {
			return err
		}
		volid := legacyISOStorage + ":iso/" + b.cidataName(m)
		if _, err := b.task(ctx, m.node, http.MethodDelete, "/nodes/"+m.node+"/storage/"+legacyISOStorage+"/content/"+url.PathEscape(volid), nil); err != nil {
			return err
		}
	}
	return nil
}

// reported waits until /cluster/resources lists every VM by name and
// running (pvestatd's broadcast), as it has long done on a real Proxmox
// VE by the time the Python tool's health wait ends.
func (b *legacyBuild) reported(ctx context.Context) error {
	return waitFor(ctx, "the VMs in /cluster/resources", func() error {
		data, err := b.call(ctx, http.MethodGet, "/cluster/resources", url.Values{"type": {"vm"}})
		if err != nil {
			return err
		}
		list, _ := data.([]any)
		seen := map[string]bool{}
		for _, r := range list {
			m, _ := r.(map[string]any)
			if name, _ := m["name"].(string); m["status"] == "running" {
				seen[name] = true
			}
		}
		for _, m := range b.machines {
			if !seen[m.hostname] {
				return fmt.Errorf("%s not reported running yet", m.hostname)
			}
		}
		return nil
	})
}

// call makes one Proxmox API request and returns its data.
func (b *legacyBuild) call(ctx context.Context, method, path string, form url.Values) (any, error) {
	var body io.Reader
	target := b.l.PVEURL + "/api2/json" + path
	if method == http.MethodGet || method == http.MethodDelete {
		if len(form) > 0 {
			target += "?" + form.Encode()
		}
	} else if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return b.do(req)
}

func (b *legacyBuild) do(req *http.Request) (any, error) {
	req.Header.Set("Authorization", "PVEAPIToken="+b.l.TokenID+"="+b.l.TokenSecret)
	resp, err := b.api.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close() //nolint:errcheck
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	var out struct {
		Data any `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	return out.Data, nil
}

// task makes a request that starts a task and waits for it to end OK.
func (b *legacyBuild) task(ctx context.Context, node, method, path string, form url.Values) (string, error) {
	data, err := b.call(ctx, method, path, form)
	if err != nil {
		return "", err
	}
	return b.wait(ctx, node, data)
}

func (b *legacyBuild) wait(ctx context.Context, node string, data any) (string, error) {
	upid, _ := data.(string)
	if !strings.HasPrefix(upid, "UPID:") {
		return "", nil
	}
	var exit string
	err := waitFor(ctx, "task "+upid, func() error {
		st, err := b.call(ctx, http.MethodGet, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil)
		if err != nil {
			return err
		}
		m, _ := st.(map[string]any)
		if m["status"] != "stopped" {
			return errors.New("running")
		}
		exit, _ = m["exitstatus"].(string)
		return nil
	})
	if err != nil {
		return "", err
	}
	if exit != "OK" {
		return "", fmt.Errorf("task %s ended %q", upid, exit)
	}
	return upid, nil
}

// upload stores an ISO in the node's ISO storage.
func (b *legacyBuild) upload(ctx context.Context, node, name string, data []byte) error {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("content", "iso")
	fw, err := mw.CreateFormFile("filename", name)
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.l.PVEURL+"/api2/json/nodes/"+node+"/storage/"+legacyISOStorage+"/upload", &buf)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	upid, err := b.do(req)
	if err != nil {
		return err
	}
	_, err = b.wait(ctx, node, upid)
	return err
}

// waitFor retries fn every 50 ms until it succeeds or ctx ends (at most
// two minutes).
func waitFor(ctx context.Context, what string, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
