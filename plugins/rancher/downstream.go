package rancher

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/plugins/internal/kubeobj"
)

// FieldManager is the field manager of the plugin's server-side applies.
const FieldManager = "taloscluster"

// AgentNamespace is where Rancher's agent runs on the cluster.
const AgentNamespace = "cattle-system"

// kubeTimeout bounds each request to the cluster's API.
const kubeTimeout = 30 * time.Second

// downstream is a client of the cluster's own Kubernetes API.
type downstream struct {
	dyn    dynamic.Interface
	mapper apimeta.RESTMapper
}

// newDownstream returns the client of the cluster the kubeconfig names.
func newDownstream(kubeconfig []byte) (*downstream, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the cluster's kubeconfig: %w", err)
	}
	cfg.Timeout = kubeTimeout
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client of the cluster: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client of the cluster: %w", err)
	}
	return &downstream{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

var (
	secretsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// agentCreds is what the cluster's Rancher agent credentials say of its
// registration: the cluster id of a cattle-credentials Secret that names
// one (its namespace field, as Rancher writes it when it redeploys the
// agent for the cluster), and the registration tokens of those that name
// none (as the import manifest makes them). The tokens are secrets: they
// are never shown.
type agentCreds struct {
	id     string
	tokens []string
}

// agentCredentials reads the cattle-credentials Secrets in cattle-system:
// id is the namespace field of the first that has one that decodes;
// tokens are the token fields of those whose namespace is there and
// empty. A Secret whose namespace is absent or does not decode counts
// for neither. Nothing without a Rancher agent.
func (d *downstream) agentCredentials(ctx context.Context) (agentCreds, error) {
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	var out agentCreds
	list, err := d.dyn.Resource(secretsGVR).Namespace(AgentNamespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return out, nil
	}
	if err != nil {
		// An error of a Secret list quotes no Secret's data.
		return out, fmt.Errorf("reading the cluster's Rancher identity (Secrets in %s): %w", AgentNamespace, err)
	}
	for _, item := range list.Items {
		if !strings.HasPrefix(item.GetName(), "cattle-credentials") {
			continue
		}
		ns, nsOK := decoded(item.Object, "namespace")
		switch tok, _ := decoded(item.Object, "token"); {
		case nsOK && ns != "":
			if out.id == "" {
				out.id = ns
			}
		case nsOK && tok != "":
			out.tokens = append(out.tokens, tok)
		}
	}
	return out, nil
}

// decoded is the base64 value of the Secret's data field; false when it
// is absent or does not decode.
func decoded(obj map[string]any, field string) (string, bool) {
	enc, ok, _ := unstructured.NestedString(obj, "data", field)
	if !ok {
		return "", false
	}
	v, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	return string(v), true
}

// manifestObjects parses a multi-document YAML manifest into its
// objects, Namespaces first so that what lives in them can be applied.
// Errors never quote the manifest: it holds the registration token.
func manifestObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var namespaces, rest []*unstructured.Unstructured
	for i := 1; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the import manifest's document %d is not YAML", i)
		}
		if len(doc) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: doc}
		if o.GetKind() == "" || o.GetAPIVersion() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("the import manifest's document %d is not a Kubernetes object (kind, apiVersion and name are needed)", i)
		}
		if o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "" {
			namespaces = append(namespaces, o)
		} else {
			rest = append(rest, o)
		}
	}
	if len(namespaces)+len(rest) == 0 {
		return nil, errors.New("the import manifest holds no objects")
	}
	return append(namespaces, rest...), nil
}

// apply server-side applies each object, in order.
func (d *downstream) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if err := d.applyOne(ctx, o); err != nil {
			return fmt.Errorf("applying %s: %w", describe(o), err)
		}
	}
	return nil
}

func (d *downstream) applyOne(ctx context.Context, o *unstructured.Unstructured) error {
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	ri, err := kubeobj.Resource(d.dyn, d.mapper, o, metav1.NamespaceDefault)
	if err != nil {
		return err
	}
	_, err = ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if o.GetKind() == "Secret" {
		return redactStatus(err)
	}
	return err
}

// redactStatus drops what an API error may quote of a Secret (its data):
// only the error's reason and code remain.
func redactStatus(err error) error {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return err
	}
	s := st.Status()
	return fmt.Errorf("%s (%d)", s.Reason, s.Code)
}

// removeAgent deletes cattle-system without waiting for it to go; a
// namespace already gone is done.
func (d *downstream) removeAgent(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	err := d.dyn.Resource(namespacesGVR).Delete(ctx, AgentNamespace, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("uninstalling the Rancher agent failed: deleting namespace %s: %w", AgentNamespace, err)
	}
	return nil
}

func describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + " " + ns + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}
