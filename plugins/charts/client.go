package charts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/taloscluster/taloscluster/plugins/internal/kubeobj"
)

// callTimeout bounds each request to the cluster's API.
const callTimeout = 60 * time.Second

// helmDriver is where Helm keeps its releases: Secrets in the release's
// namespace, Helm's default, so that the helm CLI sees the same releases.
const helmDriver = "secret"

// kube reaches the cluster's API: unstructured objects through client-go,
// releases through the Helm SDK.
type kube struct {
	raw    *clientcmdapi.Config
	dyn    dynamic.Interface
	mapper apimeta.RESTMapper
	disc   discovery.CachedDiscoveryInterface
}

// newKube parses the admin kubeconfig in memory: nothing is written to
// disk.
func newKube(kubeconfig []byte) (*kube, error) {
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		// The parser's message may quote the kubeconfig, which holds
		// credentials: it is not passed on.
		return nil, errors.New("the cluster's kubeconfig does not parse")
	}
	k := &kube{raw: raw}
	cfg, err := k.restConfig("")
	if err != nil {
		return nil, err
	}
	if k.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	k.disc = memory.NewMemCacheClient(dc)
	k.mapper = restmapper.NewDeferredDiscoveryRESTMapper(k.disc)
	return k, nil
}

func (k *kube) restConfig(namespace string) (*rest.Config, error) {
	cfg, err := k.loader(namespace).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the cluster's kubeconfig: %w", err)
	}
	cfg.Timeout = callTimeout
	return cfg, nil
}

func (k *kube) loader(namespace string) clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*k.raw, &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: namespace}})
}

// reachable asks the API server its version.
func (k *kube) reachable() error {
	_, err := k.disc.ServerVersion()
	return err
}

// getter is the RESTClientGetter the Helm SDK builds its clients from:
// the in-memory kubeconfig with the release's namespace as the default.
type getter struct {
	k         *kube
	namespace string
	once      sync.Once
	disc      discovery.CachedDiscoveryInterface
	err       error
}

func (g *getter) ToRESTConfig() (*rest.Config, error) { return g.k.restConfig(g.namespace) }

func (g *getter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.once.Do(func() {
		cfg, err := g.ToRESTConfig()
		if err != nil {
			g.err = err
			return
		}
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			g.err = err
			return
		}
		g.disc = memory.NewMemCacheClient(dc)
	})
	return g.disc, g.err
}

func (g *getter) ToRESTMapper() (apimeta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (g *getter) ToRawKubeConfigLoader() clientcmd.ClientConfig { return g.k.loader(g.namespace) }

// helm is a Helm SDK configuration for the releases of one namespace,
// its log discarded (values may hold secrets).
func (k *kube) helm(namespace string) (*action.Configuration, error) {
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	if err := cfg.Init(&getter{k: k, namespace: namespace}, namespace, helmDriver); err != nil {
		return nil, fmt.Errorf("the Helm client: %w", err)
	}
	return cfg, nil
}

// lastRelease is the release's latest revision, as helm list --all shows
// it: nil when there is none or it was uninstalled.
func lastRelease(cfg *action.Configuration, name string) (*release.Release, error) {
	l := action.NewList(cfg)
	l.All = true
	l.StateMask = action.ListAll
	l.Filter = "^" + regexp.QuoteMeta(name) + "$"
	list, err := l.Run()
	if err != nil {
		return nil, fmt.Errorf("listing Helm releases: %w", err)
	}
	for _, r := range list {
		rel, ok := r.(*release.Release)
		if !ok || rel.Name != name || rel.Info == nil || rel.Info.Status == common.StatusUninstalled {
			continue
		}
		return rel, nil
	}
	return nil, nil
}

// releasesNamed are the latest revisions of the releases named name in
// every namespace, as helm list --all --all-namespaces shows them (one
// uninstalled with its history kept is left out), by namespace.
func (k *kube) releasesNamed(name string) (map[string]*release.Release, error) {
	cfg, err := k.helm("")
	if err != nil {
		return nil, err
	}
	l := action.NewList(cfg)
	l.All, l.AllNamespaces = true, true
	l.StateMask = action.ListAll
	l.Filter = "^" + regexp.QuoteMeta(name) + "$"
	list, err := l.Run()
	if err != nil {
		return nil, fmt.Errorf("listing Helm releases in all namespaces: %w", err)
	}
	out := map[string]*release.Release{}
	for _, r := range list {
		rel, ok := r.(*release.Release)
		if !ok || rel.Name != name || rel.Info == nil || rel.Info.Status == common.StatusUninstalled {
			continue
		}
		out[rel.Namespace] = rel
	}
	return out, nil
}

// lastGood is the newest revision before the release's latest that was
// deployed (superseded since, or still marked deployed): what a
// rollback returns to; 0 for none.
func lastGood(cfg *action.Configuration, name string, latest int) (int, error) {
	history, err := cfg.Releases.History(name)
	if err != nil {
		return 0, fmt.Errorf("reading the release's history: %w", err)
	}
	good := 0
	for _, r := range history {
		rel, ok := r.(*release.Release)
		if !ok || rel.Info == nil || rel.Version >= latest || rel.Version <= good {
			continue
		}
		if rel.Info.Status == common.StatusDeployed || rel.Info.Status == common.StatusSuperseded {
			good = rel.Version
		}
	}
	return good, nil
}

// pendingChange reports a status an upgrade or a rollback left behind
// when it never finished.
func pendingChange(status string) bool {
	s := common.Status(status)
	return s == common.StatusPendingUpgrade || s == common.StatusPendingRollback
}

func (k *kube) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	return kubeobj.Resource(k.dyn, k.mapper, o, metav1.NamespaceDefault)
}

