package pve_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/lab/pve"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	v, err := l.client.GetVersion(t.Context())
	if err != nil {
		t.Fatalf("reading the version: %v", err)
	}
	if v.Major != 9 {
		t.Errorf("version = %s, want 9.x", v)
	}
	nodes, err := l.client.GetNodeList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(nodes["data"].([]any)); n != 3 {
		t.Errorf("%d nodes, want 3", n)
	}
	if err := l.client.RefreshPermissions(t.Context()); err != nil {
		t.Errorf("reading permissions: %v", err)
	}
	if err := l.client.CheckPermissions(t.Context(), []proxmox.Permission{{Category: proxmox.PermissionCategory_Root, Privileges: proxmox.Privileges{VMAllocate: true, SDNAllocate: true}}}); err != nil {
		t.Errorf("the lab token lacks a privilege: %v", err)
	}
}

// TestAuth refuses requests without the exact token and never echoes the
// secret.
func TestAuth(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value-not-to-leak"
	const wrong = "wrong-secret-not-to-leak"
	l := newLab(t, pve.Options{TokenID: "automation@pve!taloscluster", TokenSecret: secret})

	for _, tc := range []struct{ name, header string }{
		{"no header", ""},
		{"ticket cookie", "PVEAuthCookie=abc"},
		{"wrong secret", "PVEAPIToken=automation@pve!taloscluster=" + wrong},
		{"wrong token", "PVEAPIToken=root@pam!other=" + secret},
		{"no secret", "PVEAPIToken=automation@pve!taloscluster"},
		{"secret with a colon", "PVEAPIToken=automation@pve!taloscluster:" + secret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := l.callAuth(t, http.MethodGet, "/version", nil, tc.header)
			if code != http.StatusUnauthorized {
				t.Errorf("status %d, want 401", code)
			}
			if b, _ := json.Marshal(body); bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(wrong)) {
				t.Errorf("the answer echoes a secret: %s", b)
			}
		})
	}

	_, err := l.newClient(t, "automation@pve!taloscluster", wrong).GetVersion(t.Context())
	var apiErr *proxmox.ApiError
	if !errors.As(err, &apiErr) || apiErr.Code != "401" {
		t.Errorf("library with a wrong secret = %v, want a 401", err)
	}
	if _, err := l.newClient(t, "automation@pve!taloscluster", secret).GetVersion(t.Context()); err != nil {
		t.Errorf("library with the right secret: %v", err)
	}
	for _, op := range l.srv.Log() {
		line := op.Method + op.Path + op.Query + op.Message
		if strings.Contains(line, secret) || strings.Contains(line, wrong) {
			t.Errorf("the log holds a secret: %+v", op)
		}
	}
	if log := l.srv.Log(); len(log) == 0 || log[0].Name != "auth" || log[0].Status != 401 {
		t.Errorf("first log entry = %+v, want a refused auth", log)
	}
}

func TestNotImplemented(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/nodes/pve1/lxc"},
		{http.MethodPost, "/nodes/pve1/qemu/100/clone"},
		{http.MethodGet, "/cluster/sdn/zones"},
		{http.MethodPost, "/version"},
	} {
		code, body := l.call(t, tc.method, tc.path, nil)
		want := "Method '" + tc.method + " " + tc.path + "' not implemented\n"
		if code != http.StatusNotImplemented || body["message"] != want {
			t.Errorf("%s %s = %d %v, want 501 %q", tc.method, tc.path, code, body, want)
		}
	}
	_, err := l.client.GetItemList(t.Context(), "/nodes/pve1/lxc")
	var apiErr *proxmox.ApiError
	if !errors.As(err, &apiErr) || apiErr.Code != "501" {
		t.Errorf("library error = %v, want a 501 ApiError", err)
	}
	var names []string
	for _, op := range l.srv.Log() {
		names = append(names, op.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "sdn") {
		t.Errorf("log names = %v, want an sdn entry", names)
	}
}

var upidRE = regexp.MustCompile(`^UPID:pve1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmstart:100:root@pam!taloslab:$`)

