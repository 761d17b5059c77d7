package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// TestRolloutAndRemediationParse checks what the rollout and remediation
// sections load into, defaults included.
func TestRolloutAndRemediationParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		mutate         func(tree)
		maxUnavailable int
		remediation    *spec.Remediation
	}{
		{name: "both absent", maxUnavailable: 1},
		{name: "both null", mutate: func(t tree) { t.set("rollout", nil).set("remediation", nil) }, maxUnavailable: 1},
		{name: "empty rollout", mutate: func(t tree) { t.set("rollout", map[string]any{}) }, maxUnavailable: 1},
		{name: "max_unavailable", mutate: func(t tree) { t.set("rollout.max_unavailable", 2) }, maxUnavailable: 2},
		{name: "max_unavailable numeric string", mutate: func(t tree) { t.set("rollout.max_unavailable", "2") }, maxUnavailable: 2},
		{name: "empty remediation turns it on with the defaults", mutate: func(t tree) {
			t.set("workers.worker.count", 3).set("remediation", map[string]any{})
		}, maxUnavailable: 1,
			remediation: &spec.Remediation{After: 10 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Percent: 40}}},
		{name: "remediation set", mutate: func(t tree) {
			t.set("workers.gpu", map[string]any{"count": 1, "cores": 8, "memory": 16, "disk": 100})
			t.set("remediation", map[string]any{"after": "90s", "max_unhealthy": 1, "pools": []any{"gpu", "worker"}})
		}, maxUnavailable: 1,
			remediation: &spec.Remediation{After: 90 * time.Second, MaxUnhealthy: spec.MaxUnhealthy{Count: 1}, Pools: []string{"gpu", "worker"}}},
		{name: "remediation hours and a percentage", mutate: func(t tree) {
			t.set("remediation", map[string]any{"after": "1h30m", "max_unhealthy": "50%"})
		}, maxUnavailable: 1,
			remediation: &spec.Remediation{After: 90 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Percent: 50}}},
		{name: "count as a numeric string", mutate: func(t tree) { t.set("remediation.max_unhealthy", "2") }, maxUnavailable: 1,
			remediation: &spec.Remediation{After: 10 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Count: 2}}},
		{name: "exactly one minute", mutate: func(t tree) { t.set("remediation", map[string]any{"after": "1m", "max_unhealthy": "100%"}) }, maxUnavailable: 1,
			remediation: &spec.Remediation{After: time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Percent: 100}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := proxmoxBase()
			if tc.mutate != nil {
				tc.mutate(tr)
			}
			c, warns, err := spec.Load(writeDir(t, tr, nil), spec.Options{})
			if err != nil {
				t.Fatalf("unexpected errors:\n%v", err)
			}
			if c.MaxUnavailable() != tc.maxUnavailable || c.Rollout.MaxUnavailable != tc.maxUnavailable {
				t.Errorf("max unavailable %d (field %d), want %d", c.MaxUnavailable(), c.Rollout.MaxUnavailable, tc.maxUnavailable)
			}
			if !reflect.DeepEqual(c.Remediation, tc.remediation) {
				t.Errorf("remediation %+v, want %+v", c.Remediation, tc.remediation)
			}
			for _, w := range warns {
				if w.Key == "rollout.max_unavailable" || w.Key == "remediation.max_unhealthy" {
					t.Errorf("unexpected warning: %s", w)
				}
			}
		})
	}
}

