package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/agent"
)

const minimalConfig = "repository:\n  url: https://git.example/org/clusters.git\n" +
	"github:\n  repo: org/clusters\n  token_file: /run/token\n" +
	"secrets_dir: /run/secrets\ndata_dir: /var/lib/taloscluster\n"

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigAcceptsAMinimalConfig(t *testing.T) {
	t.Parallel()
	c, err := agent.LoadConfig(writeConfig(t, minimalConfig+
		"allowed_endpoints: [\"https://pve.example:8006\", \"https://factory.example/talos/\"]\nallow_tls_changes: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Repository.PollInterval.D() != agent.DefaultPollInterval || !c.AllowTLSChanges {
		t.Fatalf("config: %+v", c)
	}
}

func TestLoadConfigRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"too frequent", strings.Replace(minimalConfig, "  url: https://git", "  poll_interval: 1ns\n  url: https://git", 1) +
			"drift_interval: 1s\n",
			[]string{"repository.poll_interval 1ns is below the minimum of 2s", "drift_interval 1s is below the minimum of 1m0s"}},
		{"just below", strings.Replace(minimalConfig, "  url: https://git", "  poll_interval: 1.9s\n  url: https://git", 1),
			[]string{"repository.poll_interval 1.9s is below the minimum of 2s"}},
		{"zero spacing", strings.Replace(minimalConfig, "  repo: org", "  mutation_spacing: 0s\n  repo: org", 1), []string{"positive duration"}},
		{"bad endpoints", minimalConfig + "allowed_endpoints:\n  - https://pve.example:8006\n  - http://pve.example:8006\n" +
			"  - https://pve.example:8006@evil.example\n  - https://pve.example:99999\n  - https://pve.example/?x=1\n  - pve.example\n",
			[]string{"allowed_endpoints[1]", "must use https, not http", "allowed_endpoints[2]", "user info", "evil.example",
				"allowed_endpoints[3]", "invalid port", "allowed_endpoints[4]", "query", "allowed_endpoints[5]"}},
		{"too big", minimalConfig + strings.Repeat("# padding to make the file larger than a mebibyte\n", 25000),
			[]string{"larger than 1024 KiB (1 MiB)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := agent.LoadConfig(writeConfig(t, tc.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "allowed_endpoints[0]") {
				t.Errorf("a good entry was refused: %v", err)
			}
		})
	}
}

func TestLoadConfigAcceptsTheMinimums(t *testing.T) {
	t.Parallel()
	body := strings.Replace(minimalConfig, "  url: https://git", "  poll_interval: 5s\n  url: https://git", 1) + "drift_interval: 1m\n"
	if _, err := agent.LoadConfig(writeConfig(t, body)); err != nil {
		t.Fatal(err)
	}
}
