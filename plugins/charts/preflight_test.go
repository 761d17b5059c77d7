package charts_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/plugins/charts"
)

// TestPreflight: a repository or manifest URL the plugin would never
// fetch stops converge before anything changes, naming its key; usable
// ones pass without a request.
func TestPreflight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, section, want string }{
		{"known entries and an https repo", "charts:\n  metallb: {version: 0.15.2}\n  app: {repo: 'https://charts.example.org/stable'}\n", ""},
		{"a file URL", "charts:\n  app: {repo: 'file:///etc/shadow'}\n", "charts.app.repo"},
		{"credentials in the URL", "charts:\n  app: {repo: 'https://user:pass@charts.example.org'}\n", "charts.app.repo"},
		{"a manifest without a host", "charts:\n  crds: {manifest: 'https:///crds.yaml'}\n", "charts.crds.manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := charts.New(charts.Options{}).Preflight(load(t, "proxmox-bridge", tc.section, ""))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "pass"):
				t.Fatalf("the error quotes the URL's password: %v", err)
			}
		})
	}
	refuse := charts.New(charts.Options{AllowURL: func(string) error { return errors.New("not an allowed endpoint") }})
	if err := refuse.Preflight(load(t, "proxmox-bridge", "charts:\n  app: {repo: 'https://charts.example.org'}\n", "")); err == nil {
		t.Error("the allow hook's refusal passed")
	}
}
