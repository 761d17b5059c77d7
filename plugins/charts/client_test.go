package charts

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeKube is a kube on client-go's fake dynamic client, serving Secrets
// and ConfigMaps, whose applies (server-side apply patches) answer err.
func fakeKube(t *testing.T, err error, objs ...runtime.Object) *kube {
	t.Helper()
	mapper := apimeta.NewDefaultRESTMapper(nil)
	for _, kind := range []string{"Secret", "ConfigMap"} {
		mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: kind}, apimeta.RESTScopeNamespace)
	}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), objs...)
	dyn.PrependReactor("patch", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
	return &kube{dyn: dyn, mapper: mapper}
}

// TestSecretErrorsAreRedacted: an apply, or a dry run of one, of ceph's
// Secret that the API refuses with a message quoting the object (as an
// admission webhook may) fails without the key, naming the reason and
// code; another object's error is passed on whole.
func TestSecretErrorsAreRedacted(t *testing.T) {
	t.Parallel()
	e := Entry{Name: "ceph", Enabled: true, raw: map[string]any{"userID": "kubernetes", "userKey": "AQCs3cr3t=="}}
	secret := CephSecrets(e, []string{CephRBD})[0]
	quoting := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, cephSecret,
		errors.New(`admission webhook "policy.example.org" denied the request: stringData.userKey "AQCs3cr3t==" is not allowed`))
	k := fakeKube(t, quoting)
	err := k.apply(t.Context(), secret)
	if err == nil || strings.Contains(err.Error(), "AQCs3cr3t") || strings.Contains(err.Error(), "denied") ||
		!strings.Contains(err.Error(), "Forbidden (403)") || !strings.Contains(err.Error(), "Secret ceph-csi-rbd/csi-rbd-secret") {
		t.Errorf("a refused Secret apply: %v", err)
	}
	// A webhook's own reason may be any text: it is not shown either.
	odd := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 400, Reason: "userKey AQCs3cr3t== leaked", Message: "AQCs3cr3t=="}}
	if err := fakeKube(t, odd).apply(t.Context(), secret); err == nil || strings.Contains(err.Error(), "AQCs3cr3t") || !strings.Contains(err.Error(), "(400)") {
		t.Errorf("a refusal with its own reason: %v", err)
	}

	// The dry run Observe makes of an existing Secret.
	have := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": cephSecret, "namespace": CephRBD}}}
	k = fakeKube(t, quoting, have)
	if _, err := k.read(t.Context(), secret, true); err == nil || strings.Contains(err.Error(), "AQCs3cr3t") || !strings.Contains(err.Error(), "a dry run") {
		t.Errorf("a refused dry run of a Secret: %v", err)
	}

	cm := obj(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("x", "y")})
	if err := fakeKube(t, quoting).apply(t.Context(), cm); err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Errorf("a refused ConfigMap apply: %v", err)
	}
}

// TestRetryWebhook: an apply a webhook refuses for not answering is
// tried again until it passes, or until the bound with the last error;
// any other error is returned at once.
func TestRetryWebhook(t *testing.T) {
	t.Parallel()
	notReady := func(n int) error {
		err := apierrors.NewInternalError(errors.New(`failed calling webhook "webhook.cert-manager.io": connection refused ` + strings.Repeat("!", n)))
		return fmt.Errorf("applying ClusterIssuer letsencrypt-prod: %w", err)
	}
	calls := 0
	err := retryWebhook(t.Context(), time.Minute, time.Millisecond, func() error {
		if calls++; calls < 4 {
			return notReady(calls)
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Errorf("a webhook answering at the fourth try: %v after %d calls", err, calls)
	}

	calls = 0
	start := time.Now()
	err = retryWebhook(t.Context(), 50*time.Millisecond, 5*time.Millisecond, func() error {
		calls++
		return notReady(calls)
	})
	if err == nil || !strings.HasSuffix(err.Error(), strings.Repeat("!", calls)) || calls < 2 || time.Since(start) > 5*time.Second {
		t.Errorf("a webhook never answering: %v after %d calls in %s", err, calls, time.Since(start))
	}

	for _, other := range []error{
		apierrors.NewForbidden(schema.GroupResource{Resource: "clusterissuers"}, "letsencrypt-prod", errors.New("denied by a webhook")),
		apierrors.NewInternalError(errors.New("etcdserver: request timed out")),
		errors.New("failed calling webhook, but not the API's answer"),
	} {
		calls = 0
		if err := retryWebhook(t.Context(), time.Minute, time.Millisecond, func() error {
			calls++
			return other
		}); !errors.Is(err, other) || calls != 1 {
			t.Errorf("%v: tried %d times", other, calls)
		}
	}
}
