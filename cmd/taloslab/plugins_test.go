package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// testRancher: up serves the lab's Rancher v3 API with the token lab.env
// names (refusing a request without it) and its LDAP users found by a
// principal search, and the chart repository, each with its faults
// through the control API. It runs in the lab of
// TestControlAPIGitHubFaults.
func testRancher(t *testing.T, l *runningLab) {
	if l.env["TALOSLAB_RANCHER_URL"] == "" || l.env["TALOSLAB_RANCHER_TOKEN"] == "" || l.env["SSL_CERT_FILE"] != l.env["TALOSLAB_CA"] {
		t.Fatalf("lab.env: rancher %q token set %v, SSL_CERT_FILE %q", l.env["TALOSLAB_RANCHER_URL"], l.env["TALOSLAB_RANCHER_TOKEN"] != "", l.env["SSL_CERT_FILE"])
	}
	call := func(method, path, body, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, l.env["TALOSLAB_RANCHER_URL"]+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := l.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	token := l.env["TALOSLAB_RANCHER_TOKEN"]
	if code, _ := call(http.MethodGet, "/v3/clusters", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v3/clusters without the token: %d, want 401", code)
	}
	if code, body := call(http.MethodGet, "/v3/clusters", "", token); code != http.StatusOK || !strings.Contains(body, `"collection"`) {
		t.Errorf("GET /v3/clusters: %d %s", code, body)
	}
	if code, body := call(http.MethodPost, "/v3/principals?action=search", `{"name":"alice"}`, token); code != http.StatusOK || !strings.Contains(body, "uid=alice") {
		t.Errorf("searching alice: %d %s", code, body)
	}
	if code, body := l.control(t, http.MethodPost, "/lab/v1/faults", `{"kind":"rancher-fail","op":"GET /v3/clusters","status":503}`); code != http.StatusOK {
		t.Fatalf("injecting a Rancher fault: %d %s", code, body)
	}
	if code, _ := call(http.MethodGet, "/v3/clusters", "", token); code != http.StatusServiceUnavailable {
		t.Errorf("GET /v3/clusters after the fault: %d, want 503", code)
	}
	if code, _ := call(http.MethodGet, "/v3/clusters", "", token); code != http.StatusOK {
		t.Errorf("GET /v3/clusters once the fault was used: %d, want 200", code)
	}
	if code, body := l.control(t, http.MethodPost, "/lab/v1/faults", `{"kind":"rancher-fail","op":"/v3/clusters"}`); code != http.StatusBadRequest || !strings.Contains(string(body), "METHOD /v3/path") {
		t.Errorf("a Rancher fault without a method: %d %s", code, body)
	}

	// The chart repository: its index, and a fault on it.
	get := func(path string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, l.env["TALOSLAB_CHARTS_URL"]+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := l.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/index.yaml"); code != http.StatusOK {
		t.Errorf("GET /index.yaml of the chart repository: %d", code)
	}
	if code, body := l.control(t, http.MethodPost, "/lab/v1/faults", `{"kind":"charts-fail","op":"/index.yaml"}`); code != http.StatusOK {
		t.Fatalf("injecting a chart repository fault: %d %s", code, body)
	}
	if code := get("/index.yaml"); code != http.StatusInternalServerError {
		t.Errorf("GET /index.yaml after the fault: %d, want 500", code)
	}
	l.control(t, http.MethodPost, "/lab/v1/faults", `{"kind":"charts-ok","op":"/index.yaml"}`)
	if code := get("/index.yaml"); code != http.StatusOK {
		t.Errorf("GET /index.yaml once the fault was removed: %d", code)
	}
}
