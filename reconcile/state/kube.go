package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// KubeTimeout is the default deadline of each KubeStore call, retries
// included.
const KubeTimeout = 30 * time.Second

// kubeAttempts bounds how often a KubeStore write re-reads the Secret
// after a conflict before it gives up with ErrConflict.
const kubeAttempts = 6

// maxSecretBytes is the most data a Secret may hold.
const maxSecretBytes = 1 << 20

// Labels and annotation of the Secrets a KubeStore keeps.
const (
	// ClusterAnnotation holds the cluster path a state Secret belongs to;
	// a Secret whose annotation names another path is never touched.
	ClusterAnnotation = "taloscluster.io/cluster"
	managedByLabel    = "app.kubernetes.io/managed-by"
	componentLabel    = "app.kubernetes.io/component"
)

// secretPrefix starts the name of every state Secret.
const secretPrefix = "taloscluster-"

// SecretName returns the name of the Secret that holds a cluster's state:
// "taloscluster-" and the cluster's Slug, a valid DNS-1123 label of at
// most 63 characters.
func SecretName(cluster string) (string, error) {
	slug, err := Slug(cluster)
	if err != nil {
		return "", err
	}
	return secretPrefix + slug, nil
}

// The client rate limits the agent sets on its Kubernetes client: a Fleet
// round costs one request per cluster a replica owns, plus three, and
// client-go's defaults (5 per second, bursts of 10) would make a round of
// a hundred clusters outlast its Lease.
const (
	ClientQPS   = 50
	ClientBurst = 100
)

// KubeOptions configures a KubeStore.
type KubeOptions struct {
	// Namespace holds the Secrets; it is required.
	Namespace string
	// Timeout bounds each call, retries included; zero means KubeTimeout.
	Timeout time.Duration
	// Logger receives debug records of writes and conflicts (names and
	// resource versions, never data); nil discards them.
	Logger *slog.Logger
	// LeaseDuration is how long a cluster's mutation Lease stays valid
	// without renewal; zero means DefaultLeaseDuration. It is rounded up to
	// whole seconds.
	LeaseDuration time.Duration
}

// KubeStore keeps each cluster's state in one Secret of a namespace, one
// data key per file and JournalFile for the journal.
//
// Every write is a read-modify-write guarded by the Secret's
// resourceVersion: a write that meets a concurrent change gets a Conflict,
// re-reads and decides again, a bounded number of times. The identity is
// written with create semantics: into a new Secret by creating it (an
// AlreadyExists means someone else was first, so the Secret is re-read),
// into an existing Secret by an update that fails if a concurrent writer
// added the key meanwhile; the re-read then finds the key and Create
// reports fs.ErrExist. No write ever replaces an identity. Secret data is
// never logged.
type KubeStore struct {
	secrets   corev1client.SecretInterface
	leases    coordinationv1client.LeaseInterface
	namespace string
	timeout   time.Duration
	leaseFor  time.Duration
	logger    *slog.Logger
	now       func() time.Time
}

var _ Backend = (*KubeStore)(nil)

// NewKubeStore returns a KubeStore that keeps Secrets through client.
func NewKubeStore(client kubernetes.Interface, opts KubeOptions) (*KubeStore, error) {
	if opts.Namespace == "" {
		return nil, errors.New("making the Kubernetes state store: no namespace")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = KubeTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	return &KubeStore{
		secrets:   client.CoreV1().Secrets(opts.Namespace),
		leases:    client.CoordinationV1().Leases(opts.Namespace),
		namespace: opts.Namespace,
		timeout:   opts.Timeout,
		leaseFor:  wholeSeconds(opts.LeaseDuration),
		logger:    logger,
		now:       time.Now,
	}, nil
}

// read returns the cluster's Secret, or nil when there is none.
func (s *KubeStore) read(ctx context.Context, cluster, name string) (*corev1.Secret, error) {
	sec, err := s.secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w", s.namespace, name, err)
	}
	if owner := sec.Annotations[ClusterAnnotation]; owner != cluster {
		return nil, fmt.Errorf("secret %s/%s belongs to cluster %q, not %q: leaving it alone", s.namespace, name, owner, cluster)
	}
	return sec, nil
}

