package main

// The fault matrix: for each external system (Proxmox, the Talos API, the
// Kubernetes API, the git remote, GitHub), each kind of fault (an error
// status, latency, a hang after the request was accepted, a connection
// reset, a lost reply, and our own process dying right after a mutation)
// and each phase it can meet (plan, the converge phases, reporting), a
// cell injects the fault into a lab of its own and checks that the run
// fails or recovers as designed, and that a clean run afterwards leaves no
// duplicate or orphaned resource, the cluster identity untouched, no
// secret in any output, and (through the agent) the other cluster served.
// docs/reliability.md prints the matrix; TestFaultMatrixDocIsCurrent keeps
// the two in step.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// Designed outcomes of a cell.
const (
	// outcomeFails: the run ends, within its bounds, with an error that
	// names the system or the operation; a clean run afterwards converges.
	outcomeFails = "fails"
	// outcomeRecovers: the run succeeds; retries or waits absorbed the
	// fault.
	outcomeRecovers = "recovers"
	// outcomeResumes: the run was cut short by our own crash; the next run
	// completes what it left, without redoing what was done.
	outcomeResumes = "resumes"
	// outcomeIncomplete: the plan is made and marked incomplete; what could
	// not be read is named in its incomplete reasons and left out of the
	// comparison, never taken for empty.
	outcomeIncomplete = "incomplete"
)

// faultCell is one cell of the matrix. The engine fields drive
// TestFaultMatrixEngine; the agent fields TestFaultMatrixAgent.
type faultCell struct {
	system, kind, phase string
	// outcome is the designed outcome (outcomeFails, ...).
	outcome string
	// fault says in a few words what is injected, for the doc.
	fault string
	// net is the cell's own lab network, used by no other cell.
	net string
	// skip, when set, says why the cell does not hold yet: the cell is
	// skipped with that reason, and the doc says it does not hold.
	skip string

	// Engine cells.

	// existing: the cluster is built first, then grown by a worker; the
	// faulted run is the plan of that change (the plan phase).
	existing bool
	// fresh: the faulted run starts without a cluster identity, so it
	// mints one; otherwise an identity made beforehand is in place.
	fresh bool
	// at is progress text of the faulted run at which the fault is
	// injected; empty injects it before the run.
	at string
	// inject injects the fault.
	inject func(t *testing.T, e *cellEnv)
	// met reports whether the faulted run met the fault (took is how long
	// it ran): a cell whose fault never fired proves nothing.
	met func(e *cellEnv, took time.Duration) bool
	// crashed, for a crash cell, reports when the faulted run must die:
	// right after the lab recorded the mutation it waits for.
	crashed func(e *cellEnv) bool
	// failure is what the error (or a plan's refusal) of a failing run,
	// or an incomplete reason of an incomplete plan, must say.
	failure string
	// boot is the engine's boot timeout for the faulted run; zero means
	// faultBootTimeout.
	boot time.Duration

	// Agent cells (see fault_agent_test.go).
	agent *agentFault
}

func (c faultCell) name() string { return c.system + "/" + c.kind + "/" + c.phase }

// Bounds of the faulted runs: short, so a hang ends quickly, and far above
// what the fast lab needs when nothing is wrong.
const (
	faultBootTimeout    = 15 * time.Second
	faultHangBoot       = 4 * time.Second
	faultRequestTimeout = 2 * time.Second
	faultPollInterval   = 100 * time.Millisecond
	// faultRunLimit is the test's own safety net on a faulted run: a run
	// that only ends because of it hung, which fails the cell.
	faultRunLimit = 60 * time.Second
)

// faultClusterName is the cluster of an engine cell.
const faultClusterName = "fault"

