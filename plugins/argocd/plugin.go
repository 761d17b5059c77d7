package argocd

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

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

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/plugins/internal/kubeobj"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// FieldManager is the field manager of the plugin's server-side applies.
const FieldManager = "taloscluster"

// callTimeout bounds each request to Argo CD's or the cluster's API.
const callTimeout = 30 * time.Second

// Plugin is the argocd plugin (reconcile.Plugin).
type Plugin struct {
	// read reads the file argocd.kubeconfig names.
	read func(name string) ([]byte, error)
	// currentContext uses the kubeconfig's current context whatever
	// argocd.context says (the agent: a pull request does not choose
	// among the operator's contexts).
	currentContext bool
	// hostDefaults lets argocd.context alone name a context of the
	// default kubeconfig of this host (the CLI).
	hostDefaults bool
	// ingress is where the cluster's ingress is reached.
	ingress func(c *spec.Cluster) Ingress
}

// New returns the plugin confined to files (the agent: the cluster's
// secrets directory): argocd.kubeconfig must name a file inside it, and
// not secrets.yaml, and its current context is used (argocd.context is not
// a pull request's to choose).
func New(files fs.FS) *Plugin {
	return &Plugin{ingress: proxmoxIngress, currentContext: true, read: func(file string) ([]byte, error) {
		name := path.Clean(file)
		if !fs.ValidPath(name) {
			return nil, fmt.Errorf("argocd.kubeconfig %q must be a path inside the cluster's secrets directory", file)
		}
		if name == spec.SecretsFile {
			return nil, fmt.Errorf("argocd.kubeconfig must not name %s", spec.SecretsFile)
		}
		data, err := boundedfile.ReadFS(files, name, boundedfile.Small)
		if err != nil {
			return nil, fmt.Errorf("argocd.kubeconfig: %w", err)
		}
		return data, nil
	}}
}

// NewOnHost returns the plugin of the cluster directory dir on this host
// (the CLI): argocd.kubeconfig is a path relative to dir, or absolute, as
// the Python tool reads it; argocd.context alone is a context of the
// default kubeconfig ($KUBECONFIG, else ~/.kube/config), as kubectl's.
func NewOnHost(dir string) *Plugin {
	return &Plugin{ingress: proxmoxIngress, hostDefaults: true, read: func(file string) ([]byte, error) {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		data, err := boundedfile.Read(p, boundedfile.Small)
		if err != nil {
			return nil, fmt.Errorf("argocd.kubeconfig: %w", err)
		}
		return data, nil
	}}
}

// proxmoxIngress is the ingress pool of a Proxmox cluster, verbatim:
// network.external's, or network.cluster's.
func proxmoxIngress(c *spec.Cluster) Ingress {
	for _, l2 := range []*spec.L2{c.Network.External, &c.Network.Cluster} {
		if l2 != nil && l2.IngressPool != nil {
			return Ingress{Pool: []string{l2.IngressPool.String()}}
		}
	}
	return Ingress{}
}

// Name is the plugin's section.
func (*Plugin) Name() string { return "argocd" }

// After: the Rancher cluster id goes on the cluster Secret.
func (*Plugin) After() []string { return []string{"rancher"} }

// Configured: the section names where to apply (argocd.kubeconfig or
// argocd.context); url and token alone are refused by validate.
func (*Plugin) Configured(c *spec.Cluster) bool {
	a := c.Plugins.ArgoCD
	k, _ := a["kubeconfig"].(string)
	x, _ := a["context"].(string)
	return a != nil && (k != "" || x != "")
}

// where an object goes.
type where string

const (
	onArgoCD  where = "argocd"
	onCluster where = "cluster"
)

// object is a rendered object, where it goes, and what its API holds of
// it now.
type object struct {
	obj    *unstructured.Unstructured
	where  where
	exists bool
	// drift names what differs from what the object should be; empty
	// when it matches.
	drift []string
	// orphan is set for an object that should not exist any more.
	orphan bool
}

// state is what Observe read.
type state struct {
	objects []object
}

