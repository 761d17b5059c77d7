package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// restarting returns the node a step restarts (a reboot, an install, a
// provider's power cycle), whose boot ID is read before it runs.
func (r *run) restarting(st plan.Change) (nodeRef, bool) {
	switch op := st.Op.(type) {
	case rebootNode:
		r.mu.Lock()
		self := r.selfReboot[op.hostname]
		r.mu.Unlock()
		return op.nodeRef, !self
	case installTalos:
		return op.nodeRef, true
	}
	if st.Action == plan.ActionRestart && st.Resource.Kind == plan.KindMachine {
		ref, ok := r.refs[st.Resource.Name]
		return ref, ok
	}
	return nodeRef{}, false
}

// readBoot reads and keeps the boot ID of a node about to be restarted.
func (r *run) readBoot(ctx context.Context, ref nodeRef) (string, error) {
	tc, err := r.dial(ctx, ref.endpoints)
	if err != nil {
		return "", err
	}
	id, err := tc.BootID(ctx, ref.addr)
	if err != nil {
		return "", retry.Transient(fmt.Errorf("reading the boot ID of %s before restarting it: %w", ref.hostname, err))
	}
	r.mu.Lock()
	r.boots[ref.hostname] = id
	r.mu.Unlock()
	return id, nil
}

func (r *run) bootOf(hostname string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.boots[hostname]
}

// clusterHealthy waits until the cluster passes the health gate before a
// node goes down.
func (r *run) clusterHealthy(ctx context.Context, phase plan.Phase, op clusterHealthy) error {
	tc, err := r.dial(ctx, op.endpoints)
	if err != nil {
		return err
	}
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	return r.await(ctx, phase, "the cluster's health before "+strings.Join(op.before, ", ")+" goes down", func(ctx context.Context) (string, bool) {
		return r.healthOf(ctx, tc, kc, op.gate, op.addrs, op.endpoints)
	})
}

// await polls check until it passes, within the boot timeout; an API that
// keeps answering with errors ends it within the read budget.
func (r *run) await(ctx context.Context, phase plan.Phase, what string, check func(context.Context) (why string, unread bool)) error {
	e := r.e
	ctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	lastReport := time.Now()
	var unreadSince time.Time
	for {
		why, unread := check(ctx)
		if why == "" {
			return nil
		}
		switch {
		case !unread:
			unreadSince = time.Time{}
		case unreadSince.IsZero():
			unreadSince = time.Now()
		case time.Since(unreadSince) >= e.readBudget():
			return retry.Transient(fmt.Errorf("waiting for %s: it could not be read for %s: %s", what, e.readBudget().Round(time.Second), why))
		}
		if time.Since(lastReport) >= e.reportEvery() {
			lastReport = time.Now()
			e.say(phase, "still waiting for %s: %s", what, why)
		}
		if err := retry.Sleep(ctx, e.poll()); err != nil {
			return fmt.Errorf("waiting for %s: %s: %w", what, why, err)
		}
	}
}