// engineCells is the engine part of the matrix: the CLI's engine against
// one cluster with one control plane, faults in Proxmox, the Talos API and
// the Kubernetes API. Each uses its own network in 127.120.0.0/24 to
// 127.146.0.0/24.
func engineCells() []faultCell {
	// pveOK is a crash's moment: the lab answered a request of op.
	pveOK := func(op string) func(e *cellEnv) bool {
		return func(e *cellEnv) bool {
			for _, o := range e.lab.PVE.Log() {
				if o.Name == op && o.Status >= 200 && o.Status < 300 && o.Fault == "" {
					return true
				}
			}
			return false
		}
	}
	return []faultCell{
		// Proxmox.
		{system: "proxmox", kind: "error", phase: "plan", outcome: outcomeFails, net: "127.120.0.0/24",
			fault: "the first request of the plan answers 500", existing: true,
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.PVE.Fail("*", 1, 500, "injected failure") },
			met:     pveMet("*", "fail"),
			failure: `reading the Proxmox version at https://\S+: .*500`},
		{system: "proxmox", kind: "hang", phase: "plan", outcome: outcomeRecovers, net: "127.121.0.0/24",
			fault: "the VM listing (a read) is accepted and never answered, once", existing: true,
			inject: func(_ *testing.T, e *cellEnv) { e.lab.PVE.Hang("cluster.resources", 1) },
			met:    pveMet("cluster.resources", "hang")},
		{system: "proxmox", kind: "error", phase: "converge-compute", outcome: outcomeFails, net: "127.122.0.0/24",
			fault:   "qemu.create answers 500",
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.PVE.Fail("qemu.create", 1, 500, "injected failure") },
			met:     pveMet("qemu.create", "fail"),
			failure: `creating VM fault-controlplane-01 \(id \d+\) on pve\d: .*500`},
		{system: "proxmox", kind: "latency", phase: "converge-compute", outcome: outcomeRecovers, net: "127.123.0.0/24",
			fault:  "qemu.create answers 800 ms late",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.PVE.SetLatency("qemu.create", 800*time.Millisecond) },
			met:    tookAtLeast(800 * time.Millisecond)},
		{system: "proxmox", kind: "hang", phase: "converge-compute", outcome: outcomeFails, net: "127.124.0.0/24",
			fault:  "qemu.create is accepted and never answered",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.PVE.Hang("qemu.create", 1) },
			// No met: the lab logs a hung POST only when it closes (it never
			// reads the body, so it does not see the client go); the failure
			// below, "did not answer POST", is what only the hang gives.
			failure: `creating VM fault-controlplane-01 .*Proxmox did not answer POST /api2/json/nodes/pve\d/qemu within 2s`},
		{system: "proxmox", kind: "reset", phase: "converge-compute", outcome: outcomeFails, net: "127.125.0.0/24",
			fault:   "qemu.create's connection is reset before it takes effect",
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.PVE.ResetConn("qemu.create", 1) },
			met:     pveMet("qemu.create", "reset"),
			failure: `creating VM fault-controlplane-01 .*(connection reset|EOF)`},
		{system: "proxmox", kind: "lost-reply", phase: "converge-compute", outcome: outcomeFails, net: "127.126.0.0/24",
			fault:   "qemu.create takes effect, then its connection is reset",
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.PVE.LoseReply("qemu.create", 1) },
			met:     pveMet("qemu.create", "lost-reply"),
			failure: `creating VM fault-controlplane-01 .*(connection reset|EOF)`},
		{system: "proxmox", kind: "crash", phase: "converge-compute", outcome: outcomeResumes, net: "127.127.0.0/24",
			fault: "the run dies right after qemu.create succeeded (the identity was minted by that run)", fresh: true,
			crashed: pveOK("qemu.create")},
		{system: "proxmox", kind: "error", phase: "converge-bootstrap", outcome: outcomeFails, net: "127.128.0.0/24",
			fault: "the first Proxmox request of the bootstrap phase (the wait for addresses) answers 500", at: "bootstrap: [",
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.PVE.Fail("*", 1, 500, "injected failure") },
			met:     pveMet("*", "fail"),
			failure: `Proxmox version at https://\S+: .*500`},
		{system: "proxmox", kind: "reset", phase: "converge-bootstrap", outcome: outcomeRecovers, net: "127.129.0.0/24",
			fault: "the first Proxmox request of the bootstrap phase has its connection reset", at: "bootstrap: [",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.PVE.ResetConn("*", 1) },
			met:    pveMet("*", "reset")},
		{system: "proxmox", kind: "error", phase: "converge-health", outcome: outcomeFails, net: "127.130.0.0/24",
			fault:   "detaching the ISOs after the health barrier (qemu.config.update) answers 500",
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.PVE.Fail("qemu.config.update", 1, 500, "injected failure") },
			met:     pveMet("qemu.config.update", "fail"),
			failure: `detaching the ISOs of fault-controlplane-01: .*500`},
		{system: "proxmox", kind: "lost-reply", phase: "converge-health", outcome: outcomeFails, net: "127.131.0.0/24",
			fault:   "detaching the ISOs takes effect, then its connection is reset",
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.PVE.LoseReply("qemu.config.update", 1) },
			met:     pveMet("qemu.config.update", "lost-reply"),
			failure: `detaching the ISOs of fault-controlplane-01: .*(connection reset|EOF)`},

		// The Talos API of the control plane.
		{system: "talos", kind: "error", phase: "plan", outcome: outcomeIncomplete, net: "127.132.0.0/24",
			fault: "the node's Version call fails with Internal", existing: true,
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.Talos.FailCalls(e.node(), "Version", 1, codes.Internal) },
			met:     talosMet("Version", "fail"),
			failure: `the Talos API of fault-controlplane-01 \(127\.132\.0\.100\), so its version and machine config could not be read: .*Internal`},
		{system: "talos", kind: "error", phase: "converge-bootstrap", outcome: outcomeFails, net: "127.133.0.0/24",
			fault:   "Bootstrap fails with Internal",
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.Talos.FailCalls(e.node(), "Bootstrap", 1, codes.Internal) },
			met:     talosMet("Bootstrap", "fail"),
			failure: `bootstrapping etcd on 127\.133\.0\.100: .*Internal`},
		{system: "talos", kind: "latency", phase: "converge-bootstrap", outcome: outcomeRecovers, net: "127.134.0.0/24",
			fault:  "every call to the node answers 150 ms late",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.Talos.Latency(e.node(), 150*time.Millisecond) },
			met:    tookAtLeast(150 * time.Millisecond)},
		{system: "talos", kind: "hang", phase: "converge-bootstrap", outcome: outcomeFails, net: "127.135.0.0/24",
			fault: "Bootstrap is accepted and never answered", boot: faultHangBoot,
			inject:  func(_ *testing.T, e *cellEnv) { e.lab.Talos.HangCalls(e.node(), "Bootstrap", 1) },
			met:     talosMet("Bootstrap", "hang"),
			failure: `bootstrapping etcd on 127\.135\.0\.100: .*DeadlineExceeded`},
		{system: "talos", kind: "reset", phase: "converge-bootstrap", outcome: outcomeRecovers, net: "127.136.0.0/24",
			fault:  "Bootstrap's connection is reset before it takes effect",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.Talos.ResetCalls(e.node(), "Bootstrap", 1) },
			met:    talosMet("Bootstrap", "reset")},
		{system: "talos", kind: "lost-reply", phase: "converge-bootstrap", outcome: outcomeRecovers, net: "127.137.0.0/24",
			fault:  "Bootstrap takes effect, then its connection is reset",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.Talos.LoseReplies(e.node(), "Bootstrap", 1) },
			met:    talosMet("Bootstrap", "lost-reply")},
		{system: "talos", kind: "crash", phase: "converge-bootstrap", outcome: outcomeResumes, net: "127.138.0.0/24",
			fault: "the run dies right after Bootstrap succeeded",
			crashed: func(e *cellEnv) bool {
				for _, op := range e.lab.Talos.Log() {
					if op.Short() == "Bootstrap" && op.Code == codes.OK && op.Fault == "" {
						return true
					}
				}
				return false
			}},
		{system: "talos", kind: "error", phase: "converge-health", outcome: outcomeRecovers, net: "127.139.0.0/24",
			fault:  "the etcd member list of the health barrier fails with Internal",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.Talos.FailCalls(e.node(), "EtcdMemberList", 1, codes.Internal) },
			met:    talosMet("EtcdMemberList", "fail")},

		// The Kubernetes API of the cluster.
		{system: "kube", kind: "error", phase: "plan", outcome: outcomeFails, net: "127.140.0.0/24",
			fault: "listing nodes answers 500, three times (every try of an observation)", existing: true,
			inject:  func(t *testing.T, e *cellEnv) { e.kube(t).Fail("list nodes", 3, 500) },
			met:     kubeMet("list nodes", "fail"),
			failure: `Kubernetes API does not answer`},
		{system: "kube", kind: "error", phase: "converge-health", outcome: outcomeRecovers, net: "127.141.0.0/24",
			fault: "listing nodes in the health barrier answers 500, twice", at: "health:",
			inject: func(t *testing.T, e *cellEnv) { e.kube(t).Fail("list nodes", 2, 500) },
			met:    kubeMet("list nodes", "fail")},
		{system: "kube", kind: "latency", phase: "converge-health", outcome: outcomeRecovers, net: "127.142.0.0/24",
			fault: "listing nodes in the health barrier answers 500 ms late, three times", at: "health:",
			inject: func(t *testing.T, e *cellEnv) { e.kube(t).Delay("list nodes", 3, 500*time.Millisecond) },
			met:    kubeMet("list nodes", "delay")},
		{system: "kube", kind: "hang", phase: "converge-health", outcome: outcomeFails, net: "127.143.0.0/24",
			fault: "listing nodes in the health barrier is accepted and never answered", at: "health:", boot: faultHangBoot,
			inject:  func(t *testing.T, e *cellEnv) { e.kube(t).Hang("list nodes", 1) },
			met:     kubeMet("list nodes", "hang"),
			failure: `waiting for the cluster to be healthy: .*deadline exceeded`},
		{system: "kube", kind: "reset", phase: "converge-health", outcome: outcomeRecovers, net: "127.144.0.0/24",
			fault: "listing nodes in the health barrier has its connection reset", at: "health:",
			inject: func(t *testing.T, e *cellEnv) { e.kube(t).ResetConn("list nodes", 1) },
			met:    kubeMet("list nodes", "reset")},
		{system: "kube", kind: "lost-reply", phase: "converge-health", outcome: outcomeRecovers, net: "127.145.0.0/24",
			fault: "listing nodes in the health barrier is answered, then its connection is reset", at: "health:",
			inject: func(t *testing.T, e *cellEnv) { e.kube(t).LoseReply("list nodes", 1) },
			met:    kubeMet("list nodes", "lost-reply")},
		{system: "kube", kind: "crash", phase: "converge-health", outcome: outcomeResumes, net: "127.146.0.0/24",
			fault: "the run dies right after the health barrier's first node listing",
			// The step after the barrier (the config ISO's removal) is
			// slowed, so that the run cannot end before the watcher
			// sees the listing and kills it, however loaded the machine;
			// within Proxmox's request timeout, so the next run passes.
			at:     "health:",
			inject: func(_ *testing.T, e *cellEnv) { e.lab.PVE.SetLatency("storage.content.delete", 1500*time.Millisecond) },
			crashed: func(e *cellEnv) bool {
				k, ok := e.lab.Kube(faultClusterName)
				if !ok {
					return false
				}
				for _, op := range k.Log() {
					if op.Key() == "list nodes" && op.Code == 200 && op.Fault == "" {
						return true
					}
				}
				return false
			}},
	}
}