// TestRolloutAndRemediationProblems checks every error and warning of the
// two sections: the file, the key and the whole message.
func TestRolloutAndRemediationProblems(t *testing.T) {
	t.Parallel()
	const (
		isError   = "error"
		isWarning = "warning"
	)
	cases := []struct {
		name   string
		mutate func(tree)
		files  map[string]string
		level  string
		file   string
		key    string
		msg    string
	}{
		// rollout.
		{name: "rollout not a mapping", mutate: func(t tree) { t.set("rollout", 2) }, level: isError,
			key: "rollout", msg: "rollout must be a mapping, not a integer"},
		{name: "rollout unknown key", mutate: func(t tree) { t.set("rollout.max_surge", 1) }, level: isError,
			key: "rollout", msg: "rollout: unknown key(s): max_surge"},
		{name: "max_unavailable zero", mutate: func(t tree) { t.set("rollout.max_unavailable", 0) }, level: isError,
			key: "rollout.max_unavailable", msg: "rollout.max_unavailable must be 1 or greater: a rollout takes at least one worker down at a time"},
		{name: "max_unavailable negative", mutate: func(t tree) { t.set("rollout.max_unavailable", -1) }, level: isError,
			key: "rollout.max_unavailable", msg: "rollout.max_unavailable must be 1 or greater: a rollout takes at least one worker down at a time"},
		{name: "max_unavailable fractional", mutate: func(t tree) { t.set("rollout.max_unavailable", 1.5) }, level: isError,
			key: "rollout.max_unavailable", msg: "rollout.max_unavailable must be an integer, not a fractional number"},
		{name: "max_unavailable percentage", mutate: func(t tree) { t.set("rollout.max_unavailable", "50%") }, level: isError,
			key: "rollout.max_unavailable", msg: "rollout.max_unavailable must be an integer, not a string"},
		{name: "max_unavailable boolean", mutate: func(t tree) { t.set("rollout.max_unavailable", true) }, level: isError,
			key: "rollout.max_unavailable", msg: "rollout.max_unavailable must be an integer, not a boolean"},
		{name: "max_unavailable above the workers warns", mutate: func(t tree) { t.set("rollout.max_unavailable", 3) }, level: isWarning,
			key: "rollout.max_unavailable", msg: "rollout.max_unavailable is 3 but the cluster has 2 worker machines: a rollout takes every worker down at once"},

		// remediation.
		{name: "remediation not a mapping", mutate: func(t tree) { t.set("remediation", true) }, level: isError,
			key: "remediation", msg: "remediation must be a mapping, not a boolean"},
		{name: "remediation unknown keys", mutate: func(t tree) { t.set("remediation", map[string]any{"timeout": "5m", "enabled": true}) }, level: isError,
			key: "remediation", msg: "remediation: unknown key(s): enabled, timeout"},
		{name: "after without a unit", mutate: func(t tree) { t.set("remediation.after", 600) }, level: isError,
			key: "remediation.after", msg: "remediation.after must be a duration with its unit, such as 10m, 90s or 1h, not a integer"},
		{name: "after not a duration", mutate: func(t tree) { t.set("remediation.after", "ten minutes") }, level: isError,
			key: "remediation.after", msg: `remediation.after "ten minutes" is not a duration such as 10m, 90s or 1h`},
		{name: "after in days", mutate: func(t tree) { t.set("remediation.after", "1d") }, level: isError,
			key: "remediation.after", msg: `remediation.after "1d" is not a duration such as 10m, 90s or 1h`},
		{name: "after below a minute", mutate: func(t tree) { t.set("remediation.after", "45s") }, level: isError,
			key: "remediation.after", msg: "remediation.after must be 1m or longer, not 45s: Kubernetes alone takes 40 to 50 seconds (its node-monitor grace period) to mark a silent node NotReady, so a shorter wait would replace machines that are only slow to report"},
		{name: "after negative", mutate: func(t tree) { t.set("remediation.after", "-10m") }, level: isError,
			key: "remediation.after", msg: "remediation.after must be 1m or longer, not -10m: Kubernetes alone takes 40 to 50 seconds (its node-monitor grace period) to mark a silent node NotReady, so a shorter wait would replace machines that are only slow to report"},
		{name: "max_unhealthy 0%", mutate: func(t tree) { t.set("remediation.max_unhealthy", "0%") }, level: isError,
			key: "remediation.max_unhealthy", msg: `remediation.max_unhealthy "0%" must be a whole percentage from 1% to 100%, such as 40%`},
		{name: "max_unhealthy above 100%", mutate: func(t tree) { t.set("remediation.max_unhealthy", "120%") }, level: isError,
			key: "remediation.max_unhealthy", msg: `remediation.max_unhealthy "120%" must be a whole percentage from 1% to 100%, such as 40%`},
		{name: "max_unhealthy fractional percentage", mutate: func(t tree) { t.set("remediation.max_unhealthy", "12.5%") }, level: isError,
			key: "remediation.max_unhealthy", msg: `remediation.max_unhealthy "12.5%" must be a whole percentage from 1% to 100%, such as 40%`},
		{name: "max_unhealthy zero", mutate: func(t tree) { t.set("remediation.max_unhealthy", 0) }, level: isError,
			key: "remediation.max_unhealthy", msg: "remediation.max_unhealthy must be 1 or greater when it is a count of machines (or a percentage such as 40%): 0 would never remediate"},
		{name: "max_unhealthy negative string", mutate: func(t tree) { t.set("remediation.max_unhealthy", "-2") }, level: isError,
			key: "remediation.max_unhealthy", msg: "remediation.max_unhealthy must be 1 or greater when it is a count of machines (or a percentage such as 40%): 0 would never remediate"},
		{name: "max_unhealthy a word", mutate: func(t tree) { t.set("remediation.max_unhealthy", "half") }, level: isError,
			key: "remediation.max_unhealthy", msg: `remediation.max_unhealthy "half" must be a count of machines such as 2 or a percentage of the pool such as 40%`},
		{name: "max_unhealthy a fraction", mutate: func(t tree) { t.set("remediation.max_unhealthy", 0.4) }, level: isError,
			key: "remediation.max_unhealthy", msg: "remediation.max_unhealthy must be a count of machines such as 2 or a percentage of the pool such as 40%, not a fractional number"},
		{name: "max_unhealthy a list", mutate: func(t tree) { t.set("remediation.max_unhealthy", []any{1}) }, level: isError,
			key: "remediation.max_unhealthy", msg: "remediation.max_unhealthy must be a count of machines such as 2 or a percentage of the pool such as 40%, not a list"},
		{name: "pools not a list", mutate: func(t tree) { t.set("remediation.pools", "worker") }, level: isError,
			key: "remediation.pools", msg: "remediation.pools must be a list of non-empty strings"},
		{name: "pools empty entry", mutate: func(t tree) { t.set("remediation.pools", []any{"worker", ""}) }, level: isError,
			key: "remediation.pools[1]", msg: "remediation.pools must be a list of non-empty strings; entry 2 is empty"},
		{name: "pools empty", mutate: func(t tree) { t.set("remediation.pools", []any{}) }, level: isError,
			key: "remediation.pools", msg: "remediation.pools is empty: leave it out to cover every worker pool, or remove the remediation section to turn remediation off"},
		{name: "pools lists controlplane", mutate: func(t tree) { t.set("remediation.pools", []any{"worker", "controlplane"}) }, level: isError,
			key: "remediation.pools[1]", msg: "remediation.pools lists controlplane: control planes are never remediated (replacing one risks etcd quorum); list worker pools only"},
		{name: "pools lists an unknown pool", mutate: func(t tree) { t.set("remediation.pools", []any{"gpu"}) }, level: isError,
			key: "remediation.pools[0]", msg: "remediation.pools lists 'gpu', which is not a worker pool (worker pools: worker)"},
		{name: "pools without worker pools", mutate: func(t tree) { t.del("workers").set("remediation.pools", []any{"worker"}) }, level: isError,
			key: "remediation.pools[0]", msg: "remediation.pools lists 'worker', which is not a worker pool (the cluster has no worker pools)"},
		{name: "pools lists a pool twice", mutate: func(t tree) { t.set("remediation.pools", []any{"worker", "worker"}) }, level: isError,
			key: "remediation.pools[1]", msg: "remediation.pools lists 'worker' twice"},
		{name: "pool too small for the default percentage", mutate: func(t tree) { t.set("remediation", map[string]any{}) }, level: isWarning,
			key: "remediation.max_unhealthy", msg: "remediation.max_unhealthy 40% of pool 'worker' (2 machines) is less than one machine, so that pool is never remediated; write a count such as 1 or a larger percentage"},
		{name: "pool too small for a percentage", mutate: func(t tree) {
			t.set("workers.worker.count", 3).set("remediation.max_unhealthy", "30%")
		}, level: isWarning,
			key: "remediation.max_unhealthy", msg: "remediation.max_unhealthy 30% of pool 'worker' (3 machines) is less than one machine, so that pool is never remediated; write a count such as 1 or a larger percentage"},
		{name: "problem in an include names that file", files: map[string]string{"secrets.yaml": "remediation:\n  after: 30s\n"}, level: isError,
			file: "secrets.yaml", key: "remediation.after", msg: "remediation.after must be 1m or longer, not 30s: Kubernetes alone takes 40 to 50 seconds (its node-monitor grace period) to mark a silent node NotReady, so a shorter wait would replace machines that are only slow to report"},
		{name: "a key set in two files", mutate: func(t tree) { t.set("rollout.max_unavailable", 1) }, files: map[string]string{"secrets.yaml": "rollout:\n  max_unavailable: 2\n"}, level: isError,
			file: "secrets.yaml", key: "rollout.max_unavailable", msg: "rollout.max_unavailable is set in both cluster.yaml and secrets.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := proxmoxBase()
			if tc.mutate != nil {
				tc.mutate(tr)
			}
			_, warns, err := spec.Load(writeDir(t, tr, tc.files), spec.Options{})
			var problems []spec.Problem
			switch tc.level {
			case isError:
				var se *spec.Error
				if !errors.As(err, &se) {
					t.Fatalf("want a *spec.Error, got %v", err)
				}
				problems = se.Problems
			case isWarning:
				if err != nil {
					t.Fatalf("unexpected errors:\n%v", err)
				}
				problems = warns
			}
			file := tc.file
			if file == "" {
				file = "cluster.yaml"
			}
			for _, p := range problems {
				if p.File == file && p.Key == tc.key && p.Message == tc.msg {
					if p.Line == 0 {
						t.Errorf("problem without a line: %s", p)
					}
					return
				}
			}
			t.Fatalf("want the %s\n  %s: %s: %s\ngot:\n%v", tc.level, file, tc.key, tc.msg, problems)
		})
	}
}

