package kube

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// crdCleanupFinalizer is the finalizer the apiextensions server puts on a
// CustomResourceDefinition being deleted, until its objects are gone.
const crdCleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

// validateCRD keeps the rules of a CustomResourceDefinition that decide
// where its kinds are served.
func validateCRD(u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
	scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
	if u.GetName() != plural+"."+group {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), u.GetName(), `must be spec.names.plural+"."+spec.group`))
	}
	if kind == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "names", "kind"), ""))
	}
	if scope != "Namespaced" && scope != "Cluster" {
		errs = append(errs, field.NotSupported(field.NewPath("spec", "scope"), scope, []string{"Cluster", "Namespaced"}))
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	storage := 0
	for _, v := range versions {
		if vm, ok := v.(map[string]any); ok && vm["storage"] == true {
			storage++
		}
	}
	if len(versions) == 0 {
		errs = append(errs, field.Required(field.NewPath("spec", "versions"), "must have exactly one version marked as storage version"))
	} else if storage != 1 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "versions"), versions, "must have exactly one version marked as storage version"))
	}
	return errs
}

// prepareCRD applies a CustomResourceDefinition's defaults and writes the
// status the apiextensions controllers set once its names are accepted:
// acceptedNames, storedVersions and the NamesAccepted and Established
// conditions (their transition times kept from the stored object).
func prepareCRD(u, cur *unstructured.Unstructured) {
	names, _, _ := unstructured.NestedMap(u.Object, "spec", "names")
	if names == nil {
		names = map[string]any{}
	}
	kind, _ := names["kind"].(string)
	if s, _ := names["singular"].(string); s == "" {
		names["singular"] = strings.ToLower(kind)
	}
	if l, _ := names["listKind"].(string); l == "" {
		names["listKind"] = kind + "List"
	}
	_ = unstructured.SetNestedMap(u.Object, names, "spec", "names")
	if s, _, _ := unstructured.NestedString(u.Object, "spec", "conversion", "strategy"); s == "" {
		_ = unstructured.SetNestedField(u.Object, "None", "spec", "conversion", "strategy")
	}

	stored := map[string]bool{}
	var storedVersions []any
	if cur != nil {
		prev, _, _ := unstructured.NestedSlice(cur.Object, "status", "storedVersions")
		for _, v := range prev {
			stored[fmt.Sprint(v)] = true
			storedVersions = append(storedVersions, v)
		}
	}
	if v := storageVersion(u); v != "" && !stored[v] {
		storedVersions = append(storedVersions, v)
	}
	now := conditionTime(cur)
	status := map[string]any{
		"acceptedNames": runtime.DeepCopyJSONValue(names),
		"conditions": []any{
			crdCondition("NamesAccepted", "NoConflicts", "no conflicts found", now),
			crdCondition("Established", "InitialNamesAccepted", "the initial names have been accepted", now),
		},
		"storedVersions": storedVersions,
	}
	u.Object["status"] = status
}

// conditionTime is the transition time of the conditions: the stored
// one, or none for a new definition (syncCRDs stamps it).
func conditionTime(cur *unstructured.Unstructured) string {
	if cur != nil {
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, c := range conds {
			if cm, ok := c.(map[string]any); ok {
				if t, ok := cm["lastTransitionTime"].(string); ok {
					return t
				}
			}
		}
	}
	return ""
}

func crdCondition(typ, reason, message, at string) map[string]any {
	c := map[string]any{"type": typ, "status": "True", "reason": reason, "message": message}
	if at != "" {
		c["lastTransitionTime"] = at
	}
	return c
}

// storageVersion returns the name of the version marked storage.
func storageVersion(u *unstructured.Unstructured) string {
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		if vm, ok := v.(map[string]any); ok && vm["storage"] == true {
			name, _ := vm["name"].(string)
			return name
		}
	}
	return ""
}

// crdKey names the store of a CustomResourceDefinition's objects.
func crdKey(u *unstructured.Unstructured) string { return u.GetName() }