// pveMet is met when a Proxmox request of op (any, for "*") met the
// fault: "fail" (the injected failure's answer), "hang", "reset" or
// "lost-reply".
func pveMet(op, fault string) func(*cellEnv, time.Duration) bool {
	return func(e *cellEnv, _ time.Duration) bool {
		for _, o := range e.lab.PVE.Log() {
			if (op == "*" || o.Name == op) && (o.Fault == fault || (fault == "fail" && o.Message == "injected failure")) {
				return true
			}
		}
		return false
	}
}

// talosMet is met when a call of method met the fault ("fail", "hang",
// "reset" or "lost-reply").
func talosMet(method, fault string) func(*cellEnv, time.Duration) bool {
	return func(e *cellEnv, _ time.Duration) bool {
		for _, o := range e.lab.Talos.Log() {
			if o.Short() == method && o.Fault == fault {
				return true
			}
		}
		return false
	}
}

// kubeMet is met when a Kubernetes request of op met the fault ("fail",
// "hang", "delay", "reset" or "lost-reply").
func kubeMet(op, fault string) func(*cellEnv, time.Duration) bool {
	return func(e *cellEnv, _ time.Duration) bool {
		k, ok := e.lab.Kube(faultClusterName)
		if !ok {
			return false
		}
		for _, o := range k.Log() {
			if o.Key() == op && o.Fault == fault {
				return true
			}
		}
		return false
	}
}

