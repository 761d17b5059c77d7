// Package kubeobj is what the plugins share to write unstructured objects
// to a Kubernetes API: finding an object's resource through discovery,
// and telling in which fields what a server-side apply would store
// differs from what is stored.
package kubeobj

import (
	"fmt"
	"reflect"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// Resource is the client of o's kind, in o's namespace for a namespaced
// kind (defaultNamespace when o names none), as mapper maps the kind to
// a resource of the API. A kind the API does not serve is an error that
// says so (apimeta.IsNoMatchError tells it).
func Resource(dyn dynamic.Interface, mapper apimeta.RESTMapper, o *unstructured.Unstructured, defaultNamespace string) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("the API does not serve %s (are its CRDs installed?): %w", gvk.Kind, err)
	}
	if m.Scope.Name() != apimeta.RESTScopeNameNamespace {
		return dyn.Resource(m.Resource), nil
	}
	ns := o.GetNamespace()
	if ns == "" {
		ns = defaultNamespace
	}
	return dyn.Resource(m.Resource).Namespace(ns), nil
}

// Differences names the top-level fields (and the labels and
// annotations) in which would differs from have, leaving out what the API
// server keeps for itself (status, metadata it sets).
func Differences(have, would map[string]any) []string {
	var out []string
	for _, k := range []string{"spec", "data", "stringData", "type"} {
		if !reflect.DeepEqual(have[k], would[k]) {
			out = append(out, k)
		}
	}
	for _, k := range []string{"labels", "annotations"} {
		h, _, _ := unstructured.NestedFieldNoCopy(have, "metadata", k)
		w, _, _ := unstructured.NestedFieldNoCopy(would, "metadata", k)
		if !reflect.DeepEqual(h, w) {
			out = append(out, "metadata."+k)
		}
	}
	return out
}
