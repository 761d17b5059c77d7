package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// A Fleet shares the clusters of a repository among the replicas of the
// agent, with Leases in the KubeStore's namespace:
//
//   - every replica keeps a membership Lease, "taloscluster-replica-" and
//     its identity, so each knows how many replicas are alive;
//   - every cluster has an owner Lease, "taloscluster-owner-" and the
//     cluster's Slug; the replica holding it is the only one that plans
//     and converges the cluster and reports on it;
//   - each round (Sync) a replica renews its Leases, gives up the owner
//     Leases of idle clusters beyond its fair share (clusters divided by
//     live replicas, rounded up), and takes free or expired owner Leases up
//     to its share.
//
// A replica owns a cluster only while its last renewal is younger than
// two thirds of the Lease duration, so one that cannot renew stops
// starting work before another replica may take the Lease over. Work
// already running is guarded by the cluster's mutation lock (Lock), which
// stops a run whose Lease is lost; the next owner resumes from the
// journal.
type Fleet struct {
	s        *KubeStore
	identity string
	leaseFor time.Duration
	log      *slog.Logger

	mu       sync.Mutex
	clusters []string
	owned    map[string]time.Time // cluster -> last renewal, local clock
	replicas int
	live     map[string]bool // identities of the live replicas, as last listed
	lastErr  error
}

// Lease name prefixes and component labels of a Fleet.
const (
	ownerPrefix      = "taloscluster-owner-"
	replicaPrefix    = "taloscluster-replica-"
	ownerComponent   = "cluster-owner"
	replicaComponent = "agent-replica"
)

var identityRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// NewFleet returns the Fleet of s for the replica identity (a DNS label of
// at most 40 characters, for example the pod's name with a random suffix),
// with Leases of leaseFor (zero means DefaultLeaseDuration).
func (s *KubeStore) NewFleet(identity string, leaseFor time.Duration, log *slog.Logger) (*Fleet, error) {
	if !identityRE.MatchString(identity) {
		return nil, fmt.Errorf("replica identity %q: want a DNS label of at most 40 characters", identity)
	}
	if leaseFor <= 0 {
		leaseFor = DefaultLeaseDuration
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fleet{s: s, identity: identity, leaseFor: wholeSeconds(leaseFor), log: log, owned: map[string]time.Time{}, replicas: 1}, nil
}

// ReplicaIdentity makes a replica identity from a host name (a pod's
// name) and a random suffix, so a restarted process never reuses the
// Leases of its previous life.
func ReplicaIdentity(host string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(host) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		}
	}
	h := strings.Trim(b.String(), "-")
	if len(h) > 30 {
		h = strings.Trim(h[:30], "-")
	}
	id, _ := newID()
	if len(id) > 8 {
		id = id[:8]
	}
	if h == "" {
		return "agent-" + id
	}
	return h + "-" + id
}

// Identity returns the replica's identity.
func (f *Fleet) Identity() string { return f.identity }

// SetClusters sets the repository's clusters, those to share.
func (f *Fleet) SetClusters(paths []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clusters = slices.Clone(paths)
}

// Owns reports whether this replica owns cluster now.
func (f *Fleet) Owns(cluster string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.owned[cluster]
	return ok && time.Since(at) < f.leaseFor*2/3
}

// FleetStatus describes a replica's share of the fleet.
type FleetStatus struct {
	Identity string
	// Replicas counts the live replicas, this one included.
	Replicas int
	// Owned lists the clusters this replica owns.
	Owned []string
	// Error is the last failure of a round, if the last round failed.
	Error string
}

// Status returns the replica's share.
func (f *Fleet) Status() FleetStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FleetStatus{Identity: f.identity, Replicas: f.replicas}
	for c, at := range f.owned {
		if time.Since(at) < f.leaseFor*2/3 {
			st.Owned = append(st.Owned, c)
		}
	}
	slices.Sort(st.Owned)
	if f.lastErr != nil {
		st.Error = f.lastErr.Error()
	}
	return st
}

// Summary describes the replica's share in one line for people.
func (f *Fleet) Summary() string {
	st := f.Status()
	line := fmt.Sprintf("replica %s, one of %d; it plans and converges %d of the clusters", st.Identity, st.Replicas, len(st.Owned))
	if st.Error != "" {
		line += "; the last round of sharing failed: " + st.Error
	}
	return line
}