// TestRemediationLimit checks how many machines of a pool may be
// remediated at once.
func TestRemediationLimit(t *testing.T) {
	t.Parallel()
	pct := func(p int) *spec.Remediation { return &spec.Remediation{MaxUnhealthy: spec.MaxUnhealthy{Percent: p}} }
	count := func(n int) *spec.Remediation { return &spec.Remediation{MaxUnhealthy: spec.MaxUnhealthy{Count: n}} }
	cases := []struct {
		name string
		r    *spec.Remediation
		pool int
		want int
	}{
		{"nil is off", nil, 10, 0},
		{"empty pool", pct(40), 0, 0},
		{"40% of 1", pct(40), 1, 0},
		{"40% of 2", pct(40), 2, 0},
		{"40% of 3", pct(40), 3, 1},
		{"40% of 5", pct(40), 5, 2},
		{"40% of 10", pct(40), 10, 4},
		{"50% of 2", pct(50), 2, 1},
		{"100% of 7", pct(100), 7, 7},
		{"1% of 99", pct(1), 99, 0},
		{"1% of 100", pct(1), 100, 1},
		{"count 1 of 1", count(1), 1, 1},
		{"count 2 of 10", count(2), 10, 2},
		{"count above the pool", count(5), 3, 3},
		{"count of an empty pool", count(5), 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.r.Limit(tc.pool); got != tc.want {
				t.Errorf("Limit(%d) = %d, want %d", tc.pool, got, tc.want)
			}
		})
	}
}