// tookAtLeast is met by a run that lasted at least d: the emulators do not
// log the latency they add, and a run that met it cannot be quicker.
func tookAtLeast(d time.Duration) func(*cellEnv, time.Duration) bool {
	return func(_ *cellEnv, took time.Duration) bool { return took >= d }
}

// faultTally counts the cells of one matrix run and logs the summary when
// they are all done.
type faultTally struct {
	tried, held atomic.Int32
	mu          sync.Mutex
	skipped     []string
}

func newFaultTally(t *testing.T, through string, cells int) *faultTally {
	tally := &faultTally{}
	t.Cleanup(func() {
		tally.mu.Lock()
		defer tally.mu.Unlock()
		slices.Sort(tally.skipped)
		t.Logf("fault matrix (%s): %d cells, %d faults tried, %d held; %d known not to hold (skipped): %s",
			through, cells, tally.tried.Load(), tally.held.Load(), len(tally.skipped), strings.Join(tally.skipped, ", "))
	})
	return tally
}

// cell runs one cell as a parallel subtest and counts it.
func (tally *faultTally) cell(t *testing.T, c faultCell, run func(t *testing.T, c faultCell)) {
	t.Run(c.name(), func(t *testing.T) {
		t.Parallel()
		if c.skip != "" {
			tally.mu.Lock()
			tally.skipped = append(tally.skipped, c.name())
			tally.mu.Unlock()
			t.Skip("does not hold yet: " + c.skip)
		}
		tally.tried.Add(1)
		t.Cleanup(func() {
			if !t.Failed() {
				tally.held.Add(1)
			}
		})
		run(t, c)
	})
}

// TestFaultMatrixEngine runs the engine cells.
func TestFaultMatrixEngine(t *testing.T) {
	t.Parallel()
	cells := engineCells()
	tally := newFaultTally(t, "engine", len(cells))
	for _, c := range cells {
		tally.cell(t, c, runEngineCell)
	}
}

// faultIdentities are cluster identities minted once per test binary:
// minting is the slowest step of a first build, and most cells start from
// an identity that exists, which is also the case the identity checks are
// about. Cells that need a run to mint one say fresh.
var faultIdentities = sync.OnceValues(func() ([2][]byte, error) {
	var out [2][]byte
	for i := range out {
		b, err := machineconfig.NewSecrets("v1.13.8")
		if err != nil {
			return out, err
		}
		if out[i], err = machineconfig.EncodeSecrets(b); err != nil {
			return out, err
		}
	}
	return out, nil
})

func faultIdentity(t *testing.T, i int) []byte {
	t.Helper()
	ids, err := faultIdentities()
	if err != nil {
		t.Fatal(err)
	}
	return ids[i]
}

// oneControlPlane turns the lab's three-control-plane cluster.yaml into a
// one-control-plane one, to keep the cells small.
func oneControlPlane(t *testing.T, yaml string) string {
	t.Helper()
	out := strings.Replace(yaml, "controlplane:\n  count: 3\n", "controlplane:\n  count: 1\n", 1)
	if out == yaml {
		t.Fatal("the lab's cluster.yaml no longer has the control plane count this test changes")
	}
	return out
}

