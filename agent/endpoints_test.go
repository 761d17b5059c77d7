package agent_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/agent"
)

func TestEndpointPolicy(t *testing.T) {
	t.Parallel()
	const pve = "https://pve.example:8006/api2/json"
	eps := func(url string) agent.Endpoints {
		return agent.Endpoints{URLs: []agent.Endpoint{{Key: "proxmox.url", URL: url}}}
	}
	base := eps(pve)
	for _, tc := range []struct {
		name    string
		pr      string
		allowed []string
		want    string // "" for allowed, else part of the refusal
	}{
		{"unchanged", pve, nil, ""},
		{"default port spelled out", "https://pve.example:443/api2/json", []string{"https://pve.example"}, ""},
		{"host case", "https://PVE.example:8006/api2/json", nil, ""},
		{"trailing slash", pve + "/", nil, ""},
		{"below the base path", pve + "/nodes", nil, ""},
		{"allowed origin", "https://pve2.example:8006/api2/json", []string{"https://pve2.example:8006"}, ""},
		{"allowed path prefix", "https://pve2.example:8006/api2/json", []string{"https://pve2.example:8006/api2"}, ""},
		{"user info hides the host", "https://pve.example:8006@evil.example:8006/api2/json", []string{"https://pve.example:8006"}, "user info"},
		{"user info even to an allowed host", "https://user@pve.example:8006/api2/json", nil, "user info"},
		{"plain http", "http://pve.example:8006/api2/json", []string{"https://pve.example:8006"}, "must use https"},
		{"prefix of a longer port", "https://pve2.example:8006/api2/json", []string{"https://pve2.example:80"}, "is neither"},
		{"prefix of a longer host", "https://pve.example.evil.example:8006/api2/json", []string{"https://pve.example"}, "is neither"},
		{"default port is not another port", "https://pve2.example:8443/api2/json", []string{"https://pve2.example"}, "is neither"},
		{"path not on a boundary", "https://pve2.example:8006/api2json", []string{"https://pve2.example:8006/api2"}, "is neither"},
		{"dot segments", "https://pve.example:8006/api2/json/../../evil", nil, "dot segments"},
		{"escaped path", "https://pve.example:8006/api2/json/%2e%2e/x", nil, "escaped"},
		{"query", "https://pve.example:8006/api2/json?x=/y", nil, "query"},
		{"fragment", "https://pve.example:8006#@evil.example/api2/json", nil, "fragment"},
		{"another host", "https://evil.example:8006/api2/json", nil, "is neither the default branch's endpoint nor in allowed_endpoints"},
		{"not a URL", "pve.example:8006", nil, "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := agent.EndpointRefusal(eps(tc.pr), &base, tc.allowed, false)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("refusal %q, want %q", got, tc.want)
			}
			if tc.want != "" && !strings.HasPrefix(got, "proxmox.url ") {
				t.Fatalf("refusal %q does not name the key", got)
			}
		})
	}
}

func TestEndpointPolicyComparesTheSameKey(t *testing.T) {
	t.Parallel()
	base := agent.Endpoints{URLs: []agent.Endpoint{
		{Key: "proxmox.url", URL: "https://pve.example:8006/api2/json"},
		{Key: "proxmox.image_factory", URL: "https://factory.example"},
	}}
	pr := agent.Endpoints{URLs: []agent.Endpoint{
		{Key: "proxmox.url", URL: "https://factory.example/api2/json"},
		{Key: "proxmox.image_factory", URL: "https://factory.example"},
	}}
	if got := agent.EndpointRefusal(pr, &base, nil, false); !strings.Contains(got, "proxmox.url") {
		t.Fatalf("the token may go to the factory's host: %q", got)
	}
	// A new cluster (not on the default branch) needs an allowed endpoint.
	if got := agent.EndpointRefusal(base, nil, nil, false); !strings.Contains(got, "is neither") {
		t.Fatalf("a new cluster's endpoint: %q", got)
	}
	if got := agent.EndpointRefusal(base, nil, []string{"https://pve.example:8006", "https://factory.example"}, false); got != "" {
		t.Fatalf("a new cluster with allowed endpoints: %q", got)
	}
}