// TestRemediationCovers checks which pools remediation applies to.
func TestRemediationCovers(t *testing.T) {
	t.Parallel()
	all := &spec.Remediation{}
	some := &spec.Remediation{Pools: []string{"gpu"}}
	var off *spec.Remediation
	cases := []struct {
		name string
		r    *spec.Remediation
		pool string
		want bool
	}{
		{"every worker pool", all, "worker", true},
		{"never the control plane", all, "controlplane", false},
		{"a listed pool", some, "gpu", true},
		{"a pool not listed", some, "worker", false},
		{"off", off, "worker", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.r.Covers(tc.pool); got != tc.want {
				t.Errorf("Covers(%q) = %v, want %v", tc.pool, got, tc.want)
			}
		})
	}
}

// TestMaxUnavailableIsAtLeastOne checks the accessor on a Cluster built
// without Load.
func TestMaxUnavailableIsAtLeastOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ field, want int }{{0, 1}, {-3, 1}, {1, 1}, {4, 4}} {
		c := &spec.Cluster{Rollout: spec.Rollout{MaxUnavailable: tc.field}}
		if got := c.MaxUnavailable(); got != tc.want {
			t.Errorf("MaxUnavailable with the field %d = %d, want %d", tc.field, got, tc.want)
		}
	}
}

// TestMaxUnhealthyString checks that the value is shown as written.
func TestMaxUnhealthyString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    spec.MaxUnhealthy
		want string
	}{{spec.MaxUnhealthy{Percent: 40}, "40%"}, {spec.MaxUnhealthy{Count: 2}, "2"}, {spec.DefaultMaxUnhealthy, "40%"}} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.m, got, tc.want)
		}
	}
}

// TestIdentifyAcceptsRolloutAndRemediation checks that the sections do not
// stop a directory from being known by its name.
func TestIdentifyAcceptsRolloutAndRemediation(t *testing.T) {
	t.Parallel()
	tr := proxmoxBase().set("rollout.max_unavailable", 2).set("remediation.after", "15m")
	dir := writeDir(t, tr, nil)
	name, _, err := spec.Identify(os.DirFS(dir), dir)
	if err != nil || name != "edge" {
		t.Fatalf("Identify = %q, %v; want edge", name, err)
	}
}

// TestRolloutRemediationExample loads the example of both sections in the
// fuzz corpus: it is valid, without warnings, and reads as written.
func TestRolloutRemediationExample(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "fuzz-seed", "rollout-remediation.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, dir, "cluster.yaml", string(data))
	writeFile(t, dir, "secrets.yaml", "{}\n")
	c, warns, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) > 0 {
		t.Errorf("unexpected warnings: %v", warns)
	}
	want := &spec.Remediation{After: 15 * time.Minute, MaxUnhealthy: spec.MaxUnhealthy{Percent: 40}, Pools: []string{"worker"}}
	if c.MaxUnavailable() != 2 || !reflect.DeepEqual(c.Remediation, want) {
		t.Fatalf("max unavailable %d, remediation %+v; want 2, %+v", c.MaxUnavailable(), c.Remediation, want)
	}
	if got := c.Remediation.Limit(c.Workers[0].Count); got != 2 {
		t.Errorf("limit of the worker pool %d, want 2", got)
	}
	if c.Remediation.Covers("gpu") {
		t.Error("the gpu pool is not listed but is covered")
	}
}