// Run runs a round every third of the Lease duration until ctx ends, then
// gives up every Lease the replica holds. busy says whether a cluster has
// work running, which keeps it from being given away.
func (f *Fleet) Run(ctx context.Context, busy func(cluster string) bool) {
	for {
		if err := f.Sync(ctx, busy); err != nil && ctx.Err() == nil {
			f.log.Warn("sharing the clusters among replicas", "replica", f.identity, "error", err)
		}
		t := time.NewTimer(f.leaseFor / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.s.timeout)
			f.Release(rctx)
			cancel()
			return
		case <-t.C:
		}
	}
}

// Sync runs one round: it renews the replica's membership, counts the live
// replicas, renews the owner Leases it holds, gives up idle ones beyond its
// share, and takes free ones up to its share.
func (f *Fleet) Sync(ctx context.Context, busy func(cluster string) bool) error {
	err := f.sync(ctx, busy)
	f.mu.Lock()
	f.lastErr = err
	f.mu.Unlock()
	return err
}

func (f *Fleet) sync(ctx context.Context, busy func(string) bool) error {
	if busy == nil {
		busy = func(string) bool { return false }
	}
	ctx, cancel := context.WithTimeout(ctx, f.s.timeout)
	defer cancel()
	if _, err := f.claim(ctx, replicaPrefix+f.identity, replicaComponent, ""); err != nil {
		return fmt.Errorf("renewing the membership of replica %s: %w", f.identity, err)
	}
	now := f.s.now()
	replicas, owners, err := f.leases(ctx, now)
	if err != nil {
		return err
	}
	f.mu.Lock()
	clusters := slices.Clone(f.clusters)
	f.replicas = replicas
	f.mu.Unlock()
	share := int(math.Ceil(float64(len(clusters)) / float64(replicas)))

	var mine []*coordinationv1.Lease
	var free []string
	for _, c := range clusters {
		l := owners[c]
		switch {
		case l == nil:
			free = append(free, c)
		case identityOf(l) == f.identity:
			mine = append(mine, l)
		}
	}
	var errs []error
	kept := map[string]time.Time{}
	for _, l := range mine {
		// One request per cluster: the update carries the resourceVersion
		// just listed, so a Lease someone else changed meanwhile is not
		// renewed (a conflict), and the next round looks again.
		c := l.Annotations[ClusterAnnotation]
		start := time.Now()
		next := l.DeepCopy()
		next.Spec.RenewTime = &metav1.MicroTime{Time: f.s.now()}
		if _, err := f.s.leases.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("renewing the owner Lease of %s: %w", c, err))
			}
			continue
		}
		kept[c] = start
	}
	// Give up the idle clusters beyond the share; the other replicas take
	// them in their next round. A busy one is kept until its run ends.
	for _, c := range slices.Sorted(maps.Keys(kept)) {
		if len(kept) <= share {
			break
		}
		if busy(c) {
			continue
		}
		name, _ := ownerLease(c)
		if err := f.s.dropLease(ctx, c, name, f.identity); err != nil {
			errs = append(errs, fmt.Errorf("giving up cluster %s: %w", c, err))
			break
		}
		delete(kept, c)
		f.log.Info("cluster handed to another replica", "cluster", c, "replica", f.identity, "replicas", replicas, "share", share)
	}
	for _, c := range free {
		if len(kept) >= share {
			break
		}
		name, err := ownerLease(c)
		if err != nil {
			return err
		}
		start := time.Now()
		took, err := f.claim(ctx, name, ownerComponent, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("taking cluster %s: %w", c, err))
			continue
		}
		if took {
			kept[c] = start
			f.log.Info("cluster taken", "cluster", c, "replica", f.identity, "replicas", replicas, "share", share)
		}
	}
	f.mu.Lock()
	f.owned = kept
	f.mu.Unlock()
	return errors.Join(errs...)
}

// leases counts the live replicas (at least this one) and returns each
// cluster's owner Lease that is held. Replica Leases expired for ten
// durations are deleted.
func (f *Fleet) leases(ctx context.Context, now time.Time) (int, map[string]*coordinationv1.Lease, error) {
	list, err := f.s.leases.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{managedByLabel: "taloscluster"}.String()})
	if err != nil {
		return 0, nil, fmt.Errorf("listing leases in %s: %w", f.s.namespace, err)
	}
	replicas := 0
	live := map[string]bool{f.identity: true}
	owners := map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		l := &list.Items[i]
		switch l.Labels[componentLabel] {
		case replicaComponent:
			if leaseHeld(l, now) {
				replicas++
				live[identityOf(l)] = true
			} else if stale(l, now, 10*f.leaseFor) {
				uid, rv := l.UID, l.ResourceVersion
				_ = f.s.leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
			}
		case ownerComponent:
			if c := l.Annotations[ClusterAnnotation]; c != "" && leaseHeld(l, now) {
				owners[c] = l
			}
		}
	}
	f.mu.Lock()
	f.live = live
	f.mu.Unlock()
	return max(replicas, 1), owners, nil
}