// Get returns a file of a cluster's state; an error wrapping
// fs.ErrNotExist when it is absent.
func (s *KubeStore) Get(ctx context.Context, cluster, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	data, err := s.view(ctx, cluster, name)
	if err != nil {
		return nil, fmt.Errorf("reading %s of cluster %q: %w", name, cluster, err)
	}
	return data, nil
}

// view returns one key of the cluster's Secret, fs.ErrNotExist when the
// Secret or the key is absent.
func (s *KubeStore) view(ctx context.Context, cluster, key string) ([]byte, error) {
	name, err := SecretName(cluster)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sec, err := s.read(ctx, cluster, name)
	if err != nil {
		return nil, err
	}
	if sec == nil {
		return nil, fs.ErrNotExist
	}
	data, ok := sec.Data[key]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return bytes.Clone(data), nil
}

// Create stores a file only if it is absent; an existing one, even one a
// concurrent writer added a moment earlier, gives an error wrapping
// fs.ErrExist.
func (s *KubeStore) Create(ctx context.Context, cluster, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := s.update(ctx, cluster, name, func(d map[string][]byte) (bool, error) {
		if _, ok := d[name]; ok {
			return false, fs.ErrExist
		}
		d[name] = bytes.Clone(data)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("creating %s of cluster %q: %w", name, cluster, err)
	}
	return nil
}

// Put replaces a derived file; IdentityFile gives ErrCreateOnly.
func (s *KubeStore) Put(ctx context.Context, cluster, name string, data []byte) error {
	if name == IdentityFile {
		return fmt.Errorf("replacing %s of cluster %q: %w", name, cluster, ErrCreateOnly)
	}
	if err := checkName(name); err != nil {
		return err
	}
	err := s.update(ctx, cluster, name, func(d map[string][]byte) (bool, error) {
		if old, ok := d[name]; ok && bytes.Equal(old, data) {
			return false, nil
		}
		d[name] = bytes.Clone(data)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("replacing %s of cluster %q: %w", name, cluster, err)
	}
	return nil
}

// Delete removes a file; an absent one is not an error. A Secret left
// with no data is deleted.
func (s *KubeStore) Delete(ctx context.Context, cluster, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := s.update(ctx, cluster, name, func(d map[string][]byte) (bool, error) {
		if _, ok := d[name]; !ok {
			return false, nil
		}
		delete(d, name)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("deleting %s of cluster %q: %w", name, cluster, err)
	}
	return nil
}

// change edits a copy of a Secret's data (never nil) and reports whether
// it changed anything.
type change func(data map[string][]byte) (bool, error)

// update applies fn to the cluster's Secret under optimistic concurrency:
// it creates the Secret when there is none, updates it with the
// resourceVersion it read otherwise, deletes it when fn leaves it empty,
// and on AlreadyExists or Conflict reads it again and re-applies fn.
func (s *KubeStore) update(ctx context.Context, cluster, key string, fn change) error {
	name, err := SecretName(cluster)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		sec, err := s.read(ctx, cluster, name)
		if err != nil {
			return err
		}
		data := map[string][]byte{}
		if sec != nil {
			maps.Copy(data, sec.Data)
		}
		changed, err := fn(data)
		if err != nil || !changed {
			return err
		}
		if n := dataSize(data); n > maxSecretBytes {
			return fmt.Errorf("secret %s/%s would hold %d bytes, more than the %d a Secret may", s.namespace, name, n, maxSecretBytes)
		}
		err = s.write(ctx, cluster, name, sec, data)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if attempt == kubeAttempts {
			return fmt.Errorf("writing secret %s/%s: %d attempts: %w", s.namespace, name, attempt, ErrConflict)
		}
		s.logger.Debug("state secret changed concurrently; reading it again",
			"cluster", cluster, "secret", name, "key", key, "attempt", attempt)
		if err := pause(ctx, attempt); err != nil {
			return fmt.Errorf("writing secret %s/%s: %w", s.namespace, name, err)
		}
	}
}

// write stores data as the Secret's new content: a create when old is
// nil, a delete with preconditions when data is empty, else an update
// carrying old's resourceVersion.
func (s *KubeStore) write(ctx context.Context, cluster, name string, old *corev1.Secret, data map[string][]byte) error {
	switch {
	case old == nil:
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Namespace:   s.namespace,
				Labels:      map[string]string{managedByLabel: "taloscluster", componentLabel: "cluster-state"},
				Annotations: map[string]string{ClusterAnnotation: cluster},
			},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		created, err := s.secrets.Create(ctx, sec, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating secret %s/%s: %w", s.namespace, name, err)
		}
		s.logger.Debug("state secret created", "cluster", cluster, "secret", name, "resourceVersion", created.ResourceVersion)
		return nil
	case len(data) == 0:
		uid, rv := old.UID, old.ResourceVersion
		err := s.secrets.Delete(ctx, name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting secret %s/%s: %w", s.namespace, name, err)
		}
		s.logger.Debug("state secret deleted", "cluster", cluster, "secret", name)
		return nil
	default:
		next := old.DeepCopy()
		next.Data = data
		updated, err := s.secrets.Update(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating secret %s/%s: %w", s.namespace, name, err)
		}
		s.logger.Debug("state secret updated", "cluster", cluster, "secret", name,
			"from", old.ResourceVersion, "resourceVersion", updated.ResourceVersion)
		return nil
	}
}

func dataSize(data map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

// pause waits a little longer after each conflict, with jitter, so
// concurrent writers spread out.
func pause(ctx context.Context, attempt int) error {
	return retry.Sleep(ctx, retry.Policy{Initial: 10 * time.Millisecond, Max: time.Second}.Backoff(attempt))
}

// viewJournal reads a cluster's journal.
func (s *KubeStore) viewJournal(ctx context.Context, cluster string) (*journal, error) {
	data, err := s.view(ctx, cluster, JournalFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the journal of cluster %q: %w", cluster, err)
	}
	j, err := decodeJournal(data)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	return j, nil
}

// updateJournal applies fn to a cluster's journal; fn reports whether it
// changed the journal. fn may run more than once, on a fresh copy each
// time, when a concurrent writer changed the Secret.
func (s *KubeStore) updateJournal(ctx context.Context, cluster string, fn func(*journal) (bool, error)) error {
	err := s.update(ctx, cluster, JournalFile, func(d map[string][]byte) (bool, error) {
		j, err := decodeJournal(d[JournalFile])
		if err != nil {
			return false, err
		}
		changed, err := fn(j)
		if err != nil || !changed {
			return false, err
		}
		data, err := j.encode()
		if err != nil {
			return false, err
		}
		d[JournalFile] = data
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("updating the journal of cluster %q: %w", cluster, err)
	}
	return nil
}

// Begin records the intent e before a mutation and returns the entry's id.
func (s *KubeStore) Begin(ctx context.Context, cluster string, e Entry) (string, error) {
	var id string
	err := s.updateJournal(ctx, cluster, func(j *journal) (bool, error) {
		var err error
		id, err = j.begin(e, s.now())
		return err == nil, err
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Done marks an entry finished, with err's first line when it failed.
func (s *KubeStore) Done(ctx context.Context, cluster, id string, err error) error {
	return s.updateJournal(ctx, cluster, func(j *journal) (bool, error) {
		return j.done(id, err, s.now())
	})
}

// Open returns the entries begun and not finished, oldest first.
func (s *KubeStore) Open(ctx context.Context, cluster string) ([]Entry, error) {
	j, err := s.viewJournal(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return j.open(), nil
}

// Entries returns the open entries and the most recent finished ones,
// oldest first.
func (s *KubeStore) Entries(ctx context.Context, cluster string) ([]Entry, error) {
	j, err := s.viewJournal(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return j.entries(), nil
}

// LastConverged returns the commit the cluster was last converged to, or
// "" when it never was.
func (s *KubeStore) LastConverged(ctx context.Context, cluster string) (string, error) {
	j, err := s.viewJournal(ctx, cluster)
	if err != nil {
		return "", err
	}
	return j.lastConverged(), nil
}

// SetLastConverged records the commit a converge brought the cluster to.
func (s *KubeStore) SetLastConverged(ctx context.Context, cluster, commit string) error {
	return s.updateJournal(ctx, cluster, func(j *journal) (bool, error) {
		return j.setLastConverged(commit, s.now())
	})
}