// TestTaskLifecycle checks the UPID format and the running/stopped states
// with a real task duration.
func TestTaskLifecycle(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{TaskDuration: 300 * time.Millisecond})
	code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"100"}, "name": {"a"}, "cores": {"1"}, "memory": {"512"}})
	if code != http.StatusOK {
		t.Fatalf("create = %d %v", code, body)
	}
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "OK" {
		t.Fatalf("create task = %q", st)
	}
	code, body = l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if code != http.StatusOK {
		t.Fatalf("start = %d %v", code, body)
	}
	upid := body["data"].(string)
	if !upidRE.MatchString(upid) {
		t.Errorf("UPID %q does not match %s", upid, upidRE)
	}
	_, body = l.call(t, http.MethodGet, "/nodes/pve1/tasks/"+upid+"/status", nil)
	data := body["data"].(map[string]any)
	if data["status"] != "running" || data["exitstatus"] != nil || data["type"] != "qmstart" || data["id"] != "100" {
		t.Errorf("status right after the start = %v, want running", data)
	}
	if st := l.waitTask(t, "pve1", upid); st != "OK" {
		t.Errorf("exit status = %q, want OK", st)
	}
	_, body = l.call(t, http.MethodGet, "/nodes/pve1/tasks/"+upid+"/log", nil)
	lines := body["data"].([]any)
	if last := lines[len(lines)-1].(map[string]any); last["t"] != "TASK OK" {
		t.Errorf("last log line = %v", last)
	}
	// A second start fails in the worker.
	_, body = l.call(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "VM 100 already running" {
		t.Errorf("second start = %q", st)
	}
	code, body = l.call(t, http.MethodGet, "/nodes/pve1/tasks/UPID:pve1:00000001:00000001:00000001:qmstart:1:root@pam:/status", nil)
	if code != http.StatusInternalServerError || body["message"] != "no such task\n" {
		t.Errorf("unknown task = %d %v", code, body)
	}
}

// TestTaskWarnings shows how the library sees "WARNINGS: N": no error for a
// start, an error for an upload, and the change made either way.
func TestTaskWarnings(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	ctx := t.Context()
	c := l.client
	node := proxmox.NodeName("pve1")
	vmr, err := (proxmox.ConfigQemu{
		Node:   &node,
		Name:   ptr(proxmox.GuestName("w")),
		CPU:    &proxmox.QemuCPU{Cores: ptr(proxmox.QemuCpuCores(1))},
		Memory: &proxmox.QemuMemory{CapacityMiB: ptr(proxmox.QemuMemoryCapacity(512))},
	}).Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}

	l.srv.TaskWarnings("qemu.start", 1, 2)
	exit, err := c.StartVm(ctx, vmr)
	if err != nil || exit != "WARNINGS: 2" {
		t.Errorf("StartVm = %q, %v; want WARNINGS: 2 and no error", exit, err)
	}
	if !l.srv.VMs()[0].Running {
		t.Error("the VM did not start")
	}

	l.srv.TaskWarnings("storage.upload", 1, 2)
	err = c.Upload(ctx, "pve1", "local", "iso", "warn.iso", bytes.NewReader([]byte("iso")))
	if err == nil || !strings.Contains(err.Error(), "WARNINGS: 2") {
		t.Errorf("Upload = %v; want an error naming WARNINGS: 2", err)
	}
	files, err := proxmox.ListFiles(ctx, c, "pve1", "local", proxmox.ContentType_Iso)
	if err != nil || !proxmox.CheckFileExistence("warn.iso", files) {
		t.Errorf("the upload with warnings is missing: %v %v", files, err)
	}

	l.srv.TaskFail("storage.upload", 1, "emulated: no space left on device")
	err = c.Upload(ctx, "pve1", "local", "iso", "fail.iso", bytes.NewReader([]byte("iso")))
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("Upload with a failing task = %v", err)
	}
	files, _ = proxmox.ListFiles(ctx, c, "pve1", "local", proxmox.ContentType_Iso)
	if proxmox.CheckFileExistence("fail.iso", files) {
		t.Error("a failed upload task stored its file")
	}
}