// healthOf reads the cluster fresh and says why it does not pass the gate
// g, "" when it does.
func (r *run) healthOf(ctx context.Context, tc *talos.Client, kc *kube.Client, g healthGate, addrs map[string]string, cps []string) (string, bool) {
	f := healthFacts{talos: map[string]error{}}
	if slices.ContainsFunc(g.machines, func(h string) bool { return addrs[h] == "" }) {
		// A machine reported no address when the plan was made (a node
		// that was rebooting): the provider is asked again.
		if fresh, err := r.addresses(ctx); err == nil {
			merged := maps.Clone(addrs)
			for h, a := range fresh {
				if merged[h] == "" {
					merged[h] = a
				}
			}
			addrs = merged
		}
	}
	up := map[string]bool{}
	for _, h := range g.machines {
		addr, ok := addrs[h]
		if !ok {
			f.talos[h] = errors.New("its address is not known")
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		_, err := tc.Version(cctx, addr)
		cancel()
		if err != nil {
			f.talos[h] = err
		}
		up[addr] = err == nil
	}
	for _, h := range g.controlPlanes {
		addr, ok := addrs[h]
		if _, down := f.talos[h]; !ok || down {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		s, found, err := tc.Service(cctx, addr, "etcd")
		cancel()
		switch {
		case err != nil:
			f.talos[h] = fmt.Errorf("its etcd service could not be read: %w", err)
		case !found || s.State != "Running" || !s.Healthy:
			f.talos[h] = fmt.Errorf("its etcd is %s, not running healthy", orText(s.State, "not there"))
		}
	}
	f.nodes, f.nodesErr = kc.Nodes(ctx)
	f.membersErr = errors.New("no control plane has an address")
	for _, addr := range cps {
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		f.members, f.membersErr = tc.EtcdMembers(cctx, addr)
		cancel()
		if f.membersErr == nil {
			break
		}
		f.membersAnswered = f.membersAnswered || up[addr]
	}
	return g.unmet(f)
}

// applyConfig gives a node its config, live or staged for its next boot.
func (r *run) applyConfig(ctx context.Context, phase plan.Phase, op applyConfig) error {
	tc, err := r.dial(ctx, op.endpoints)
	if err != nil {
		return err
	}
	details, err := tc.ApplyConfig(ctx, op.addr, op.config, !op.staged)
	switch {
	case err != nil && !op.staged && talos.NotLive(err):
		return retry.Terminal(fmt.Errorf("%s refused to apply its new config live, although this engine found only changes Talos applies live; nothing was restarted: %w", op.hostname, err))
	case err != nil && talos.Unreachable(err):
		return retry.Transient(err)
	case err != nil:
		return err
	}
	r.e.say(phase, "%s: %s", op.hostname, firstLine(details))
	return nil
}

// installTalos installs the new Talos for the node's next boot.
func (r *run) installTalos(ctx context.Context, phase plan.Phase, op installTalos) error {
	tc, err := r.dial(ctx, op.endpoints)
	if err != nil {
		return err
	}
	r.e.say(phase, "installing %s on %s", op.image, op.hostname)
	legacy, err := tc.Install(ctx, op.addr, op.image)
	if err != nil {
		if talos.Unreachable(err) {
			return retry.Transient(err)
		}
		return err
	}
	if legacy {
		r.mu.Lock()
		r.selfReboot[op.hostname] = true
		r.mu.Unlock()
		r.e.say(phase, "%s has no lifecycle service: it was upgraded with the older call and reboots by itself", op.hostname)
	}
	return nil
}

// reboot asks a node to reboot, unless it reboots by itself.
func (r *run) reboot(ctx context.Context, phase plan.Phase, op rebootNode) error {
	r.mu.Lock()
	self := r.selfReboot[op.hostname]
	delete(r.selfReboot, op.hostname)
	r.mu.Unlock()
	if self {
		return nil
	}
	tc, err := r.dial(ctx, op.endpoints)
	if err != nil {
		return err
	}
	if err := tc.Reboot(ctx, op.addr); err != nil {
		if talos.Unreachable(err) {
			return retry.Transient(err)
		}
		return err
	}
	r.e.say(phase, "asked %s to reboot", op.hostname)
	return nil
}

// nodeBack waits until a node went down and came back healthy. A node
// that still runs the boot it ran when its restart was asked after the
// reboot grace never went down: the rollout stops there.
func (r *run) nodeBack(ctx context.Context, phase plan.Phase, op nodeBack) error {
	e := r.e
	boot := op.boot
	if boot == "" {
		boot = r.bootOf(op.hostname)
	}
	tc, err := r.dial(ctx, op.endpoints)
	if err != nil {
		return err
	}
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	asked := time.Now()
	var never error
	err = r.await(ctx, phase, op.hostname+" to go down and come back", func(ctx context.Context) (string, bool) {
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		id, err := tc.BootID(cctx, op.addr)
		cancel()
		switch {
		case err != nil:
			return "its Talos API does not answer (" + firstLine(err.Error()) + ")", false
		case boot != "" && id == boot && time.Since(asked) >= e.rebootGrace():
			never = fmt.Errorf("%s still runs the boot it ran when its restart was asked, %s later: it never went down. The rollout stops here rather than move on past a node that may never come back; look at the node", op.hostname, e.rebootGrace())
			return "", false
		case boot != "" && id == boot:
			return "it has not gone down yet", false
		}
		return "", false
	})
	if never != nil {
		return retry.Terminal(never)
	}
	if err != nil {
		return err
	}
	if op.version != "" {
		var running string
		err := r.await(ctx, phase, "the Talos version of "+op.hostname, func(ctx context.Context) (string, bool) {
			cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
			v, err := tc.Version(cctx, op.addr)
			cancel()
			if err != nil {
				return "its version could not be read: " + firstLine(err.Error()), answeredWithError(err)
			}
			running = v
			return "", false
		})
		if err != nil {
			return err
		}
		if !sameVersion(running, op.version) {
			return retry.Terminal(fmt.Errorf("%s came back running Talos %s, not %s: the new system did not boot and Talos went back to the previous one. The rollout stops here; look at the node's console", op.hostname, running, op.version))
		}
	}
	e.say(phase, "%s is back; waiting for it to be healthy", op.hostname)
	if err := r.await(ctx, phase, op.hostname+" to be healthy again", func(ctx context.Context) (string, bool) {
		return r.nodeHealth(ctx, tc, kc, op)
	}); err != nil {
		return err
	}
	return r.restarted(ctx, op.hostname)
}

// restarted closes the journal's restarts of a node that is back and
// healthy, this run's and an interrupted one's.
func (r *run) restarted(ctx context.Context, hostname string) error {
	e := r.e
	if e.Journal == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	open, err := e.Journal.Open(ctx, e.Key)
	if err != nil {
		return fmt.Errorf("reading the run journal: %w", err)
	}
	for _, en := range open {
		if en.Target == hostname && en.Boot != "" {
			if err := e.Journal.Done(ctx, e.Key, en.ID, nil); err != nil {
				return fmt.Errorf("recording that %s is back: %w", hostname, err)
			}
		}
	}
	return nil
}

// nodeHealth says why a node that came back is not healthy yet, "" when
// it is: its services run, its node is Ready, and a control plane is an
// etcd voter (read from the node itself) with the whole cluster healthy.
func (r *run) nodeHealth(ctx context.Context, tc *talos.Client, kc *kube.Client, op nodeBack) (string, bool) {
	services := []string{"kubelet"}
	if op.controlPlane {
		services = append(services, "etcd")
	}
	for _, id := range services {
		cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
		s, ok, err := tc.Service(cctx, op.addr, id)
		cancel()
		switch {
		case err != nil:
			return "its services could not be listed: " + firstLine(err.Error()), answeredWithError(err)
		case !ok:
			return "it runs no " + id + " service yet", false
		case s.State != "Running" || !s.Healthy:
			return fmt.Sprintf("its %s service is %s, not healthy yet", id, s.State), false
		}
	}
	n, ok, err := kc.Node(ctx, op.hostname)
	switch {
	case err != nil:
		return "its node could not be read: " + firstLine(err.Error()), answeredWithError(err)
	case !ok:
		return "it has no Kubernetes node yet", false
	case !n.Ready:
		return "its node is not Ready yet", false
	}
	if !op.controlPlane {
		return "", false
	}
	cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
	members, err := tc.EtcdMembers(cctx, op.addr)
	cancel()
	if err != nil {
		return "its etcd members could not be read from it: " + firstLine(err.Error()), answeredWithError(err)
	}
	voter := false
	for _, m := range members {
		if m.Is(op.hostname, op.addr) {
			voter = !m.Learner
		}
	}
	if !voter {
		return "it is not an etcd voter yet", false
	}
	return r.healthOf(ctx, tc, kc, op.gate, op.addrs, op.endpoints)
}

// applyLive gives a node a config whose every change applies live, and
// returns the Kubernetes client the wait that follows reads with.
func (r *run) applyLive(ctx context.Context, ref nodeRef, config []byte) (*kube.Client, error) {
	tc, err := r.dial(ctx, ref.endpoints)
	if err != nil {
		return nil, err
	}
	kc, err := r.kube(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tc.ApplyConfig(ctx, ref.addr, config, true); err != nil {
		if talos.Unreachable(err) {
			return nil, retry.Transient(err)
		}
		return nil, err
	}
	return kc, nil
}

// setComponent moves one control-plane component and waits for its pod.
func (r *run) setComponent(ctx context.Context, phase plan.Phase, op setComponent) error {
	kc, err := r.applyLive(ctx, op.nodeRef, op.config)
	if err != nil {
		return err
	}
	return r.await(ctx, phase, fmt.Sprintf("%s on %s to run %s", op.component, op.hostname, op.version), func(ctx context.Context) (string, bool) {
		c, err := kc.ControlPlaneComponent(ctx, op.component, op.hostname)
		switch {
		case err != nil:
			return firstLine(err.Error()), answeredWithError(err)
		case !c.Found:
			return "its pod is not there", false
		case !sameVersion(kube.ImageTag(c.Image), op.version):
			return "its pod runs " + c.Image, false
		case !c.Ready:
			return "its pod is not Ready", false
		}
		return "", false
	})
}

// setKubeProxy moves kube-proxy and waits for its rollout.
func (r *run) setKubeProxy(ctx context.Context, phase plan.Phase, op setKubeProxy) error {
	kc, err := r.kube(ctx)
	if err != nil {
		return err
	}
	st, err := kc.KubeProxyState(ctx)
	if err != nil {
		return err
	}
	if !st.Found {
		return retry.Terminal(fmt.Errorf("the machine configs run kube-proxy, but the DaemonSet kube-system/kube-proxy does not exist: it was removed behind the cluster's back"))
	}
	if st.Image != op.image {
		if err := kc.SetKubeProxyImage(ctx, op.image); err != nil {
			return err
		}
	}
	return r.await(ctx, phase, "kube-proxy to run "+op.version, func(ctx context.Context) (string, bool) {
		st, err := kc.KubeProxyState(ctx)
		switch {
		case err != nil:
			return firstLine(err.Error()), answeredWithError(err)
		case !st.RolledOut:
			return st.Progress, false
		}
		return "", false
	})
}

// setKubelet gives a node its config at the new version and waits for
// its kubelet.
func (r *run) setKubelet(ctx context.Context, phase plan.Phase, op setKubelet) error {
	kc, err := r.applyLive(ctx, op.nodeRef, op.config)
	if err != nil {
		return err
	}
	return r.await(ctx, phase, fmt.Sprintf("the kubelet of %s to run %s", op.hostname, op.version), func(ctx context.Context) (string, bool) {
		n, ok, err := kc.Node(ctx, op.hostname)
		switch {
		case err != nil:
			return firstLine(err.Error()), answeredWithError(err)
		case !ok:
			return "its node is gone", false
		case !sameVersion(n.KubeletVersion, op.version):
			return "its kubelet reports " + n.KubeletVersion, false
		case !n.Ready:
			return "its node is not Ready", false
		}
		return "", false
	})
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// moveEndpoint waits until a control plane serves a kubeconfig for the
// new endpoint and the API answers there, then stores it; later steps use
// it.
func (r *run) moveEndpoint(ctx context.Context, phase plan.Phase, op moveEndpoint) error {
	tc, err := r.dial(ctx, op.endpoints)
	if err != nil {
		return err
	}
	var data []byte
	err = r.await(ctx, phase, "the Kubernetes API to answer at "+op.endpoint, func(ctx context.Context) (string, bool) {
		var why []string
		for _, addr := range op.endpoints {
			cctx, cancel := context.WithTimeout(ctx, ObserveTimeout)
			got, err := tc.Kubeconfig(cctx, addr)
			cancel()
			if err != nil {
				why = append(why, firstLine(err.Error()))
				continue
			}
			if server := kube.Server(got); server != op.endpoint {
				why = append(why, addr+" serves a kubeconfig for "+server)
				continue
			}
			kc, err := kube.New(got)
			if err != nil {
				return err.Error(), true
			}
			cctx, cancel = context.WithTimeout(ctx, ObserveTimeout)
			_, err = kc.Version(cctx)
			cancel()
			if err != nil {
				why = append(why, "the API does not answer there yet: "+firstLine(err.Error()))
				continue
			}
			data = got
			return "", false
		}
		return strings.Join(why, "; "), false
	})
	if err != nil {
		return err
	}
	if data, err = forPeople(data, r.want.API); err != nil {
		return err
	}
	if err := r.e.State.Put(ctx, r.e.Key, KubeconfigFile, data); err != nil {
		return fmt.Errorf("storing the kubeconfig for %s: %w", op.endpoint, err)
	}
	r.mu.Lock()
	r.kc = nil
	r.mu.Unlock()
	r.e.say(phase, "wrote %s for %s", KubeconfigFile, op.endpoint)
	return nil
}

// awaitRestarted waits, before converge plans, until the nodes an
// interrupted run asked to restart answer the Talos API again (within the
// boot timeout): a plan made while one is still down would be incomplete
// for it. It changes nothing; what it cannot read, the plan shows.
func (e *Engine) awaitRestarted(ctx context.Context) {
	if e.Journal == nil {
		return
	}
	open, err := e.Journal.Open(ctx, e.Key)
	if err != nil {
		return
	}
	restarted := map[string]bool{}
	for _, en := range open {
		if en.Boot != "" {
			restarted[en.Target] = true
		}
	}
	bundle, err := e.bundle(ctx)
	if len(restarted) == 0 || err != nil || bundle == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, e.bootTimeout())
	defer cancel()
	// The provider may report no address for a node that is booting:
	// asked again until each restarted node that exists has one.
	var endpoints []string
	var addrs map[string]string
	for {
		inv, err := e.Infra.Observe(wctx)
		if err != nil {
			return
		}
		endpoints, addrs = nil, map[string]string{}
		missing := false
		for _, m := range inv.Machines() {
			if len(m.Addresses) == 0 {
				missing = missing || (restarted[m.Hostname] && m.Running)
				continue
			}
			if m.Role == spec.RoleControlPlane {
				endpoints = append(endpoints, m.Addresses[0].String())
			}
			if restarted[m.Hostname] {
				addrs[m.Hostname] = m.Addresses[0].String()
			}
		}
		if !missing {
			break
		}
		if retry.Sleep(wctx, e.poll()) != nil {
			return
		}
	}
	if len(endpoints) == 0 || len(addrs) == 0 {
		return
	}
	tc, err := talos.Dial(ctx, e.Cluster.Name, bundle, endpoints)
	if err != nil {
		return
	}
	defer tc.Close()
	for _, h := range slices.Sorted(maps.Keys(addrs)) {
		said := false
		for {
			cctx, ccancel := context.WithTimeout(wctx, ObserveTimeout)
			_, err := tc.Version(cctx, addrs[h])
			ccancel()
			if err == nil {
				break
			}
			if !said {
				e.say(plan.PhaseValidate, "an interrupted run restarted %s: waiting for it to answer before planning", h)
				said = true
			}
			if retry.Sleep(wctx, e.poll()) != nil {
				return
			}
		}
	}
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// prePull pulls a hop's images onto every node; a node that does not
// serve image pulls is skipped, as Talos's tooling does.
func (r *run) prePull(ctx context.Context, phase plan.Phase, op prePull) error {
	for _, on := range op.nodes {
		tc, err := r.dial(ctx, on.endpoints)
		if err != nil {
			return err
		}
		pulls := map[string]bool{}
		for _, img := range on.images {
			pulls[img] = false
		}
		if on.kubelet != "" {
			pulls[on.kubelet] = true
		}
		for _, img := range slices.Sorted(maps.Keys(pulls)) {
			pulled, err := tc.Pull(ctx, on.addr, img, pulls[img])
			if err != nil {
				if talos.Unreachable(err) {
					return retry.Transient(err)
				}
				return err
			}
			if !pulled {
				r.e.say(phase, "%s does not serve image pulls: its images are pulled when they start", on.hostname)
				break
			}
		}
	}
	return nil
}
