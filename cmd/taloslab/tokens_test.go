package main

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// TestLabEnvTokens: lab.env exports both Proxmox tokens. The default one
// holds every privilege; the restricted one reads (the VMs of the legacy
// cluster are listed) but may not delete a VM, as GET /access/permissions
// shows and a DELETE's 403 confirms.
func TestLabEnvTokens(t *testing.T) {
	t.Parallel()
	l := startUp(t, "--subnet", "127.249.0.0/24,127.250.0.0/24,127.255.0.0/24")
	call := func(method, path, id, secret string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, l.env["PROXMOX_URL"]+"/api2/json"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "PVEAPIToken="+id+"="+secret)
		resp, err := l.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %q", method, path, raw)
		}
		return resp.StatusCode, out
	}
	full := func(method, path string) (int, map[string]any) {
		return call(method, path, l.env["PROXMOX_TOKEN_ID"], l.env["PROXMOX_TOKEN_SECRET"])
	}
	restricted := func(method, path string) (int, map[string]any) {
		return call(method, path, l.env["PROXMOX_RESTRICTED_TOKEN_ID"], l.env["PROXMOX_RESTRICTED_TOKEN_SECRET"])
	}
	if l.env["PROXMOX_RESTRICTED_TOKEN_ID"] == "" || l.env["PROXMOX_RESTRICTED_TOKEN_SECRET"] == "" ||
		l.env["PROXMOX_RESTRICTED_TOKEN_ID"] == l.env["PROXMOX_TOKEN_ID"] {
		t.Fatalf("lab.env does not export a restricted token: %v", l.env)
	}

	_, vms := restricted(http.MethodGet, "/cluster/resources?type=vm")
	list, _ := vms["data"].([]any)
	if len(list) == 0 {
		t.Fatalf("the restricted token lists no VM: %v", vms)
	}
	vm := list[0].(map[string]any)
	path := "/vms/" + formatID(vm["vmid"])
	for _, tc := range []struct {
		name    string
		call    func(string, string) (int, map[string]any)
		allowed bool
	}{{"default", full, true}, {"restricted", restricted, false}} {
		_, perms := tc.call(http.MethodGet, "/access/permissions?path="+path)
		privs, _ := perms["data"].(map[string]any)[path].(map[string]any)
		if _, ok := privs["VM.Allocate"]; ok != tc.allowed || privs["VM.Audit"] == nil || privs["VM.PowerMgmt"] == nil {
			t.Errorf("%s token's privileges on %s: %v", tc.name, path, privs)
		}
	}
	code, body := restricted(http.MethodDelete, "/nodes/"+vm["node"].(string)+"/qemu/"+formatID(vm["vmid"]))
	if code != http.StatusForbidden || body["message"] != "Permission check failed ("+path+", VM.Allocate)\n" {
		t.Errorf("the restricted token deleting a VM: %d %v", code, body)
	}
}

func formatID(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
