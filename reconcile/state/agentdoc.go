package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
)

// AgentDocs keeps documents of the agent itself beside the clusters'
// state, such as its outbox of reports not yet delivered. A name follows
// the rules of a state file name.
type AgentDocs interface {
	// GetAgentDoc returns a document; an error wrapping fs.ErrNotExist
	// when there is none.
	GetAgentDoc(ctx context.Context, name string) ([]byte, error)
	// PutAgentDoc replaces a document, creating it if absent. An empty
	// document is deleted.
	PutAgentDoc(ctx context.Context, name string, data []byte) error
}

var (
	_ AgentDocs = (*DirStore)(nil)
	_ AgentDocs = (*KubeStore)(nil)
)

// agentDir is the directory of the agent's documents under a DirStore's
// root. A cluster's directory never starts with a dot (see Slug), so the
// two never meet.
const agentDir = ".agent"

// AgentSecret is the Secret that holds the agent's documents in a
// KubeStore, one data key per document. A cluster's Secret always ends in
// twelve hexadecimal digits (see SecretName), so the two never meet.
const AgentSecret = secretPrefix + "agent"

// agentComponent labels the agent's Secret.
const agentComponent = "agent-state"

// GetAgentDoc returns a document of the agent.
func (s *DirStore) GetAgentDoc(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	return boundedfile.Read(filepath.Join(s.root, agentDir, name), boundedfile.State)
}

// PutAgentDoc replaces a document of the agent, atomically.
func (s *DirStore) PutAgentDoc(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	dir := filepath.Join(s.root, agentDir)
	path := filepath.Join(dir, name)
	if len(data) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("deleting the agent's %s: %w", name, err)
		}
		return nil
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	if err := WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing the agent's %s: %w", name, err)
	}
	return nil
}

// readAgent returns the agent's Secret, or nil when there is none. A
// Secret of that name that the agent did not make is refused.
func (s *KubeStore) readAgent(ctx context.Context) (*corev1.Secret, error) {
	sec, err := s.secrets.Get(ctx, AgentSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w", s.namespace, AgentSecret, err)
	}
	if sec.Labels[componentLabel] != agentComponent {
		return nil, fmt.Errorf("secret %s/%s is not labelled %s=%s: leaving it alone", s.namespace, AgentSecret, componentLabel, agentComponent)
	}
	return sec, nil
}

// GetAgentDoc returns a document of the agent from its Secret.
func (s *KubeStore) GetAgentDoc(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sec, err := s.readAgent(ctx)
	if err != nil {
		return nil, err
	}
	if sec == nil || sec.Data[name] == nil {
		return nil, fmt.Errorf("reading the agent's %s: %w", name, fs.ErrNotExist)
	}
	return bytes.Clone(sec.Data[name]), nil
}

// PutAgentDoc replaces a document of the agent in its Secret, under
// optimistic concurrency like the clusters' Secrets: a conflict re-reads
// the Secret and writes again, a bounded number of times.
func (s *KubeStore) PutAgentDoc(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		sec, err := s.readAgent(ctx)
		if err != nil {
			return err
		}
		err = s.writeAgent(ctx, sec, name, data)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("writing the agent's %s: %w", name, err)
		}
		if attempt == kubeAttempts {
			return fmt.Errorf("writing the agent's %s: %d attempts: %w", name, attempt, ErrConflict)
		}
		if err := pause(ctx, attempt); err != nil {
			return fmt.Errorf("writing the agent's %s: %w", name, err)
		}
	}
}

// writeAgent sets (or, for empty data, removes) one key of the agent's
// Secret old, creating the Secret when old is nil.
func (s *KubeStore) writeAgent(ctx context.Context, old *corev1.Secret, name string, data []byte) error {
	if old == nil {
		if len(data) == 0 {
			return nil
		}
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      AgentSecret,
				Namespace: s.namespace,
				Labels:    map[string]string{managedByLabel: "taloscluster", componentLabel: agentComponent},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{name: bytes.Clone(data)},
		}
		_, err := s.secrets.Create(ctx, sec, metav1.CreateOptions{})
		return err
	}
	next := old.DeepCopy()
	if next.Data == nil {
		next.Data = map[string][]byte{}
	}
	if len(data) == 0 {
		if _, ok := next.Data[name]; !ok {
			return nil
		}
		delete(next.Data, name)
	} else {
		if bytes.Equal(next.Data[name], data) {
			return nil
		}
		next.Data[name] = bytes.Clone(data)
	}
	if n := dataSize(next.Data); n > maxSecretBytes {
		return fmt.Errorf("secret %s/%s would hold %d bytes, more than the %d a Secret may", s.namespace, AgentSecret, n, maxSecretBytes)
	}
	_, err := s.secrets.Update(ctx, next, metav1.UpdateOptions{})
	return err
}

// TakeAgentDocs removes, in one update, the agent's documents whose names
// start with prefix and that take selects, and returns them. Two replicas
// that try to take the same document never both get it: the update
// carries the resourceVersion read, and a conflict reads again.
func (s *KubeStore) TakeAgentDocs(ctx context.Context, prefix string, take func(name string) bool) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		sec, err := s.readAgent(ctx)
		if err != nil || sec == nil {
			return nil, err
		}
		taken := map[string][]byte{}
		next := sec.DeepCopy()
		for name, data := range sec.Data {
			if strings.HasPrefix(name, prefix) && take(name) {
				taken[name] = bytes.Clone(data)
				delete(next.Data, name)
			}
		}
		if len(taken) == 0 {
			return nil, nil
		}
		_, err = s.secrets.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			return taken, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("taking the agent's documents: %w", err)
		}
		if attempt == kubeAttempts {
			return nil, fmt.Errorf("taking the agent's documents: %d attempts: %w", attempt, ErrConflict)
		}
		if err := pause(ctx, attempt); err != nil {
			return nil, err
		}
	}
}
