package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultLeaseDuration is how long a cluster's mutation Lease stays valid
// without renewal unless KubeOptions.LeaseDuration says otherwise. The
// holder renews it every third of that, and ends its run when two thirds
// have passed without a renewal, before anyone else may take the Lease.
const DefaultLeaseDuration = 30 * time.Second

// HolderAnnotation holds the Holder record (JSON) of a mutation Lease.
const HolderAnnotation = "taloscluster.io/holder"

// leasePrefix starts the name of every mutation Lease.
const leasePrefix = "taloscluster-lock-"

// LeaseName returns the name of the coordination.k8s.io/v1 Lease that
// holds a cluster's mutation lock: "taloscluster-lock-" and the cluster's
// Slug.
func LeaseName(cluster string) (string, error) {
	slug, err := Slug(cluster)
	if err != nil {
		return "", err
	}
	return leasePrefix + slug, nil
}

// errLeaseTaken is why a renewal found the Lease no longer ours.
var errLeaseTaken = errors.New("the Lease is no longer ours")

func wholeSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// Lock takes the mutation lock of a cluster for holder (for example
// "agent converge"): a coordination.k8s.io/v1 Lease named by LeaseName,
// renewed in the background every third of the lease duration until
// release is called. When another run holds an unexpired Lease, Lock fails
// at once with a LockedError naming that run, or with wait keeps trying,
// with backoff, until it gets the Lease or ctx ends.
//
// The returned context is ctx's child. It ends with the cause ErrLockLost
// when the Lease could not be renewed for two thirds of its duration or
// was taken over, so the run stops mutating before another may start;
// release ends it too, stops the renewals and deletes the Lease if it is
// still ours (a Lease left behind expires on its own).
func (s *KubeStore) Lock(ctx context.Context, cluster, holder string, wait bool) (context.Context, func(), error) {
	name, err := LeaseName(cluster)
	if err != nil {
		return nil, nil, err
	}
	id, err := newID()
	if err != nil {
		return nil, nil, err
	}
	h := newHolder(holder, s.now())
	identity := fmt.Sprintf("%s_%d_%s", h.Hostname, h.PID, id)
	var renewed time.Time
	err = acquire(ctx, wait, func() error {
		renewed = time.Now()
		h.Since = s.now().UTC().Truncate(time.Second)
		return s.takeLease(ctx, cluster, name, identity, h)
	})
	if err != nil {
		return nil, nil, err
	}
	s.logger.Debug("mutation lease taken", "cluster", cluster, "lease", name, "identity", identity)
	held, lose := context.WithCancelCause(ctx)
	keepCtx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.keepLease(keepCtx, cluster, name, identity, renewed, lose)
	}()
	release := sync.OnceFunc(func() {
		stopKeeping()
		<-done
		lose(context.Canceled)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		if err := s.dropLease(rctx, cluster, name, identity); err != nil {
			s.logger.Warn("releasing the mutation lease; it expires on its own", "cluster", cluster, "lease", name, "error", err)
		}
	})
	return held, release, nil
}

// holderOf reads the holder record of a Lease.
func holderOf(l *coordinationv1.Lease) Holder {
	if rec, ok := l.Annotations[HolderAnnotation]; ok {
		return decodeHolder([]byte(rec))
	}
	h := Holder{Command: "lease holder"}
	if l.Spec.HolderIdentity != nil {
		h.Command = oneLine(*l.Spec.HolderIdentity)
	}
	if l.Spec.AcquireTime != nil {
		h.Since = l.Spec.AcquireTime.Time
	}
	return h
}

func identityOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leaseHeld reports whether a Lease has a holder whose last renewal has
// not expired at now.
func leaseHeld(l *coordinationv1.Lease, now time.Time) bool {
	if identityOf(l) == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	d := time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	return now.Before(l.Spec.RenewTime.Add(d))
}