// syncCRDs serves the kinds of the stored CustomResourceDefinitions: one
// resource per served version, all keeping their objects in one store,
// and fills in the conditions' transition times of new definitions.
func (st *state) syncCRDs() {
	st.custom = nil
	seen := map[string]bool{}
	for _, k := range sortedKeys(st.objs[crdsResource]) {
		u := st.objs[crdsResource][k].(*unstructured.Unstructured)
		stampConditions(u, st.metaNow().UTC().Format("2006-01-02T15:04:05Z"))
		store := st.crdStore(u)
		seen[crdKey(u)] = true
		st.custom = append(st.custom, servedVersions(u, store)...)
	}
	for key, store := range st.crdStores {
		if !seen[key] {
			delete(st.objs, store)
			delete(st.crdStores, key)
		}
	}
}

// stampConditions sets the transition time of conditions that have none.
func stampConditions(u *unstructured.Unstructured, now string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if cm, ok := c.(map[string]any); ok && cm["lastTransitionTime"] == nil {
			cm["lastTransitionTime"] = now
		}
	}
	_ = unstructured.SetNestedSlice(u.Object, conds, "status", "conditions")
}

// crdStore returns the store of a definition's objects, creating it.
func (st *state) crdStore(u *unstructured.Unstructured) *resource {
	key := crdKey(u)
	if store, ok := st.crdStores[key]; ok {
		return store
	}
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
	store := &resource{name: plural, gv: schema.GroupVersion{Group: group, Version: storageVersion(u)}, generic: true}
	st.crdStores[key] = store
	st.objs[store] = map[string]runtime.Object{}
	return store
}

// servedVersions describes the resources a definition serves.
func servedVersions(u *unstructured.Unstructured, store *resource) []*resource {
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	names, _, _ := unstructured.NestedMap(u.Object, "spec", "names")
	scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
	str := func(k string) string { s, _ := names[k].(string); return s }
	strs := func(k string) []string {
		l, _ := names[k].([]any)
		var out []string
		for _, v := range l {
			out = append(out, fmt.Sprint(v))
		}
		return out
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var out []*resource
	for _, v := range versions {
		vm, ok := v.(map[string]any)
		if !ok || vm["served"] != true {
			continue
		}
		name, _ := vm["name"].(string)
		r := &resource{
			name: str("plural"), singular: str("singular"), kind: str("kind"),
			gv: schema.GroupVersion{Group: group, Version: name}, namespaced: scope == "Namespaced",
			shortNames: strs("shortNames"), categories: strs("categories"),
			generic: true, generation: true, stored: store, crd: u.GetName(),
			fields: []string{"metadata.name", "metadata.namespace"},
		}
		if _, ok, _ := unstructured.NestedMap(vm, "subresources", "status"); ok {
			r.subs = []string{"status"}
		}
		out = append(out, r)
	}
	return out
}

// deleteCRD deletes a definition the way its cleanup finalizer ends up
// doing: the answer is the definition marked for deletion with the
// finalizer on, and by the time it is sent the definition's objects, its
// served resources and the definition itself are gone.
func (st *state) deleteCRD(cur *unstructured.Unstructured, dryRun bool) (runtime.Object, error) {
	out := cur.DeepCopy()
	now := st.metaNow()
	out.SetDeletionTimestamp(&now)
	out.SetDeletionGracePeriodSeconds(new(int64(0)))
	if !containsString(out.GetFinalizers(), crdCleanupFinalizer) {
		out.SetFinalizers(append(out.GetFinalizers(), crdCleanupFinalizer))
	}
	if dryRun {
		return out, nil
	}
	out.SetResourceVersion(st.nextRV())
	delete(st.objs[crdsResource], cur.GetName())
	st.syncCRDs()
	return out, nil
}

func containsString(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// customResource finds a served custom resource.
func (st *state) customResource(gv schema.GroupVersion, name string) *resource {
	for _, r := range st.custom {
		if r.gv == gv && r.name == name {
			return r
		}
	}
	return nil
}

// customGroups returns the groups of the custom resources, sorted, each
// with its versions in the order the definitions list them.
func (st *state) customGroups() (groups []string, versions map[string][]string) {
	versions = map[string][]string{}
	for _, r := range st.custom {
		if _, ok := versions[r.gv.Group]; !ok {
			groups = append(groups, r.gv.Group)
		}
		if !containsString(versions[r.gv.Group], r.gv.Version) {
			versions[r.gv.Group] = append(versions[r.gv.Group], r.gv.Version)
		}
	}
	sort.Strings(groups)
	return groups, versions
}