// setWorkers sets the worker pool's count in a cluster.yaml.
func setWorkers(t *testing.T, yaml string, n int) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(workers:\n  worker:\n    count: )\d+$`)
	if !re.MatchString(yaml) {
		t.Fatal("the lab's cluster.yaml no longer has the worker pool this test changes")
	}
	return re.ReplaceAllString(yaml, fmt.Sprintf("${1}%d", n))
}

// cellEnv is what an engine cell works with.
type cellEnv struct {
	lab *lab.Lab
	dir string
	net netip.Prefix
}

// node is the address of the first machine the lab boots: the control
// plane.
func (e *cellEnv) node() netip.Addr {
	a := e.net.Masked().Addr()
	for range 100 {
		a = a.Next()
	}
	return a
}

// kube is the cluster's Kubernetes API emulator, once bootstrapped (the
// lab starts it right after the bootstrap; a loaded machine may take a
// moment).
func (e *cellEnv) kube(t *testing.T) *kube.Server {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if k, ok := e.lab.Kube(faultClusterName); ok {
			return k
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster has no Kubernetes API yet")
		}
	}
}

// writeYAML rewrites cluster.yaml.
func (e *cellEnv) writeYAML(t *testing.T, yaml string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, spec.ClusterFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *cellEnv) readYAML(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.dir, spec.ClusterFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// identity returns talossecrets.yaml, nil when there is none.
func (e *cellEnv) identity(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.dir, reconcile.TalosSecretsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// triggerWriter collects progress and runs fire once, before the run goes
// on, when the text so far contains at.
type triggerWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	at    string
	fire  func()
	fired bool
}

func (w *triggerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	fire := !w.fired && w.at != "" && w.fire != nil && strings.Contains(w.buf.String(), w.at)
	if fire {
		w.fired = true
	}
	w.mu.Unlock()
	if fire {
		w.fire()
	}
	return len(p), nil
}

func (w *triggerWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// faultEngine builds the engine of a cluster directory as converge does
// (engineFor), with the short bounds of the fault matrix. Progress and the
// provider's log go to out.
func faultEngine(t *testing.T, dir string, out *triggerWriter, boot time.Duration) *reconcile.Engine {
	t.Helper()
	var stderr bytes.Buffer
	c, warnings, err := loadClusterQuiet(dir, &stderr, "text")
	if err != nil {
		t.Fatalf("loading the cluster: %v\n%s", err, stderr.String())
	}
	log := slog.New(slog.NewTextHandler(out, nil))
	p, err := proxmox.New(c, os.DirFS(dir), log, proxmox.WithRequestTimeout(faultRequestTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if boot == 0 {
		boot = faultBootTimeout
	}
	return &reconcile.Engine{Cluster: c, Warnings: warnings, State: state.Local{Dir: dir}, Key: dir, Infra: p,
		Progress: out, Log: log, BootTimeout: boot, PollInterval: faultPollInterval, ReportEvery: time.Second,
		Holder: "taloscluster converge"}
}

// runEngineCell runs one engine cell: the faulted run, its designed
// outcome, a clean run, and the invariants.
func runEngineCell(t *testing.T, c faultCell) {
	e := &cellEnv{lab: startLab(t, c.net), dir: t.TempDir(), net: netip.MustParsePrefix(c.net)}
	if err := e.lab.WriteCluster(e.dir, lab.Cluster{Name: faultClusterName, Workers: 0, Bridge: "vmbr0"}); err != nil {
		t.Fatal(err)
	}
	e.writeYAML(t, oneControlPlane(t, e.readYAML(t)))
	if !c.fresh {
		if err := state.CreateFile(filepath.Join(e.dir, reconcile.TalosSecretsFile), faultIdentity(t, 0), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var outputs []string // everything a person or a log would see

	if c.existing {
		// The plan phase: a built cluster, and a change to plan.
		out := &triggerWriter{}
		if err := faultEngine(t, e.dir, out, 0).Converge(t.Context()); err != nil {
			t.Fatalf("building the cluster before the fault: %v\n%s", err, out.String())
		}
		outputs = append(outputs, out.String())
		e.writeYAML(t, setWorkers(t, e.readYAML(t), 1))
	}
	before := e.identity(t)

	// The faulted run.
	out := &triggerWriter{at: c.at}
	if c.inject != nil {
		if c.at == "" {
			c.inject(t, e)
		} else {
			out.fire = func() { c.inject(t, e) }
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), faultRunLimit)
	defer cancel()
	runCtx, crash := context.WithCancelCause(ctx)
	defer crash(nil)
	var crashMu sync.Mutex
	crashed := false
	var lockLeft []byte // what the lock file held when the run died
	if c.crashed != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			for !c.crashed(e) {
				select {
				case <-done:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
			crashMu.Lock()
			defer crashMu.Unlock()
			lockLeft, _ = os.ReadFile(filepath.Join(e.dir, state.LockFile))
			crashed = true
			crash(errors.New("the process died"))
		}()
	}
	eng := faultEngine(t, e.dir, out, c.boot)
	started := time.Now()
	var err error
	var p *plan.Plan
	if c.existing {
		p, err = eng.Plan(runCtx)
	} else {
		err = eng.Converge(runCtx)
	}
	took := time.Since(started)
	if ctx.Err() != nil {
		t.Fatalf("the faulted run only ended at the test's own limit of %s: it hung\n%s", faultRunLimit, out.String())
	}
	if c.met != nil {
		// An emulator logs a request the client gave up on once it
		// notices: give it a moment.
		met := c.met(e, took)
		for wait := time.Now().Add(5 * time.Second); !met && time.Now().Before(wait); met = c.met(e, took) {
			time.Sleep(10 * time.Millisecond)
		}
		if !met {
			t.Fatalf("the faulted run never met the fault (%s)\n%s", c.fault, out.String())
		}
	}
	if c.at != "" && c.inject != nil && !out.fired {
		t.Fatalf("the run never reached %q, where the fault was to be injected\n%s", c.at, out.String())
	}
	outputs = append(outputs, out.String())
	if err != nil {
		outputs = append(outputs, err.Error())
	}
	crashMu.Lock()
	died, left := crashed, lockLeft
	crashMu.Unlock()
	checkOutcome(t, c, out.String(), err, p, died)
	if died {
		// A process that died leaves its lock file behind (the kernel
		// drops only the lock itself).
		if left == nil {
			t.Fatalf("the run held no %s when it died", state.LockFile)
		}
		if err := os.WriteFile(filepath.Join(e.dir, state.LockFile), left, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	noDuplicateVMs(t, e.lab)
	if after := e.identity(t); before != nil && !bytes.Equal(after, before) {
		t.Errorf("the faulted run changed %s", reconcile.TalosSecretsFile)
	} else if before == nil {
		before = after // minted by the faulted run: kept from now on
	}

	// The clean run: it converges, and a plan after it has nothing to do.
	clean := &triggerWriter{}
	if err := faultEngine(t, e.dir, clean, 0).Converge(t.Context()); err != nil {
		t.Fatalf("the clean run after the fault failed: %v\nfaulted run:\n%s\nclean run:\n%s\nlab events:\n%s", err, out.String(), clean.String(), labEvents(e.lab))
	}
	outputs = append(outputs, clean.String())
	code, stdout, stderr := cli(t, "plan", "-C", e.dir)
	outputs = append(outputs, stdout, stderr)
	if code != 0 || !strings.Contains(stdout, "Nothing to change; 1 warning:\nwarning: cluster.yaml:13: controlplane.count: single controlplane, no HA") {
		t.Errorf("plan after the clean run: exit %d, want 0 and nothing to change but the one warning\n%s%s", code, stdout, stderr)
	}
	if before == nil {
		t.Fatalf("no %s after the clean run", reconcile.TalosSecretsFile)
	}
	if after := e.identity(t); !bytes.Equal(after, before) {
		t.Errorf("%s was regenerated or changed", reconcile.TalosSecretsFile)
	}
	checkWorld(t, e.lab, e.dir)
	checkNoSecrets(t, e.lab, e.dir, outputs)
}

// checkOutcome checks the faulted run against the cell's designed outcome.
func checkOutcome(t *testing.T, c faultCell, out string, err error, p *plan.Plan, crashed bool) {
	t.Helper()
	switch c.outcome {
	case outcomeRecovers, outcomeIncomplete:
		if err != nil {
			t.Fatalf("the run failed, want it to recover: %v\n%s", err, out)
		}
		if p != nil {
			if len(p.Refusals) > 0 {
				t.Fatalf("the plan has refusals, want it to recover: %s", p.Refusals[0].Reason)
			}
			if !slices.ContainsFunc(p.Changes, func(ch plan.Change) bool {
				return ch.Action == plan.ActionCreate && ch.Resource.Name == faultClusterName+"-worker-01"
			}) {
				t.Fatalf("the plan does not create the new worker: %s", p.Summary())
			}
		}
		if c.outcome == outcomeIncomplete {
			if p == nil || !p.Incomplete || !slices.ContainsFunc(p.IncompleteReasons, regexp.MustCompile(c.failure).MatchString) {
				var reasons []string
				if p != nil {
					reasons = p.IncompleteReasons
				}
				t.Fatalf("the plan is not incomplete with a reason that says %q: %q", c.failure, reasons)
			}
		}
	case outcomeFails:
		why := ""
		switch {
		case err != nil:
			why = err.Error()
		case p != nil && len(p.Refusals) > 0:
			for _, r := range p.Refusals {
				why += r.Resource.String() + ": " + r.Reason + "\n"
			}
		default:
			t.Fatalf("the run succeeded, want it to fail\n%s", out)
		}
		if errors.Is(err, context.Canceled) {
			t.Fatalf("the run was cancelled, want it to fail on its own: %v", err)
		}
		if !regexp.MustCompile(c.failure).MatchString(why) {
			t.Fatalf("the failure does not say %q:\n%s", c.failure, why)
		}
	case outcomeResumes:
		if !crashed {
			t.Fatalf("the mutation the crash waits for never happened (run error: %v)\n%s", err, out)
		}
		if err == nil {
			t.Fatalf("the run ended well although its process died midway\n%s", out)
		}
	default:
		t.Fatalf("unknown outcome %q", c.outcome)
	}
}

// noDuplicateVMs checks that no two VMs share a name.
func noDuplicateVMs(t *testing.T, l *lab.Lab) {
	t.Helper()
	seen := map[string]int{}
	for _, vm := range l.PVE.VMs() {
		if id, ok := seen[vm.Name]; ok {
			t.Errorf("VMs %d and %d are both named %s", id, vm.ID, vm.Name)
		}
		seen[vm.Name] = vm.ID
	}
}

// checkWorld checks the lab against the cluster directory: exactly one
// running VM per desired machine and no other, no config ISO or disk left
// behind, the Talos nodes and etcd members as desired, and every machine a
// Ready Kubernetes node.
func checkWorld(t *testing.T, l *lab.Lab, dirs ...string) {
	t.Helper()
	want := map[string]bool{}
	cps := map[string][]string{}
	for _, dir := range dirs {
		c, _, err := spec.Load(dir, spec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range machineconfig.Machines(c) {
			want[m.Hostname] = true
			if m.Role() == spec.RoleControlPlane {
				cps[c.Name] = append(cps[c.Name], m.Hostname)
			}
		}
	}
	checkMachines(t, l, want, cps)
}

// checkMachines is checkWorld for the desired hostnames and each
// cluster's control planes.
func checkMachines(t *testing.T, l *lab.Lab, want map[string]bool, cps map[string][]string) {
	t.Helper()
	vms := map[string]int{}
	ids := map[int]bool{}
	for _, vm := range l.PVE.VMs() {
		vms[vm.Name]++
		ids[vm.ID] = true
		switch {
		case !want[vm.Name]:
			t.Errorf("VM %d (%s) is not a desired machine: orphaned", vm.ID, vm.Name)
		case !vm.Running:
			t.Errorf("VM %s is not running", vm.Name)
		}
	}
	for name := range want {
		if vms[name] != 1 {
			t.Errorf("%d VMs named %s, want exactly 1", vms[name], name)
		}
	}
	for _, v := range l.PVE.Volumes() {
		if strings.Contains(v.VolID, "cidata-") {
			t.Errorf("config ISO %s on %s left behind", v.VolID, v.Node)
		}
		if v.Content == "images" && !ids[v.VMID] {
			t.Errorf("disk %s of VM %d left behind", v.VolID, v.VMID)
		}
	}
	nodes := map[string]int{}
	for _, n := range l.Talos.Nodes() {
		if n.Hostname == "" || !n.Up {
			continue
		}
		nodes[n.Hostname]++
	}
	for name := range want {
		if nodes[name] != 1 {
			t.Errorf("%d running Talos nodes named %s, want exactly 1", nodes[name], name)
		}
	}
	world := l.World()
	for cluster, planes := range cps {
		var cv *lab.ClusterView
		for i := range world.Clusters {
			if world.Clusters[i].Name == cluster {
				cv = &world.Clusters[i]
			}
		}
		if cv == nil || !cv.Bootstrapped {
			t.Errorf("cluster %s is not bootstrapped", cluster)
			continue
		}
		members := slices.Sorted(slices.Values(cv.EtcdMembers))
		if !slices.Equal(members, slices.Sorted(slices.Values(planes))) {
			t.Errorf("etcd members of %s are %v, want %v", cluster, members, planes)
		}
		for _, kn := range cv.KubeNodes {
			if !want[kn.Name] {
				t.Errorf("Kubernetes node %s of %s is not a desired machine", kn.Name, cluster)
			} else if !kn.Ready {
				t.Errorf("Kubernetes node %s of %s is not Ready", kn.Name, cluster)
			}
		}
	}
}

// identitySecrets returns the values no output may show of a cluster
// directory: its credentials and everything in its identity.
func identitySecrets(t *testing.T, dir string, identity []byte) []string {
	t.Helper()
	c, _, err := spec.Load(dir, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := machineconfig.ParseSecrets(reconcile.TalosSecretsFile, identity)
	if err != nil {
		t.Fatal(err)
	}
	out := secretStrings(c, b)
	if len(out) < 5 {
		t.Fatalf("only %d secret values found in the identity: the check would prove little", len(out))
	}
	return out
}

// checkNoSecrets checks that no output holds the Proxmox token or a value
// of the cluster identity.
func checkNoSecrets(t *testing.T, l *lab.Lab, dir string, outputs []string) {
	t.Helper()
	secrets := append([]string{l.TokenSecret}, identitySecrets(t, dir, readFile(t, filepath.Join(dir, reconcile.TalosSecretsFile)))...)
	all := strings.Join(outputs, "\n")
	if all == "" {
		t.Fatal("no output to check for secrets")
	}
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("a secret value (%d characters) is in the output", len(s))
		}
	}
}

// labEvents is the lab's own log, for failure messages.
func labEvents(l *lab.Lab) string {
	var b strings.Builder
	for _, ev := range l.Events() {
		fmt.Fprintf(&b, "%s %s %s %s\n", ev.Time.Format("15:04:05.000"), ev.What, ev.Subject, ev.Detail)
	}
	return b.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFaultMatrixDocIsCurrent checks that docs/reliability.md prints the
// matrix the tests run: the same cells, each with its fault, designed
// outcome and whether it holds, and the summary line's counts.
// TestThreatTableNamesTests keeps the threat table of docs/reliability.md
// honest: every test a row names exists in the repository.
func TestThreatTableNamesTests(t *testing.T) {
	t.Parallel()
	checkTableNamesTests(t, "docs/reliability.md", "## Hostile pull requests: the threat table", "attack", 5, 3)
}

// TestSafetyTableNamesTests: every rule of docs/safety.md names a test
// that exists.
func TestSafetyTableNamesTests(t *testing.T) {
	t.Parallel()
	checkTableNamesTests(t, "docs/safety.md", "## The rules and their proofs", "rule", 4, 2)
	checkTableNamesTests(t, "docs/safety.md", "## The rules of rollouts and their proofs", "rule", 4, 2)
	checkTableNamesTests(t, "docs/safety.md", "## Remediation", "rule", 4, 2)
	checkTableNamesTests(t, "docs/openstack.md", "## The rules and their proofs", "rule", 4, 2)
}

// checkTableNamesTests checks that each row of the table under heading in
// doc (columns cells wide, counting the empty ones the outer pipes make)
// names, in its column col, a test that is defined somewhere in the
// repository. A row may instead point at a package's tests in words.
func checkTableNamesTests(t *testing.T, doc, heading, header string, cells, col int) {
	t.Helper()
	text := string(readFile(t, "../../"+doc))
	_, table, ok := strings.Cut(text, heading)
	if !ok {
		t.Fatalf("%s has no %q", doc, heading)
	}
	if next := strings.Index(table, "\n## "); next >= 0 {
		table = table[:next]
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(readFile(t, path)), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, l := range strings.Split(table, "\n") {
		parts := strings.Split(l, "|")
		if len(parts) != cells || strings.HasPrefix(strings.TrimSpace(parts[1]), "---") || strings.TrimSpace(parts[1]) == header {
			continue
		}
		rows++
		names := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(parts[col], -1)
		if len(names) == 0 && !strings.Contains(parts[col], "tests in `") {
			t.Errorf("%s: row %q names no test", doc, strings.TrimSpace(parts[1]))
		}
		for _, n := range names {
			if !defined[n[1]] {
				t.Errorf("%s: row %q names %s, which does not exist", doc, strings.TrimSpace(parts[1]), n[1])
			}
		}
	}
	if rows == 0 {
		t.Fatalf("%s: the table has no rows", doc)
	}
}