func stale(l *coordinationv1.Lease, now time.Time, after time.Duration) bool {
	return l.Spec.RenewTime == nil || now.After(l.Spec.RenewTime.Add(after))
}

// claim takes the Lease name for this replica when it is absent, released
// or expired, or renews it when it is the replica's already. It reports
// whether the replica holds it afterwards; a Lease another replica holds
// is not an error.
func (f *Fleet) claim(ctx context.Context, name, component, cluster string) (bool, error) {
	now := f.s.now()
	secs := int32(f.leaseFor / time.Second)
	id := f.identity
	old, err := f.s.leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: f.s.namespace,
				Labels: map[string]string{managedByLabel: "taloscluster", componentLabel: component},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs,
				AcquireTime: &metav1.MicroTime{Time: now}, RenewTime: &metav1.MicroTime{Time: now}},
		}
		if cluster != "" {
			l.Annotations = map[string]string{ClusterAnnotation: cluster}
		}
		_, err := f.s.leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil // another replica was first
		}
		if err != nil {
			return false, fmt.Errorf("creating lease %s/%s: %w", f.s.namespace, name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading lease %s/%s: %w", f.s.namespace, name, err)
	}
	if cluster != "" && old.Annotations[ClusterAnnotation] != cluster {
		return false, fmt.Errorf("lease %s/%s belongs to cluster %q, not %q: leaving it alone", f.s.namespace, name, old.Annotations[ClusterAnnotation], cluster)
	}
	mine := identityOf(old) == id
	if !mine && leaseHeld(old, now) {
		return false, nil
	}
	next := old.DeepCopy()
	next.Spec.HolderIdentity, next.Spec.LeaseDurationSeconds = &id, &secs
	next.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if !mine {
		next.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		transitions := int32(1)
		if old.Spec.LeaseTransitions != nil {
			transitions = *old.Spec.LeaseTransitions + 1
		}
		next.Spec.LeaseTransitions = &transitions
	}
	if _, err := f.s.leases.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil // changed meanwhile: the next round looks again
		}
		return false, fmt.Errorf("taking lease %s/%s: %w", f.s.namespace, name, err)
	}
	return true, nil
}

// Release gives up every Lease the replica holds, so the others take its
// clusters at once instead of after the Leases expire.
func (f *Fleet) Release(ctx context.Context) {
	f.mu.Lock()
	owned := maps.Keys(f.owned)
	f.owned = map[string]time.Time{}
	f.mu.Unlock()
	for c := range owned {
		name, err := ownerLease(c)
		if err == nil {
			err = f.s.dropLease(ctx, c, name, f.identity)
		}
		if err != nil {
			f.log.Warn("releasing a cluster; its Lease expires on its own", "cluster", c, "error", err)
		}
	}
	if err := f.s.dropLease(ctx, "", replicaPrefix+f.identity, f.identity); err != nil {
		f.log.Warn("releasing the replica's membership; it expires on its own", "error", err)
	}
}

// ownerLease names the owner Lease of a cluster.
func ownerLease(cluster string) (string, error) {
	slug, err := Slug(cluster)
	if err != nil {
		return "", err
	}
	return ownerPrefix + slug, nil
}

// OutboxName is the name of a replica's report outbox among the agent's
// documents.
func (f *Fleet) OutboxName() string { return outboxPrefix + f.identity + ".json" }

const outboxPrefix = "outbox-"

// TakeOrphanOutboxes takes the report outboxes of replicas that are no
// longer alive (a pod replaced by a rollout), so their reports are sent
// by this one. It takes nothing before the first round has listed the
// live replicas.
func (f *Fleet) TakeOrphanOutboxes(ctx context.Context) (map[string][]byte, error) {
	f.mu.Lock()
	live := f.live
	f.mu.Unlock()
	if live == nil {
		return nil, nil
	}
	return f.s.TakeAgentDocs(ctx, outboxPrefix, func(name string) bool {
		id := strings.TrimSuffix(strings.TrimPrefix(name, outboxPrefix), ".json")
		return !live[id]
	})
}