// isNoMatch reports resource's error for a kind the API does not serve.
func isNoMatch(err error) bool { return apimeta.IsNoMatchError(err) }

// object is a rendered object and what the API holds of it now.
type object struct {
	obj    *unstructured.Unstructured
	exists bool
	// applied is set when the object's managedFields prove that the
	// plugin applied it (appliedByPlugin): only then is it ever deleted.
	applied bool
	// namespace is where the object is ("" for a cluster-wide kind); a
	// namespaced object the manifest gives no namespace is in default.
	namespace string
	// drift names what differs from what the object should be.
	drift []string
}

// appliedByPlugin reports whether an object's managedFields hold a
// server-side apply by the plugin's field manager: the proof that the
// plugin made it, and not another tool (Helm, Cilium, kubectl).
func appliedByPlugin(o *unstructured.Unstructured) bool {
	for _, f := range o.GetManagedFields() {
		if f.Manager == FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// isSecret reports a core Secret, whose content no error may show.
func isSecret(o *unstructured.Unstructured) bool {
	return o.GetAPIVersion() == "v1" && o.GetKind() == "Secret"
}

// statusReason is what an API status reason may be to be shown: a word,
// as the API's own reasons are (a webhook may set any text).
var statusReason = regexp.MustCompile(`^[A-Za-z]{1,64}$`)

// redacted is an API error about o, and for a Secret only its status
// reason and code: the API's message, an admission webhook's above all,
// may quote the object (ceph's userKey).
func redacted(o *unstructured.Unstructured, err error) error {
	var st apierrors.APIStatus
	if err == nil || !isSecret(o) || !errors.As(err, &st) {
		return err
	}
	s := st.Status()
	reason := string(s.Reason)
	if !statusReason.MatchString(reason) {
		reason = "refused"
	}
	return fmt.Errorf("the API answered %s (%d); its message is not shown, as it may quote the Secret", reason, s.Code)
}

// read reads o and, when it exists and diff is set, applies it in a dry
// run to see what would change. A kind the API does not serve yet (its
// CRD comes with a chart not installed yet) is missing.
func (k *kube) read(ctx context.Context, o *unstructured.Unstructured, diff bool) (object, error) {
	ri, err := k.resource(o)
	if isNoMatch(err) {
		return object{obj: o}, nil
	}
	if err != nil {
		return object{}, err
	}
	have, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return object{obj: o}, nil
	}
	if err != nil {
		return object{}, fmt.Errorf("reading %s: %w", describe(o), redacted(o, err))
	}
	if have.GetDeletionTimestamp() != nil {
		// Being deleted: gone, as far as a plan goes.
		return object{obj: o}, nil
	}
	ob := object{obj: o, exists: true, applied: appliedByPlugin(have), namespace: have.GetNamespace()}
	if !diff {
		return ob, nil
	}
	would, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return object{}, fmt.Errorf("a dry run of the apply of %s: %w", describe(o), redacted(o, err))
	}
	ob.drift = kubeobj.Differences(have.Object, would.Object)
	return ob, nil
}

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// namespaceState is what the cluster holds of a namespace.
type namespaceState struct {
	name string
	// exists is false for a namespace being deleted, too.
	exists, terminating bool
	labels              map[string]string
}

func (n namespaceState) owned() bool { return n.labels[ManagedByLabel] == ManagedByValue }

func (k *kube) namespace(ctx context.Context, name string) (namespaceState, error) {
	ns, err := k.dyn.Resource(namespaces).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return namespaceState{name: name}, nil
	}
	if err != nil {
		return namespaceState{}, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	if ns.GetDeletionTimestamp() != nil {
		return namespaceState{name: name, terminating: true, labels: ns.GetLabels()}, nil
	}
	return namespaceState{name: name, exists: true, labels: ns.GetLabels()}, nil
}

// waitAvailable waits, at most wait, for a Deployment to be available;
// best effort, as the Python tool's kubectl wait: what follows fails on its
// own if it is not.
func (k *kube) waitAvailable(ctx context.Context, namespace, name string, wait time.Duration) {
	if wait <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	deployments := k.dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(namespace)
	for {
		d, err := deployments.Get(ctx, name, metav1.GetOptions{})
		if err == nil && available(d) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// Bounds of the retries of an apply a webhook refuses for not answering
// yet: cert-manager's and MetalLB's may, for a while after their
// Deployment is available.
const (
	webhookRetry      = 60 * time.Second
	webhookRetryEvery = 2 * time.Second
)

// retryWebhook runs apply, and again every every while it fails because
// a webhook could not be called, for at most bound; then the last error
// is returned. Any other error is returned at once.
func retryWebhook(ctx context.Context, bound, every time.Duration, apply func() error) error {
	deadline := time.Now().Add(bound)
	for {
		err := apply()
		if err == nil || !webhookNotReady(err) || time.Now().Add(every).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(every):
		}
	}
}

// webhookNotReady reports the API's error for a webhook it could not
// call ("Internal error occurred: failed calling webhook ...").
func webhookNotReady(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "webhook")
}

func available(d *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(d.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + " " + ns + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}
