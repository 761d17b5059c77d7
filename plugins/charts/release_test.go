package charts_test

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// releases is Helm's storage of a namespace's releases, as the helm CLI
// keeps it (Secrets).
func (l *lab) releases(namespace string) *storage.Storage {
	return storage.Init(driver.NewSecrets(l.core.CoreV1().Secrets(namespace)))
}

func revision(t *testing.T, s *storage.Storage, name string, version int) *release.Release {
	t.Helper()
	r, err := s.Get(name, version)
	if err != nil {
		t.Fatalf("revision %d of %s: %v", version, name, err)
	}
	return r.(*release.Release)
}

// setStatus rewrites a revision's status the way Helm's storage keeps it
// (the record and its status label), as a helm run that stopped midway
// leaves it.
func setStatus(t *testing.T, s *storage.Storage, name string, version int, status common.Status) {
	t.Helper()
	r := revision(t, s, name, version)
	r.Info.Status = status
	if err := s.Update(r); err != nil {
		t.Fatal(err)
	}
}

// one is the only step of a plan, which must be as said.
func one(t *testing.T, what string, chs []plan.Change, action plan.Action, reason ...string) plan.Change {
	t.Helper()
	if len(chs) != 1 || chs[0].Action != action {
		t.Fatalf("%s: the plan is %q, want one %s", what, names(chs), action)
	}
	for _, r := range reason {
		if !strings.Contains(chs[0].Reason, r) {
			t.Errorf("%s: the reason %q does not say %q", what, chs[0].Reason, r)
		}
	}
	return chs[0]
}

// TestPendingAndMovedReleases: against a real kube-apiserver, a release an
// upgrade left pending is rolled back to its last good revision and then
// upgraded, not uninstalled; one whose first install never finished is
// installed again; one being uninstalled, or found in another namespace
// than its entry's, is refused; a step whose release changed since the
// plan fails.
func TestPendingAndMovedReleases(t *testing.T) {
	t.Parallel()
	l := startLab(t)
	p := l.plugin(nil)
	env := reconcile.PluginEnv{Kubeconfig: l.kubeconfig}
	section := func(greeting, namespace string) *spec.Cluster {
		return load(t, "proxmox-external", "charts:\n  lab-app: {repo: "+l.url+", version: 0.2.0, namespace: "+namespace+
			", values: {greeting: "+greeting+"}}\n", "")
	}
	hello, bye := section("hello", "lab-app"), section("bye", "lab-app")
	apply(t, p, env, steps(t, p, hello, env, false))
	apply(t, p, env, steps(t, p, bye, env, false))
	s := l.releases("lab-app")

	// An upgrade left pending: revision 2 was being made over 1.
	setStatus(t, s, "lab-app", 2, common.StatusPendingUpgrade)
	pending := steps(t, p, bye, env, false)
	step := one(t, "pending upgrade", pending, plan.ActionUpdate, "pending-upgrade", "rolled back to revision 1")
	// Someone's helm run finishes between the plan and the step.
	setStatus(t, s, "lab-app", 2, common.StatusDeployed)
	if _, err := p.Apply(t.Context(), env, step); err == nil || !strings.Contains(err.Error(), "changed since the plan") {
		t.Fatalf("a step whose release changed since the plan: %v", err)
	}
	setStatus(t, s, "lab-app", 2, common.StatusPendingUpgrade)
	apply(t, p, env, pending)
	last, err := s.Last("lab-app")
	if err != nil {
		t.Fatal(err)
	}
	if r := last.(*release.Release); r.Version != 4 || r.Info.Status != common.StatusDeployed {
		t.Errorf("after the step the release is at revision %d, %s; want 4 (the rollback's 3, then the upgrade)", r.Version, r.Info.Status)
	}
	if r := revision(t, s, "lab-app", 3); !strings.Contains(r.Info.Description, "rollback") || r.Chart.Metadata.Version != "0.2.0" {
		t.Errorf("revision 3 is not the rollback: %q", r.Info.Description)
	}
	if d := l.configMap(t, "lab-app", "lab-app-lab"); !strings.Contains(d["values"], `"greeting":"bye"`) {
		t.Errorf("lab-app's values after the rollback and upgrade: %v", d)
	}
	if again := steps(t, p, bye, env, false); len(again) != 0 {
		t.Fatalf("after the rollback and upgrade: %q", names(again))
	}

	// A first install that never finished: its only revision is pending.
	r := revision(t, s, "lab-app", 4)
	for v := 1; v <= 4; v++ {
		if _, err := s.Delete("lab-app", v); err != nil {
			t.Fatal(err)
		}
	}
	r.Version, r.Info.Status = 1, common.StatusPendingInstall
	if err := s.Create(r); err != nil {
		t.Fatal(err)
	}
	apply(t, p, env, []plan.Change{one(t, "pending install", steps(t, p, bye, env, false), plan.ActionReplace, "first install never finished")})
	if r := revision(t, s, "lab-app", 1); r.Info.Status != common.StatusDeployed {
		t.Errorf("after the reinstall the release is %s", r.Info.Status)
	}
	l.configMap(t, "lab-app", "lab-app-lab")
	if again := steps(t, p, bye, env, false); len(again) != 0 {
		t.Fatalf("after the reinstall: %q", names(again))
	}

	// Someone is uninstalling it: refused; failed: upgraded.
	setStatus(t, s, "lab-app", 1, common.StatusUninstalling)
	one(t, "uninstalling", steps(t, p, bye, env, false), plan.ActionRefuse, "lab-app/lab-app", "uninstalling")
	setStatus(t, s, "lab-app", 1, common.StatusFailed)
	apply(t, p, env, []plan.Change{one(t, "failed", steps(t, p, bye, env, false), plan.ActionUpdate, "its status is failed")})
	if again := steps(t, p, bye, env, false); len(again) != 0 {
		t.Fatalf("after the upgrade of the failed release: %q", names(again))
	}

	// The entry's namespace changed: refused, naming both, and nothing
	// is made in the new one.
	moved := section("bye", "lab-moved")
	one(t, "moved", steps(t, p, moved, env, false), plan.ActionRefuse,
		"release lab-app is in namespace lab-app, and the entry's namespace is lab-moved", "uninstall it from lab-app first, or set namespace back")
	// Uninstalled from the old namespace, it is installed in the new.
	apply(t, p, env, steps(t, p, bye, env, true))
	installed := steps(t, p, moved, env, false)
	if got, want := names(installed), []string{"create namespace lab-moved", "create helm-release lab-moved/lab-app"}; !slices.Equal(got, want) {
		t.Fatalf("after the uninstall from the old namespace: %q, want %q", got, want)
	}
	apply(t, p, env, installed)
	if again := steps(t, p, moved, env, false); len(again) != 0 {
		t.Fatalf("after the install in the new namespace: %q", names(again))
	}
	// And moving it back is refused the same.
	one(t, "moved back", steps(t, p, bye, env, false), plan.ActionRefuse, "is in namespace lab-moved", "uninstall it from lab-moved first")
}