// takeLease tries once to take the cluster's Lease: it creates it, or
// takes over one that is released or expired with an update carrying the
// resourceVersion it read. A concurrent change asks for another try.
func (s *KubeStore) takeLease(ctx context.Context, cluster, name, identity string, h Holder) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	now := s.now()
	secs := int32(s.leaseFor / time.Second)
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       &identity,
		LeaseDurationSeconds: &secs,
		AcquireTime:          &metav1.MicroTime{Time: now},
		RenewTime:            &metav1.MicroTime{Time: now},
	}
	record := strings.TrimSpace(string(h.encode()))
	old, err := s.leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Namespace:   s.namespace,
				Labels:      map[string]string{managedByLabel: "taloscluster", componentLabel: "cluster-lock"},
				Annotations: map[string]string{ClusterAnnotation: cluster, HolderAnnotation: record},
			},
			Spec: spec,
		}
		_, err := s.leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return errRetryNow
		}
		if err != nil {
			return fmt.Errorf("creating lease %s/%s: %w", s.namespace, name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading lease %s/%s: %w", s.namespace, name, err)
	}
	if owner := old.Annotations[ClusterAnnotation]; owner != cluster {
		return fmt.Errorf("lease %s/%s belongs to cluster %q, not %q: leaving it alone", s.namespace, name, owner, cluster)
	}
	if leaseHeld(old, now) {
		return &LockedError{Cluster: cluster, Holder: holderOf(old)}
	}
	next := old.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[HolderAnnotation] = record
	transitions := int32(0)
	if old.Spec.LeaseTransitions != nil {
		transitions = *old.Spec.LeaseTransitions
	}
	if identityOf(old) != "" {
		transitions++
	}
	spec.LeaseTransitions = &transitions
	next.Spec = spec
	if _, err := s.leases.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return errRetryNow
		}
		return fmt.Errorf("taking over lease %s/%s: %w", s.namespace, name, err)
	}
	return nil
}

// keepLease renews the Lease every third of its duration until ctx ends.
// A renewal that fails is tried again soon; when two thirds of the
// duration have passed since the last renewal, or the Lease is no longer
// ours, it calls lose with ErrLockLost and stops.
func (s *KubeStore) keepLease(ctx context.Context, cluster, name, identity string, renewed time.Time, lose func(error)) {
	every := s.leaseFor / 3
	giveUp := s.leaseFor * 2 / 3
	wait := every
	var last error
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		left := giveUp - time.Since(renewed)
		if left <= 0 {
			s.logger.Warn("mutation lease not renewed in time; stopping the run", "cluster", cluster, "lease", name, "error", last)
			lose(fmt.Errorf("%w: lease %s/%s could not be renewed for %s (last error: %v)", ErrLockLost, s.namespace, name, giveUp, last))
			return
		}
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, min(s.timeout, left))
		err := s.renewLease(cctx, name, identity)
		cancel()
		switch {
		case err == nil:
			renewed, last, wait = start, nil, every
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, errLeaseTaken):
			s.logger.Warn("mutation lease taken over; stopping the run", "cluster", cluster, "lease", name, "error", err)
			lose(fmt.Errorf("%w: %w", ErrLockLost, err))
			return
		}
		last = err
		s.logger.Debug("renewing the mutation lease", "cluster", cluster, "lease", name, "error", err)
		wait = max(min(every/4, giveUp-time.Since(renewed)), time.Millisecond)
	}
}

// renewLease moves the Lease's renewTime to now if it is still ours.
func (s *KubeStore) renewLease(ctx context.Context, name, identity string) error {
	for attempt := 1; ; attempt++ {
		l, err := s.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: lease %s/%s was deleted", errLeaseTaken, s.namespace, name)
		}
		if err != nil {
			return fmt.Errorf("reading lease %s/%s: %w", s.namespace, name, err)
		}
		if got := identityOf(l); got != identity {
			return fmt.Errorf("%w: lease %s/%s is held by %s", errLeaseTaken, s.namespace, name, holderOf(l))
		}
		next := l.DeepCopy()
		next.Spec.RenewTime = &metav1.MicroTime{Time: s.now()}
		_, err = s.leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("renewing lease %s/%s: %w", s.namespace, name, err)
		}
		if attempt == kubeAttempts {
			return fmt.Errorf("renewing lease %s/%s: %d attempts: %w", s.namespace, name, attempt, ErrConflict)
		}
	}
}

// dropLease deletes the Lease if it is still ours, with preconditions so
// a Lease someone else took meanwhile stays.
func (s *KubeStore) dropLease(ctx context.Context, cluster, name, identity string) error {
	for attempt := 1; ; attempt++ {
		l, err := s.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading lease %s/%s: %w", s.namespace, name, err)
		}
		if identityOf(l) != identity {
			return nil
		}
		uid, rv := l.UID, l.ResourceVersion
		err = s.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err == nil || apierrors.IsNotFound(err) {
			s.logger.Debug("mutation lease released", "cluster", cluster, "lease", name)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt == kubeAttempts {
			return fmt.Errorf("deleting lease %s/%s: %w", s.namespace, name, err)
		}
	}
}