// Observe renders the registration and reads each object from its API:
// missing, drifted (a server-side dry run of its apply differs from what
// is stored) or in place.
func (p *Plugin) Observe(ctx context.Context, env reconcile.PluginEnv) (reconcile.PluginState, error) {
	c := env.Cluster
	public := env.Public
	if public == nil {
		public = env.Kubeconfig
	}
	var cl Cluster
	var downstream *client
	var err error
	if env.Kubeconfig == nil {
		// Only a teardown asks without one (a cluster never built): the
		// objects on Argo CD are found by name all the same.
		if !env.Teardown {
			return nil, errors.New("the cluster has no kubeconfig")
		}
	} else if cl, downstream, err = p.cluster(ctx, env, public); err != nil {
		if !env.Teardown {
			return nil, err
		}
		// A teardown of a cluster that does not answer still removes
		// the registration on Argo CD; what is on the cluster goes with
		// its machines.
		downstream = nil
	}
	cl.Ingress, cl.OpenStackProject = p.ingress(c), env.Project
	if env.IngressVIP != "" {
		// OpenStack: MetalLB announces the ingress port's address.
		cl.Ingress = Ingress{VIP: env.IngressVIP, FloatingIP: env.IngressPublic}
	}
	objs, err := Render(SettingsOf(c), cl)
	if err != nil {
		return nil, err
	}
	if downstream == nil {
		objs.Cluster = nil
	}
	argo, err := p.argoClient(c)
	if err != nil {
		return nil, err
	}
	st := &state{}
	for _, side := range []struct {
		c     *client
		objs  []*unstructured.Unstructured
		where where
		what  string
	}{{argo, objs.ArgoCD, onArgoCD, "Argo CD"}, {downstream, objs.Cluster, onCluster, "the cluster"}} {
		for _, o := range side.objs {
			ob, err := side.c.read(ctx, o)
			if err != nil {
				return nil, fmt.Errorf("reading %s on %s: %w", describe(o), side.what, err)
			}
			ob.where = side.where
			st.objects = append(st.objects, ob)
		}
	}
	for _, o := range leftovers(c.Name, objs.ArgoCD) {
		ob, err := argo.present(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("reading %s on Argo CD: %w", describe(o), err)
		}
		if ob.exists {
			ob.where, ob.orphan = onArgoCD, true
			st.objects = append(st.objects, ob)
		}
	}
	if downstream != nil && len(objs.Cluster) == 0 && c.Provider == spec.ProviderOpenStack && !SettingsOf(c).enabled("cinder") {
		// cinder turned off: a cloud config an earlier converge wrote is
		// the cluster's OpenStack credential left behind.
		orphan := obj(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta(CinderSecret, CinderNamespace, nil)})
		ob, err := downstream.present(ctx, orphan)
		if err != nil {
			return nil, fmt.Errorf("reading %s on the cluster: %w", describe(orphan), err)
		}
		if ob.exists {
			ob.where, ob.orphan = onCluster, true
			st.objects = append(st.objects, ob)
		}
	}
	return st, nil
}

// cluster reads what the registration needs of the cluster: its address
// and client credentials from the kubeconfig people use, and its Rancher
// id (the rancher plugin's result, or its Rancher agent's); and returns a
// client of its API.
func (p *Plugin) cluster(ctx context.Context, env reconcile.PluginEnv, public []byte) (Cluster, *client, error) {
	cl, err := ClusterOf(public)
	if err != nil {
		return Cluster{}, nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(env.Kubeconfig)
	if err != nil {
		return Cluster{}, nil, fmt.Errorf("the cluster's kubeconfig: %w", err)
	}
	downstream, err := newClient(cfg)
	if err != nil {
		return Cluster{}, nil, err
	}
	if r, ok := env.Results["rancher"]; ok {
		cl.RancherID = r["cluster_id"]
	} else if cl.RancherID, err = downstream.rancherID(ctx); err != nil {
		return Cluster{}, nil, err
	}
	return cl, downstream, nil
}

// leftovers are the objects on Argo CD a registration may have made that
// the current one does not render (argocd.git or infra removed): they are
// found by name and removed, as they hold the Git token.
func leftovers(name string, rendered []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range []*unstructured.Unstructured{
		obj(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta("repo-"+name, Namespace, nil)}),
		obj(map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta(name, Namespace, nil)}),
		obj(map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta(name+"-cluster", Namespace, nil)}),
	} {
		if !slices.ContainsFunc(rendered, func(r *unstructured.Unstructured) bool {
			return r.GetKind() == o.GetKind() && r.GetName() == o.GetName()
		}) {
			out = append(out, o)
		}
	}
	return out
}

