package proxmox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// TestTwoStateCopiesNeverLeaveATwin converges one cluster from two copies
// of its state at once (two checkouts sharing one identity, so neither
// run's lock keeps the other out), both adding the same worker, with
// latency on the calls that create a VM. Exactly one VM of each hostname is
// left, and a run that stops because of the other says why.
//
//   - "same id": both runs ask /cluster/nextid before either create
//     arrives, so both send the same id; the second is refused ("VM N
//     already exists") and, checking the hostname again before its retry,
//     finds the other run's VM and stops instead of creating a twin.
//   - "newer id": the second run checks the hostname before the first
//     run's VM exists and asks for its id after, so both create a VM; the
//     run that created the newer one removes it, says so, and stops, and
//     the first run goes on and converges.
func TestTwoStateCopiesNeverLeaveATwin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		op         string        // the operation slowed
		latency    time.Duration // its latency
		lag        time.Duration // how much later the second run starts its steps
		secondSays string        // in the second run's error
	}{
		{"same id", "qemu.create", 1500 * time.Millisecond, 200 * time.Millisecond, `VM twin\w*-worker-02 exists now \(id \d+ on pve\d\); another run created it`},
		{"newer id", "cluster.nextid", 1500 * time.Millisecond, 500 * time.Millisecond, `VM twin\w*-worker-02 \(id (\d+)\) was created by another run meanwhile, so this run removed VM (\d+), the twin it had created, and stops`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := "twin" + strings.ReplaceAll(tc.name, " ", "")
			w := slowBootWorld(t, name)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			if err := w.engine(t).Converge(ctx); err != nil {
				t.Fatalf("first build: %v", err)
			}
			// Both copies add a worker.
			yaml := filepath.Join(w.dir, "cluster.yaml")
			data, err := os.ReadFile(yaml)
			if err != nil {
				t.Fatal(err)
			}
			grown := strings.Replace(string(data), "count: 1\n", "count: 2\n", 1)
			if err := os.WriteFile(yaml, []byte(grown), 0o600); err != nil {
				t.Fatal(err)
			}
			copyDir := t.TempDir()
			if err := os.CopyFS(copyDir, os.DirFS(w.dir)); err != nil {
				t.Fatal(err)
			}
			other := *w
			other.dir = copyDir
			first, second := w.engine(t), other.engine(t)
			var outs [2]strings.Builder
			first.Progress, second.Progress = &outs[0], &outs[1]

			worker := name + "-worker-02"
			var both sync.WaitGroup
			both.Add(2)
			approve := func(lag time.Duration) func(*plan.Plan) error {
				return func(p *plan.Plan) error {
					both.Done()
					if !creates(p, worker) {
						return fmt.Errorf("the plan does not create %s: %s", worker, p.Summary())
					}
					both.Wait() // both runs planned before either acts
					time.Sleep(lag)
					return nil
				}
			}
			first.Approve, second.Approve = approve(0), approve(tc.lag)
			w.lab.PVE.SetLatency(tc.op, tc.latency)
			start := time.Now()
			errs := make([]error, 2)
			var done sync.WaitGroup
			for i, e := range []*reconcile.Engine{first, second} {
				done.Add(1)
				go func() {
					defer done.Done()
					errs[i] = e.Converge(ctx)
				}()
			}
			done.Wait()
			w.lab.PVE.SetLatency(tc.op, 0)
			t.Logf("first run: %v\nsecond run: %v", errs[0], errs[1])

			names, _ := vmsByName(w)
			for n, c := range names {
				if c != 1 {
					t.Errorf("%d VMs are named %s", c, n)
				}
			}
			if names[worker] != 1 || len(names) != 5 {
				t.Errorf("VMs %v; want the 5 machines once each", names)
			}
			if errs[0] != nil {
				t.Errorf("the first run failed: %v", errs[0])
			}
			if !errors.Is(errs[1], reconcile.ErrPrecondition) {
				t.Fatalf("the second run: %v; want it stopped by the first run's VM", errs[1])
			}
			m := regexp.MustCompile(tc.secondSays).FindStringSubmatch(errs[1].Error())
			if m == nil {
				t.Fatalf("the second run's error %q does not match %s", errs[1], tc.secondSays)
			}
			created := 0
			for _, op := range w.lab.PVE.Log() {
				if op.Name == "qemu.create" && op.Status == http.StatusOK && op.Time.After(start) {
					created++
				}
			}
			switch tc.name {
			case "same id":
				if created != 1 {
					t.Errorf("%d VMs created; want the first run's only", created)
				}
			case "newer id":
				kept, removed := atoi(m[1]), atoi(m[2])
				if created != 2 || removed <= kept {
					t.Errorf("%d VMs created, kept %d, removed %d: want two, the newer removed", created, kept, removed)
				}
				for _, v := range w.lab.PVE.VMs() {
					if v.ID == removed {
						t.Errorf("VM %d, the twin, is still there", removed)
					}
					if v.Name == worker && (v.ID != kept || !v.Running) {
						t.Errorf("%s is VM %d (running %t); want VM %d, running", worker, v.ID, v.Running, kept)
					}
				}
			}
		})
	}
}

// slowBootWorld is newWorld with one worker whose machines take three
// seconds to boot, so a run that creates one waits for it long enough for
// the other run's create to arrive.
func slowBootWorld(t *testing.T, name string) *world {
	t.Helper()
	clusterNet := nextNet(t)
	l, err := lab.Start(t.Context(), lab.Options{
		Bridges:      map[string]netip.Prefix{"vmbr0": clusterNet},
		TaskDuration: -1,
		BootDelay:    3 * time.Second, InstallDelay: 20 * time.Millisecond, RebootDelay: 20 * time.Millisecond,
		ReadyDelay: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	dir := t.TempDir()
	if err := l.WriteCluster(dir, lab.Cluster{Name: name, Workers: 1, Bridge: "vmbr0"}); err != nil {
		t.Fatal(err)
	}
	return &world{lab: l, dir: dir, net: clusterNet, name: name}
}

func creates(p *plan.Plan, hostname string) bool {
	for _, ch := range p.Changes {
		if ch.Resource.Kind == plan.KindMachine && ch.Action == plan.ActionCreate && ch.Resource.Name == hostname {
			return true
		}
	}
	return false
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
