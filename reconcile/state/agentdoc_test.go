package state_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

// agentDocsContract is what every AgentDocs must do.
func agentDocsContract(t *testing.T, docs state.AgentDocs) {
	t.Helper()
	ctx := t.Context()
	if _, err := docs.GetAgentDoc(ctx, "outbox.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("absent document: %v, want fs.ErrNotExist", err)
	}
	for _, v := range []string{`{"v":1}`, `{"v":2}`} {
		if err := docs.PutAgentDoc(ctx, "outbox.json", []byte(v)); err != nil {
			t.Fatal(err)
		}
		got, err := docs.GetAgentDoc(ctx, "outbox.json")
		if err != nil || string(got) != v {
			t.Fatalf("read back %q, %v; want %q", got, err, v)
		}
	}
	if err := docs.PutAgentDoc(ctx, "outbox.json", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := docs.GetAgentDoc(ctx, "outbox.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("emptied document: %v, want fs.ErrNotExist", err)
	}
	for _, bad := range []string{"../x", ".hidden", state.JournalFile, ""} {
		if err := docs.PutAgentDoc(ctx, bad, []byte("x")); !errors.Is(err, state.ErrInvalidName) {
			t.Errorf("PutAgentDoc(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestDirStoreAgentDocs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s := state.NewDirStore(root)
	agentDocsContract(t, s)
	// The agent's documents never share a directory with a cluster's state.
	if err := s.PutAgentDoc(t.Context(), "outbox.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			t.Errorf("agent document under %s, a name a cluster could have", e.Name())
		}
	}
	info, err := os.Stat(filepath.Join(root, ".agent", "outbox.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("agent document mode: %v, %v; want 0600", info, err)
	}
}

func TestKubeStoreAgentDocs(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	agentDocsContract(t, s)
	if err := s.PutAgentDoc(t.Context(), "outbox.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	sec := api.secret(namespace, state.AgentSecret)
	if sec == nil || sec.Labels["app.kubernetes.io/component"] != "agent-state" {
		t.Fatalf("agent Secret %v, want one labelled component=agent-state", sec)
	}
}

func TestKubeStoreAgentDocsLeavesForeignSecretAlone(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	api.put(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: state.AgentSecret},
		Data: map[string][]byte{"outbox.json": []byte("theirs")}})
	s := newKubeStore(t, api)
	if err := s.PutAgentDoc(t.Context(), "outbox.json", []byte("ours")); err == nil || !strings.Contains(err.Error(), "leaving it alone") {
		t.Fatalf("writing into a Secret the agent did not make: %v", err)
	}
	if got := string(api.secret(namespace, state.AgentSecret).Data["outbox.json"]); got != "theirs" {
		t.Fatalf("foreign Secret changed to %q", got)
	}
}

func TestKubeStoreAgentDocsRereadsOnConflict(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	ctx := t.Context()
	if err := s.PutAgentDoc(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	api.failNext("PUT", 409)
	if err := s.PutAgentDoc(ctx, "b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	sec := api.secret(namespace, state.AgentSecret)
	if string(sec.Data["a"]) != "1" || string(sec.Data["b"]) != "2" {
		t.Fatalf("after a conflict the Secret holds %v", sec.Data)
	}
}