// Preflight refuses a section the plugin cannot use, before converge
// changes anything: a kubeconfig that cannot be read or is not one, a
// context it does not have, cinder's cloud config without an OpenStack
// application credential to put in it.
func (p *Plugin) Preflight(c *spec.Cluster) error {
	if _, err := p.argoClient(c); err != nil {
		return err
	}
	s := SettingsOf(c)
	if s.GitURL != "" && s.enabled("cinder") {
		if _, err := cinder(s); err != nil {
			return err
		}
	}
	return nil
}

// argoClient is the client of Argo CD's cluster: the kubeconfig file
// argocd.kubeconfig names in the cluster directory, and its context
// argocd.context (or the current one).
func (p *Plugin) argoClient(c *spec.Cluster) (*client, error) {
	file, _ := c.Plugins.ArgoCD["kubeconfig"].(string)
	kctx, _ := c.Plugins.ArgoCD["context"].(string)
	if p.currentContext {
		kctx = ""
	}
	if file == "" {
		if !p.hostDefaults {
			return nil, errors.New("argocd.context alone names a context of a default kubeconfig, which the agent does not read: put the Argo CD kubeconfig in the cluster's secrets directory and name it in argocd.kubeconfig")
		}
		// The CLI, as kubectl and the Python tool: $KUBECONFIG, else
		// ~/.kube/config, with argocd.context.
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(),
			&clientcmd.ConfigOverrides{CurrentContext: kctx}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("argocd.context %q of the default kubeconfig ($KUBECONFIG, else ~/.kube/config): %w", kctx, err)
		}
		return newClient(rc)
	}
	data, err := p.read(file)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The parser's message may quote the file, which holds
		// credentials: it is not passed on.
		return nil, fmt.Errorf("argocd.kubeconfig %s is not a kubeconfig file", file)
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, kctx, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("argocd.kubeconfig %s (context %q): %w", file, kctx, err)
	}
	return newClient(rc)
}

// client reaches one API server for unstructured objects.
type client struct {
	dyn    dynamic.Interface
	mapper apimeta.RESTMapper
}

func newClient(cfg *rest.Config) (*client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = callTimeout
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &client{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

func (c *client) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	return kubeobj.Resource(c.dyn, c.mapper, o, metav1.NamespaceDefault)
}

// rancherID is the id Rancher gave the cluster, as its agent keeps it:
// the namespace field of the first cattle-credentials Secret in
// cattle-system; "" without a Rancher agent.
func (c *client) rancherID(ctx context.Context) (string, error) {
	secrets := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace("cattle-system")
	list, err := secrets.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the cluster's Rancher identity (Secrets in cattle-system): %w", err)
	}
	for _, item := range list.Items {
		if !strings.HasPrefix(item.GetName(), "cattle-credentials") {
			continue
		}
		enc, _, _ := unstructured.NestedString(item.Object, "data", "namespace")
		id, err := base64.StdEncoding.DecodeString(enc)
		if enc == "" || err != nil {
			continue
		}
		return string(id), nil
	}
	return "", nil
}

// present reads whether o exists, by name.
func (c *client) present(ctx context.Context, o *unstructured.Unstructured) (object, error) {
	ri, err := c.resource(o)
	if err != nil {
		return object{}, err
	}
	_, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return object{obj: o}, nil
	}
	if err != nil {
		return object{}, err
	}
	return object{obj: o, exists: true}, nil
}

// read reads o from the API and, when it exists, applies it in a dry run
// to see what would change.
func (c *client) read(ctx context.Context, o *unstructured.Unstructured) (object, error) {
	ri, err := c.resource(o)
	if err != nil {
		return object{}, err
	}
	have, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return object{obj: o}, nil
	}
	if err != nil {
		return object{}, err
	}
	would, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return object{}, fmt.Errorf("a dry run of its apply: %w", err)
	}
	return object{obj: o, exists: true, drift: kubeobj.Differences(have.Object, would.Object)}, nil
}

func describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + " " + ns + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}

// kind is a plan's resource kind for an object: its kind in lower case.
func kind(o *unstructured.Unstructured) plan.ResourceKind {
	return plan.ResourceKind(strings.ToLower(o.GetKind()))
}

// Plugin operations.
type (
	applyObject  struct{ obj object }
	deleteObject struct{ obj object }
)

