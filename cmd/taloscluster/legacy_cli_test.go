package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
)

// TestPlanOfPythonCluster: the plan of a cluster the Python taloscluster
// left in the lab (lab.WriteLegacyCluster), with cluster.yaml unchanged,
// shows exactly the differences docs/migration.md §3 lists for it: each
// machine given the engine's config (its running config has the Python
// tool's shape) and reinstalled with the engine's schematic (the Python
// tool's image always carried tailscale), one at a time through the health
// gate; the talosconfig endpoints rewritten; and, after the health
// barrier, the boot CD-ROM detached on each VM. Nothing else: no VM, pool,
// tag, ISO or firewall change, no warning, no refusal.
func TestPlanOfPythonCluster(t *testing.T) {
	t.Parallel()
	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr2": netip.MustParsePrefix("127.72.0.0/24")},
		TaskDuration: -1, StatsInterval: 100 * time.Millisecond, BootDelay: 20 * time.Millisecond, InstallDelay: 20 * time.Millisecond,
		RebootDelay: 20 * time.Millisecond, ReadyDelay: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dir := t.TempDir()
	if err := l.WriteLegacyCluster(t.Context(), dir, lab.Cluster{Name: "legacy", Workers: 1, Bridge: "vmbr2"}); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"plan", "-o", "json", "-C", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("plan exit %d, want 0\n%s\n%s", code, out.String(), errb.String())
	}
	var p struct {
		Changes []struct {
			Phase      string `json:"phase"`
			Domain     string `json:"domain"`
			Action     string `json:"action"`
			Resource   struct{ Kind, Name string }
			Reason     string `json:"reason"`
			Attributes []struct{ Key, Value string }
			Diff       string `json:"diff"`
		} `json:"changes"`
		Warnings   []any `json:"warnings"`
		Refusals   []struct{ Resource struct{ Kind, Name string } }
		Incomplete bool `json:"incomplete"`
	}
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("reading the plan: %v\n%s", err, out.String())
	}
	if p.Incomplete || len(p.Warnings) != 0 {
		t.Errorf("plan incomplete %v, warnings %v; want a complete plan without warnings", p.Incomplete, p.Warnings)
	}

	machines := []string{"legacy-controlplane-01", "legacy-controlplane-02", "legacy-controlplane-03", "legacy-worker-01"}
	var want []string
	for _, m := range machines {
		want = append(want, "upgrade wait cluster/legacy", "upgrade update node/"+m, "upgrade drain node/"+m, "upgrade apply-config machine/"+m,
			"upgrade upgrade-talos machine/"+m, "upgrade restart machine/"+m, "upgrade wait machine/"+m, "upgrade update node/"+m)
	}
	want = append(want, "bootstrap update talosconfig/talosconfig", "health wait cluster/legacy")
	for _, m := range machines {
		want = append(want, "health delete cidata/"+m)
	}
	var got []string
	for _, c := range p.Changes {
		got = append(got, fmt.Sprintf("%s %s %s/%s", c.Phase, c.Action, c.Resource.Kind, c.Resource.Name))
		switch {
		case c.Action == "apply-config":
			// The Python tool's config shape (docs/migration.md §1).
			for _, s := range []string{"rotate-server-certificates", "wipe: true", "NetworkRuleConfig"} {
				if !strings.Contains(c.Diff, s) {
					t.Errorf("%s: the diff lacks %q:\n%s", c.Resource.Name, s, c.Diff)
				}
			}
			if strings.Contains(c.Resource.Name, "controlplane") && !strings.Contains(c.Diff, "extraManifests") {
				t.Errorf("%s: the diff lacks the extraManifests:\n%s", c.Resource.Name, c.Diff)
			}
		case c.Resource.Kind == "talosconfig":
			if len(c.Attributes) != 1 || c.Attributes[0].Key != "endpoints" || !strings.HasPrefix(c.Attributes[0].Value, "127.0.0.1 -> ") {
				t.Errorf("talosconfig change %v; want only the endpoints from 127.0.0.1", c.Attributes)
			}
		case c.Resource.Kind == "cidata":
			if c.Domain != "provider" || !strings.Contains(c.Reason, "detach the boot") {
				t.Errorf("cidata change of %s: %s %q", c.Resource.Name, c.Domain, c.Reason)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan changes:\n  %s\nwant (docs/migration.md §3):\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if len(p.Refusals) != 0 {
		t.Errorf("refusals %v, want none", p.Refusals)
	}
}