func TestEndpointPolicyTLS(t *testing.T) {
	t.Parallel()
	trust := func(verify bool, file, digest string) agent.Endpoints {
		return agent.Endpoints{TLS: []agent.TLSTrust{{Key: "proxmox.tls_verify", Verify: verify, CAFile: file, CADigest: digest}}}
	}
	for _, tc := range []struct {
		name     string
		base     *agent.Endpoints
		pr       agent.Endpoints
		allowTLS bool
		want     string
	}{
		{"unchanged bundle", ptr(trust(true, "ca.pem", "sha256:a")), trust(true, "ca.pem", "sha256:a"), false, ""},
		{"verification turned off", ptr(trust(true, "ca.pem", "sha256:a")), trust(false, "", ""), false, "turns off TLS verification"},
		{"off with system roots too", ptr(trust(true, "", "")), trust(false, "", ""), false, "turns off TLS verification"},
		{"bundle content changed", ptr(trust(true, "ca.pem", "sha256:a")), trust(true, "ca.pem", "sha256:b"), false, "CA bundle differs"},
		{"bundle path changed", ptr(trust(true, "ca.pem", "sha256:a")), trust(true, "other.pem", "sha256:a"), false, "CA bundle differs"},
		{"bundle added", ptr(trust(true, "", "")), trust(true, "ca.pem", "sha256:a"), false, "CA bundle differs"},
		{"bundle dropped for the system roots", ptr(trust(true, "ca.pem", "sha256:a")), trust(true, "", ""), false, "CA bundle differs"},
		{"new cluster with a bundle", nil, trust(true, "ca.pem", "sha256:a"), false, "CA bundle differs"},
		{"new cluster without verification", nil, trust(false, "", ""), false, "turns off"},
		{"already off", ptr(trust(false, "", "")), trust(false, "", ""), false, ""},
		{"turned on", ptr(trust(false, "", "")), trust(true, "ca.pem", "sha256:a"), false, ""},
		{"allowed", ptr(trust(true, "ca.pem", "sha256:a")), trust(false, "", ""), true, ""},
		// A path of the agent's host is never read, whoever allows what.
		{"host device", ptr(trust(true, "/dev/zero", "")), trust(true, "/dev/zero", ""), true, "proxmox.tls_verify: /dev/zero is an absolute path"},
		{"host file", ptr(trust(true, "/etc/ssl/ca.pem", "")), trust(true, "/etc/ssl/ca.pem", ""), false, "proxmox.tls_verify: /etc/ssl/ca.pem is an absolute path"},
		{"leaves the directory", nil, trust(true, "../x.pem", "sha256:a"), true, "proxmox.tls_verify: ../x.pem leaves the cluster's directory"},
		{"leaves and comes back", nil, trust(true, "sub/../../demo/ca.pem", "sha256:a"), true, "leaves the cluster's directory"},
		{"inside after cleaning", nil, trust(true, "./certs/../ca.pem", "sha256:a"), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := agent.EndpointRefusal(tc.pr, tc.base, nil, tc.allowTLS)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("refusal %q, want %q", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func FuzzEndpointPolicyNeverAllowsAnotherHost(f *testing.F) {
	for _, s := range []string{"https://pve.example:8006/api2/json", "https://pve.example:8006@evil:1/", "https://pve.example:8006#@evil",
		"https://pve.example:8006\\@evil", "https://pve.example%2f@evil", "https://[::1]:8006/", "https://pve.example:08006"} {
		f.Add(s)
	}
	allowed := []string{"https://pve.example:8006"}
	f.Fuzz(func(t *testing.T, s string) {
		pr := agent.Endpoints{URLs: []agent.Endpoint{{Key: "proxmox.url", URL: s}}}
		if agent.EndpointRefusal(pr, nil, allowed, false) != "" {
			return
		}
		// Allowed: Go's HTTP client must send it to pve.example:8006 over TLS.
		u, err := parseLikeTheClient(s)
		if err != nil || u.Scheme != "https" || strings.ToLower(u.Hostname()) != "pve.example" || u.Port() != "8006" || u.User != nil {
			t.Fatalf("%q was allowed but goes to %v (%v)", s, u, err)
		}
	})
}

func parseLikeTheClient(s string) (*url.URL, error) {
	req, err := http.NewRequest(http.MethodGet, s+"/nodes", nil)
	if err != nil {
		return nil, err
	}
	return req.URL, nil
}