// Plan applies each object that is missing or drifted; a Secret's
// values are never shown.
func (*Plugin) Plan(_ *spec.Cluster, s reconcile.PluginState) ([]plan.Change, error) {
	st, ok := s.(*state)
	if !ok {
		return nil, errors.New("argocd: not its state")
	}
	var out []plan.Change
	for _, o := range st.objects {
		res := plan.Resource{Kind: kind(o.obj), Name: name(o)}
		switch {
		case o.orphan && o.where == onCluster:
			out = append(out, plan.Change{Action: plan.ActionDelete, Resource: res,
				Reason: "argocd.cinder is not enabled: the cloud config an earlier converge wrote (the OpenStack credential) is removed", Op: deleteObject{obj: o}})
		case o.orphan:
			out = append(out, plan.Change{Action: plan.ActionDelete, Resource: res,
				Reason: "argocd.git is not set any more: what an earlier registration made for it is removed", Op: deleteObject{obj: o}})
		case !o.exists:
			out = append(out, plan.Change{Action: plan.ActionCreate, Resource: res,
				Reason: "the cluster's registration (" + string(o.where) + ")", Expects: "it does not exist or matches", Op: applyObject{obj: o}})
		case len(o.drift) > 0:
			out = append(out, plan.Change{Action: plan.ActionUpdate, Resource: res,
				Reason:     "differs from the cluster's registration (" + string(o.where) + ")",
				Attributes: []plan.Attribute{{Key: "differs", Value: strings.Join(o.drift, ",")}},
				Expects:    "it exists", Op: applyObject{obj: o}})
		}
	}
	return out, nil
}

// PlanTeardown deletes what exists, in the Python plugin's order: the
// cinder Secret on the cluster (never its namespace), then on Argo CD the
// root Application, the cluster's Application, the AppProject, the
// cluster Secret and the repository Secret.
func (*Plugin) PlanTeardown(_ *spec.Cluster, s reconcile.PluginState) ([]plan.Change, error) {
	st, ok := s.(*state)
	if !ok {
		return nil, errors.New("argocd: not its state")
	}
	rank := func(o object) int {
		switch {
		case o.where == onCluster:
			return 0
		case o.obj.GetKind() == "Application" && !strings.HasSuffix(o.obj.GetName(), "-cluster"):
			return 1
		case o.obj.GetKind() == "Application":
			return 2
		case o.obj.GetKind() == "AppProject":
			return 3
		case strings.HasPrefix(o.obj.GetName(), "repo-"):
			return 5
		}
		return 4
	}
	var out []plan.Change
	for r := 0; r <= 5; r++ {
		for _, o := range st.objects {
			if rank(o) != r || !o.exists || o.obj.GetKind() == "Namespace" {
				continue
			}
			out = append(out, plan.Change{Action: plan.ActionDelete, Resource: plan.Resource{Kind: kind(o.obj), Name: name(o)},
				Reason: "destroy: the cluster's registration (" + string(o.where) + ")", Op: deleteObject{obj: o}})
		}
	}
	return out, nil
}

func name(o object) string {
	n := o.obj.GetName()
	if ns := o.obj.GetNamespace(); ns != "" {
		n = ns + "/" + n
	}
	return string(o.where) + ":" + n
}

// Apply makes one step: a server-side apply, or a delete that finds the
// object gone done.
func (p *Plugin) Apply(ctx context.Context, env reconcile.PluginEnv, ch plan.Change) (map[string]string, error) {
	var o object
	var del bool
	switch op := ch.Op.(type) {
	case applyObject:
		o = op.obj
	case deleteObject:
		o, del = op.obj, true
	default:
		return nil, fmt.Errorf("argocd: no operation for %s %s", ch.Action, ch.Resource)
	}
	var c *client
	var err error
	if o.where == onArgoCD {
		c, err = p.argoClient(env.Cluster)
	} else {
		var cfg *rest.Config
		if cfg, err = clientcmd.RESTConfigFromKubeConfig(env.Kubeconfig); err == nil {
			c, err = newClient(cfg)
		}
	}
	if err != nil {
		return nil, err
	}
	ri, err := c.resource(o.obj)
	if err != nil {
		return nil, err
	}
	if del {
		err := ri.Delete(ctx, o.obj.GetName(), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	_, err = ri.Apply(ctx, o.obj.GetName(), o.obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	return nil, err
}