func TestFaultMatrixDocIsCurrent(t *testing.T) {
	t.Parallel()
	doc := string(readFile(t, "../../docs/reliability.md"))
	type row struct{ fault, outcome, held string }
	want := map[string]row{}
	holding := 0
	for through, cells := range map[string][]faultCell{"engine": engineCells(), "agent": agentCells()} {
		for _, c := range cells {
			held := "yes"
			if c.skip != "" {
				held = "no"
			} else {
				holding++
			}
			want[through+"/"+c.name()] = row{c.fault, c.outcome, held}
		}
	}
	got := map[string]row{}
	line := regexp.MustCompile(`^\|\s*(engine|agent)\s*\|\s*([\w-]+)\s*\|\s*([\w-]+)\s*\|\s*([\w-]+)\s*\|\s*([^|]*?)\s*\|\s*(\w+)\s*\|\s*(yes|no)\b[^|]*\|\s*$`)
	for _, l := range strings.Split(doc, "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := m[1] + "/" + m[2] + "/" + m[3] + "/" + m[4]
		if _, dup := got[name]; dup {
			t.Errorf("docs/reliability.md lists %s twice", name)
		}
		got[name] = row{m[5], m[6], m[7]}
	}
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("docs/reliability.md lacks the cell %s", name)
		case g != w:
			t.Errorf("docs/reliability.md says of %s\n  %+v\nthe matrix says\n  %+v", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/reliability.md lists %s, which the matrix does not run", name)
		}
	}
	summary := regexp.MustCompile(`(\d+) faults tried, (\d+) held`).FindStringSubmatch(doc)
	if summary == nil || summary[1] != fmt.Sprint(len(want)) || summary[2] != fmt.Sprint(holding) {
		t.Errorf("docs/reliability.md's summary is %q, want \"%d faults tried, %d held\"", summary, len(want), holding)
	}
}