// TestHangAndLatency checks the hang and latency faults with a raw client
// (the library retries transport errors with sleeps).
func TestHangAndLatency(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	get := func(ctx context.Context) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.ts.URL+"/api2/json/version", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "PVEAPIToken="+pve.DefaultTokenID+"="+pve.DefaultTokenSecret)
		resp, err := l.ts.Client().Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}

	l.srv.Hang("version.get", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if code, err := get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hung request = %d, %v, want a deadline error; log %+v", code, err, l.srv.Log())
	}
	if code, err := get(t.Context()); err != nil || code != 200 {
		t.Errorf("request after the hang = %d, %v", code, err)
	}

	l.srv.SetLatency("version.get", 150*time.Millisecond)
	start := time.Now()
	if code, err := get(t.Context()); err != nil || code != 200 {
		t.Errorf("slow request = %d, %v", code, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("slow request took %v", d)
	}
	l.srv.SetLatency("version.get", 0)

	deadline := time.Now().Add(2 * time.Second)
	for {
		var hung bool
		for _, op := range l.srv.Log() {
			if op.Name == "version.get" && op.Status == 0 {
				hung = true
			}
		}
		if hung {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the log has no unanswered version.get")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStorage covers storage listing, content and download-url.
func TestStorage(t *testing.T) {
	t.Parallel()
	image := bytes.Repeat([]byte("image"), 1000)
	sum := sha256.Sum256(image)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/talos.iso" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(image)
	}))
	t.Cleanup(files.Close)
	l := newLab(t, pve.Options{})
	ctx := t.Context()
	c := l.client

	cfg, err := proxmox.NewConfigStorageFromApi(ctx, "local", c)
	if err != nil {
		t.Fatalf("reading storage local: %v", err)
	}
	if cfg.Type != "directory" || cfg.Content == nil || cfg.Content.Iso == nil || !*cfg.Content.Iso || cfg.Directory.Shared {
		t.Errorf("local = %+v", cfg)
	}
	cfg, err = proxmox.NewConfigStorageFromApi(ctx, "local-lvm", c)
	if err != nil || cfg.Type != "lvm-thin" || !*cfg.Content.DiskImage {
		t.Errorf("local-lvm = %+v, %v", cfg, err)
	}

	code, body := l.call(t, http.MethodGet, "/nodes/pve2/storage", url.Values{"content": {"iso"}})
	if code != 200 {
		t.Fatal(code, body)
	}
	var names []string
	for _, s := range body["data"].([]any) {
		st := s.(map[string]any)
		names = append(names, st["storage"].(string))
		if st["storage"] == "shared" && st["shared"] != float64(1) {
			t.Errorf("shared storage reported as %v", st)
		}
	}
	if strings.Join(names, ",") != "local,shared" {
		t.Errorf("iso storages on pve2 = %v, want local,shared", names)
	}

	iso := proxmox.ConfigContent_Iso{
		Node: "pve2", Storage: "local", Filename: "talos.iso", DownloadUrl: files.URL + "/talos.iso",
		Checksum: hex.EncodeToString(sum[:]), ChecksumAlgorithm: "sha256",
	}
	if err := proxmox.DownloadIsoFromUrl(ctx, c, iso); err != nil {
		t.Fatalf("download-url: %v", err)
	}
	list, err := proxmox.ListFiles(ctx, c, "pve2", "local", proxmox.ContentType_Iso)
	if err != nil || !proxmox.CheckFileExistence("talos.iso", list) || (*list)[0].Size != uint(len(image)) {
		t.Errorf("files on pve2 = %+v, %v", list, err)
	}
	// local is node-local: pve1 does not see the file.
	list, _ = proxmox.ListFiles(ctx, c, "pve1", "local", proxmox.ContentType_Iso)
	if proxmox.CheckFileExistence("talos.iso", list) {
		t.Error("a node-local file shows on another node")
	}
	// download_file_from_url keeps an existing file whose checksum
	// matches, and refuses to override one otherwise.
	if err := proxmox.DownloadIsoFromUrl(ctx, c, iso); err != nil {
		t.Errorf("second download with the file's checksum = %v, want no error", err)
	}
	again := iso
	again.Checksum, again.ChecksumAlgorithm = "", ""
	if err := proxmox.DownloadIsoFromUrl(ctx, c, again); err == nil || !strings.Contains(err.Error(), "refusing to override existing file '/var/lib/vz/template/iso/talos.iso'") {
		t.Errorf("second download without a checksum = %v", err)
	}
	again.Checksum, again.ChecksumAlgorithm = strings.Repeat("0", 64), "sha256"
	if err := proxmox.DownloadIsoFromUrl(ctx, c, again); err == nil || !strings.Contains(err.Error(), "checksum mismatch: got '"+hex.EncodeToString(sum[:])+"' != expect '"+strings.Repeat("0", 64)+"', aborting") {
		t.Errorf("second download with another checksum = %v", err)
	}
	bad := iso
	bad.Filename, bad.Checksum = "bad.iso", strings.Repeat("0", 64)
	if err := proxmox.DownloadIsoFromUrl(ctx, c, bad); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("download with a wrong checksum = %v", err)
	}
	missing := iso
	missing.Filename, missing.DownloadUrl, missing.Checksum, missing.ChecksumAlgorithm = "missing.iso", files.URL+"/missing.iso", "", ""
	if err := proxmox.DownloadIsoFromUrl(ctx, c, missing); err == nil || !strings.Contains(err.Error(), "download failed: command 'wget") || !strings.Contains(err.Error(), "failed: exit code 8") {
		t.Errorf("download of a missing file = %v", err)
	}
	list, _ = proxmox.ListFiles(ctx, c, "pve2", "local", proxmox.ContentType_Iso)
	if proxmox.CheckFileExistence("bad.iso", list) || proxmox.CheckFileExistence("missing.iso", list) {
		t.Errorf("failed downloads left files: %+v", list)
	}

	if err := proxmox.DeleteFile(ctx, c, "pve2", proxmox.Content_File{Storage: "local", ContentType: proxmox.ContentType_Iso, FilePath: "talos.iso"}); err != nil {
		t.Fatalf("deleting the file: %v", err)
	}
	list, _ = proxmox.ListFiles(ctx, c, "pve2", "local", proxmox.ContentType_Iso)
	if len(*list) != 0 {
		t.Errorf("files after delete = %+v", list)
	}

	// Upload checks like Proxmox VE.
	for _, tc := range []struct{ name, storage, content, file, want string }{
		{"snippets", "local", "snippets", "user-data.yaml", "not allowed"},
		{"wrong extension", "local", "iso", "talos.raw", "wrong file extension"},
		{"not file based", "local-lvm", "iso", "talos.iso", "can't upload to storage type 'lvmthin'"},
		{"no vztmpl content", "shared", "vztmpl", "t.tar.gz", "storage 'shared' does not support 'vztmpl' content"},
		{"missing storage", "nope", "iso", "talos.iso", "does not exist"},
	} {
		err := c.Upload(ctx, "pve1", tc.storage, tc.content, tc.file, bytes.NewReader([]byte("x")))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: upload = %v, want %q", tc.name, err, tc.want)
		}
	}
	// A shared storage's file is seen from every node.
	if err := c.Upload(ctx, "pve1", "shared", "iso", "shared.iso", bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	list, _ = proxmox.ListFiles(ctx, c, "pve3", "shared", proxmox.ContentType_Iso)
	if !proxmox.CheckFileExistence("shared.iso", list) {
		t.Error("a shared file is missing on another node")
	}
}

