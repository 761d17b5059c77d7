package state_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/taloscluster/taloscluster/reconcile/state"
)

const namespace = "taloscluster"

func secretName(t *testing.T, cluster string) string {
	t.Helper()
	name, err := state.SecretName(cluster)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// requestLine renders the log as "METHOD CODE" lines for comparison.
func requestLines(log []apiRequest) []string {
	out := make([]string, len(log))
	for i, r := range log {
		out[i] = r.Method + " " + http.StatusText(r.Code)
	}
	return out
}

func wantRequests(t *testing.T, api *secretsAPI, from int, want ...string) {
	t.Helper()
	got := requestLines(api.requests()[from:])
	if !slices.Equal(got, want) {
		t.Fatalf("requests:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestKubeStoreSecretShape(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	ctx := t.Context()
	if err := s.Create(ctx, prodA, state.IdentityFile, []byte("identity")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, prodA, state.KubeconfigFile, []byte("kc")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, prodA, state.Entry{Op: "create-vm", Target: "prod-a-worker-04", Commit: sha1}); err != nil {
		t.Fatal(err)
	}
	name := secretName(t, prodA)
	sec := api.secret(namespace, name)
	if sec == nil {
		t.Fatalf("no secret %s/%s", namespace, name)
	}
	if sec.Type != corev1.SecretTypeOpaque {
		t.Errorf("type %q", sec.Type)
	}
	if sec.Annotations[state.ClusterAnnotation] != prodA {
		t.Errorf("annotations %v", sec.Annotations)
	}
	if sec.Labels["app.kubernetes.io/managed-by"] != "taloscluster" {
		t.Errorf("labels %v", sec.Labels)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range sec.Data {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(keys, []string{state.JournalFile, state.KubeconfigFile, state.IdentityFile}) {
		t.Errorf("data keys %v", keys)
	}
	if !bytes.Contains(sec.Data[state.JournalFile], []byte(`"target": "prod-a-worker-04"`)) {
		t.Errorf("journal %s", sec.Data[state.JournalFile])
	}
}

func TestSecretName(t *testing.T) {
	t.Parallel()
	cases := []string{
		"clusters/prod-a",
		"clusters/prod_a",
		"prod-a",
		"Clusters/PROD-A",
		"_/_",
		"clusters/" + strings.Repeat("very-long-name-", 15),
		"clusters/" + strings.Repeat("very-long-name-", 15) + "x",
		"a.b/c..d/e",
	}
	seen := map[string]string{}
	for _, c := range cases {
		name := secretName(t, c)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("SecretName(%q) = %q: %v", c, name, errs)
		}
		if !strings.HasPrefix(name, "taloscluster-") {
			t.Errorf("SecretName(%q) = %q, want the taloscluster- prefix", c, name)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q share the secret %s", c, other, name)
		}
		seen[name] = c
		if again := secretName(t, c); again != name {
			t.Errorf("SecretName(%q) is not deterministic: %q, %q", c, name, again)
		}
	}
	if got := secretName(t, "clusters/prod-a"); !strings.HasPrefix(got, "taloscluster-clusters-prod-a-") {
		t.Errorf("SecretName(clusters/prod-a) = %q, want a readable form", got)
	}
}

// TestKubeStoreConflictRereads plays a writer that changes the Secret
// between the store's read and its update: the update gets a Conflict, the
// store reads again and applies its change to the fresh Secret, and the
// other writer's change survives.
func TestKubeStoreConflictRereads(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	other := newKubeStore(t, api)
	ctx := t.Context()
	if err := s.Put(ctx, prodA, state.TalosconfigFile, []byte("tc")); err != nil {
		t.Fatal(err)
	}
	from := len(api.requests())
	api.setInterleave(func(method, _ string) {
		if err := other.Put(ctx, prodA, state.KubeconfigFile, []byte("theirs")); err != nil {
			t.Errorf("concurrent put: %v", err)
		}
	})
	if err := s.Create(ctx, prodA, state.IdentityFile, []byte("ours")); err != nil {
		t.Fatal(err)
	}
	wantRequests(t, api, from,
		"GET OK", // the store reads
		"GET OK", // the other writer reads
		"PUT OK", // and updates
		"PUT Conflict",
		"GET OK",
		"PUT OK",
	)
	for name, want := range map[string]string{state.IdentityFile: "ours", state.KubeconfigFile: "theirs", state.TalosconfigFile: "tc"} {
		if got, err := s.Get(ctx, prodA, name); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v, want %q", name, got, err, want)
		}
	}
}

// TestKubeStoreNeverOverwritesIdentity plays a writer that adds the
// identity between the store's read and its update.
func TestKubeStoreNeverOverwritesIdentity(t *testing.T) {
	t.Parallel()
	for _, existing := range []bool{false, true} {
		name := "new secret"
		if existing {
			name = "existing secret"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := newSecretsAPI(t)
			s := newKubeStore(t, api)
			other := newKubeStore(t, api)
			ctx := t.Context()
			if existing {
				if err := s.Put(ctx, prodA, state.TalosconfigFile, []byte("tc")); err != nil {
					t.Fatal(err)
				}
			}
			from := len(api.requests())
			api.setInterleave(func(string, string) {
				if err := other.Create(ctx, prodA, state.IdentityFile, []byte("theirs")); err != nil {
					t.Errorf("concurrent create: %v", err)
				}
			})
			err := s.Create(ctx, prodA, state.IdentityFile, []byte("ours"))
			if !errors.Is(err, fs.ErrExist) {
				t.Fatalf("create that lost the race: %v, want fs.ErrExist", err)
			}
			if existing {
				wantRequests(t, api, from, "GET OK", "GET OK", "PUT OK", "PUT Conflict", "GET OK")
			} else {
				wantRequests(t, api, from, "GET Not Found", "GET Not Found", "POST Created", "POST Conflict", "GET OK")
			}
			if got, _ := s.Get(ctx, prodA, state.IdentityFile); string(got) != "theirs" {
				t.Fatalf("identity %q, want the first writer's", got)
			}
		})
	}
}

func TestKubeStoreGivesUpAfterBoundedConflicts(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	ctx := t.Context()
	if err := s.Put(ctx, prodA, state.TalosconfigFile, []byte("tc")); err != nil {
		t.Fatal(err)
	}
	from := len(api.requests())
	api.failNext(http.MethodPut, slices.Repeat([]int{http.StatusConflict}, 100)...)
	err := s.Put(ctx, prodA, state.KubeconfigFile, []byte("kc"))
	if !errors.Is(err, state.ErrConflict) {
		t.Fatalf("put against endless conflicts: %v, want ErrConflict", err)
	}
	puts := 0
	for _, r := range api.requests()[from:] {
		if r.Method == http.MethodPut {
			puts++
		}
	}
	if puts < 2 || puts > 10 {
		t.Fatalf("%d updates, want a small bounded number of retries", puts)
	}
}

func TestKubeStoreDoesNotRetryOtherErrors(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	ctx := t.Context()
	if err := s.Put(ctx, prodA, state.TalosconfigFile, []byte("tc")); err != nil {
		t.Fatal(err)
	}
	from := len(api.requests())
	api.failNext(http.MethodPut, http.StatusInternalServerError)
	if err := s.Put(ctx, prodA, state.KubeconfigFile, []byte("kc")); err == nil {
		t.Fatal("put through a server error succeeded")
	}
	wantRequests(t, api, from, "GET OK", "PUT Internal Server Error")
}

func TestKubeStoreDeletesEmptySecretWithPreconditions(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	other := newKubeStore(t, api)
	ctx := t.Context()
	if err := s.Put(ctx, prodA, state.TalosconfigFile, []byte("tc")); err != nil {
		t.Fatal(err)
	}
	// A writer adds a file between the read and the delete: the delete's
	// preconditions fail and the store updates instead.
	from := len(api.requests())
	api.setInterleave(func(string, string) {
		if err := other.Put(ctx, prodA, state.KubeconfigFile, []byte("kc")); err != nil {
			t.Errorf("concurrent put: %v", err)
		}
	})
	if err := s.Delete(ctx, prodA, state.TalosconfigFile); err != nil {
		t.Fatal(err)
	}
	wantRequests(t, api, from, "GET OK", "GET OK", "PUT OK", "DELETE Conflict", "GET OK", "PUT OK")
	if got, _ := s.Get(ctx, prodA, state.KubeconfigFile); string(got) != "kc" {
		t.Fatalf("kubeconfig %q lost", got)
	}
	if err := s.Delete(ctx, prodA, state.KubeconfigFile); err != nil {
		t.Fatal(err)
	}
	if sec := api.secret(namespace, secretName(t, prodA)); sec != nil {
		t.Fatalf("secret left with data %v", sec.Data)
	}
}

func TestKubeStoreLeavesForeignSecretAlone(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	api.put(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        secretName(t, prodA),
			Namespace:   namespace,
			Annotations: map[string]string{state.ClusterAnnotation: "clusters/someone-else"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{state.IdentityFile: []byte("theirs")},
	})
	s := newKubeStore(t, api)
	ctx := t.Context()
	from := len(api.requests())
	if _, err := s.Get(ctx, prodA, state.IdentityFile); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("get from a foreign secret: %v", err)
	}
	if err := s.Put(ctx, prodA, state.KubeconfigFile, []byte("kc")); err == nil {
		t.Error("put into a foreign secret succeeded")
	}
	for _, r := range api.requests()[from:] {
		if r.Method != http.MethodGet {
			t.Errorf("wrote to a foreign secret: %v", r)
		}
	}
}

func TestKubeStoreCallsHaveDeadlines(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s, err := state.NewKubeStore(api.client(t), state.KubeOptions{Namespace: namespace, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	api.setHold(true)
	start := time.Now()
	err = s.Put(t.Context(), prodA, state.KubeconfigFile, []byte("kc"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put against a hanging server: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("put took %v", d)
	}
}

func TestKubeStoreRefusesOversizedState(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	s := newKubeStore(t, api)
	from := len(api.requests())
	if err := s.Put(t.Context(), prodA, state.KubeconfigFile, make([]byte, 1<<20+1)); err == nil {
		t.Fatal("put of more than a Secret holds succeeded")
	}
	wantRequests(t, api, from, "GET Not Found")
}

func TestNewKubeStoreNeedsNamespace(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	if _, err := state.NewKubeStore(api.client(t), state.KubeOptions{}); err == nil {
		t.Fatal("a store without a namespace was made")
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestKubeStoreNeverLogsData(t *testing.T) {
	t.Parallel()
	api := newSecretsAPI(t)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := state.NewKubeStore(api.client(t), state.KubeOptions{Namespace: namespace, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	other := newKubeStore(t, api)
	ctx := t.Context()
	const secret = "cluster-ca-private-key-do-not-leak"
	if err := s.Put(ctx, prodA, state.KubeconfigFile, []byte("kc")); err != nil {
		t.Fatal(err)
	}
	api.setInterleave(func(string, string) {
		_ = other.Put(ctx, prodA, state.TalosconfigFile, []byte(secret))
	})
	if err := s.Create(ctx, prodA, state.IdentityFile, []byte(secret)); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "state secret updated") || !strings.Contains(out, "reading it again") {
		t.Fatalf("expected debug records of the writes and the conflict:\n%s", out)
	}
	for _, leak := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))} {
		if strings.Contains(out, leak) {
			t.Fatalf("secret data in the log:\n%s", out)
		}
	}
}