func TestNodeOffline(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{Nodes: []string{"a1", "a2"}})
	l.srv.SetNodeOnline("a2", false)
	nodes, err := l.client.GetNodeList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]any{}
	for _, n := range nodes["data"].([]any) {
		status[n.(map[string]any)["node"].(string)] = n.(map[string]any)["status"]
	}
	if status["a1"] != "online" || status["a2"] != "offline" {
		t.Errorf("node status = %v", status)
	}
	if code, _ := l.call(t, http.MethodGet, "/nodes/a2/qemu", nil); code != 595 {
		t.Errorf("request to an offline node = %d, want 595", code)
	}
	if code, _ := l.call(t, http.MethodGet, "/nodes/a9/qemu", nil); code != 500 {
		t.Errorf("request to an unknown node = %d, want 500", code)
	}
}

// TestResources checks /cluster/resources types and filters.
func TestResources(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{})
	ctx := t.Context()
	if err := l.client.New().Pool.Create(ctx, proxmox.ConfigPool{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	all, err := l.client.GetResourceList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, r := range all {
		types[r.(map[string]any)["type"].(string)]++
	}
	if types["node"] != 3 || types["storage"] != 9 || types["pool"] != 1 {
		t.Errorf("resource types = %v", types)
	}
	storages, err := l.client.GetResourceList(ctx, "storage")
	if err != nil || len(storages) != 9 {
		t.Errorf("storage resources = %d, %v", len(storages), err)
	}
	if code, _ := l.call(t, http.MethodGet, "/cluster/resources", url.Values{"type": {"bogus"}}); code != 400 {
		t.Errorf("bogus type = %d, want 400", code)
	}
}
