package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/merge"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// Server-side apply is done with the merge library kube-apiserver uses
// (structured-merge-diff), but with types deduced from the objects rather
// than from the OpenAPI schemas: maps merge key by key, and every list is
// atomic (owned and replaced as a whole), where the real schemas make
// lists such as containers or ports merge by key.

// oneVersion is the converter of a store that keeps one version.
type oneVersion struct{}

func (oneVersion) Convert(v *typed.TypedValue, _ fieldpath.APIVersion) (*typed.TypedValue, error) {
	return v, nil
}

func (oneVersion) IsMissingVersionError(error) bool { return false }

var updater = (&merge.UpdaterBuilder{Converter: oneVersion{}}).BuildUpdater()

// untracked are the fields no manager owns, as kube-apiserver strips them
// from the managed fields sets.
var untracked = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
	fieldpath.MakePathOrDie("metadata", "deletionTimestamp"),
	fieldpath.MakePathOrDie("metadata", "deletionGracePeriodSeconds"),
)

// managerKey identifies a manager's entry the way kube-apiserver keys
// them: manager, operation and API version.
func managerKey(manager string, op metav1.ManagedFieldsOperationType, apiVersion string) string {
	b, _ := json.Marshal(metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: apiVersion})
	return string(b)
}

// decodeManaged reads an object's managed fields into the library's form,
// with each entry's time by key. Entries that cannot be read are dropped.
func decodeManaged(entries []metav1.ManagedFieldsEntry) (fieldpath.ManagedFields, map[string]*metav1.Time) {
	managed := fieldpath.ManagedFields{}
	times := map[string]*metav1.Time{}
	for _, e := range entries {
		set := &fieldpath.Set{}
		if e.FieldsV1 != nil {
			if err := set.FromJSON(e.FieldsV1.GetRawReader()); err != nil {
				continue
			}
		}
		key := managerKey(e.Manager, e.Operation, e.APIVersion)
		managed[key] = fieldpath.NewVersionedSet(set, fieldpath.APIVersion(e.APIVersion), e.Operation == metav1.ManagedFieldsOperationApply)
		times[key] = e.Time
	}
	return managed, times
}

// encodeManaged writes the managed fields back: one entry per manager,
// operation and version with a non-empty set, Apply entries first, then by
// time and manager; the entry of the manager that just wrote gets now.
func encodeManaged(managed fieldpath.ManagedFields, times map[string]*metav1.Time, writer string, now metav1.Time) ([]metav1.ManagedFieldsEntry, error) {
	var out []metav1.ManagedFieldsEntry
	for key, vs := range managed {
		set := vs.Set().Difference(untracked)
		if set.Empty() {
			continue
		}
		var e metav1.ManagedFieldsEntry
		if err := json.Unmarshal([]byte(key), &e); err != nil {
			return nil, err
		}
		raw, err := set.ToJSON()
		if err != nil {
			return nil, err
		}
		e.FieldsType = "FieldsV1"
		e.FieldsV1 = metav1.NewFieldsV1(string(raw))
		e.Time = times[key]
		if key == writer || e.Time == nil {
			e.Time = &now
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Operation != b.Operation {
			return a.Operation == metav1.ManagedFieldsOperationApply
		}
		if !a.Time.Equal(b.Time) {
			return a.Time.Before(b.Time)
		}
		return a.Manager < b.Manager
	})
	return out, nil
}

// trackable is an object as the managers see it: no managed fields, and
// no status where a status subresource owns it.
func trackable(r *resource, u *unstructured.Unstructured) (*typed.TypedValue, error) {
	obj := map[string]any{}
	if u != nil {
		obj = runtime.DeepCopyJSON(u.Object)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	if r.hasSub("status") {
		delete(obj, "status")
	}
	return typed.DeducedParseableType.FromUnstructured(obj)
}

// trackUpdate records in next's managed fields what manager's write of a
// non-apply kind changed (operation Update), as kube-apiserver does for
// create, update and patch.
func trackUpdate(r *resource, cur, next *unstructured.Unstructured, manager string) error {
	var entries []metav1.ManagedFieldsEntry
	if cur != nil {
		entries = cur.GetManagedFields()
	}
	managed, times := decodeManaged(entries)
	live, err := trackable(r, cur)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	upd, err := trackable(r, next)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	key := managerKey(manager, metav1.ManagedFieldsOperationUpdate, r.gv.String())
	_, managed, err = updater.Update(live, upd, fieldpath.APIVersion(r.gv.String()), managed, key)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	out, err := encodeManaged(managed, times, key, metav1.NewTime(time.Now().Truncate(time.Second)))
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	next.SetManagedFields(out)
	return nil
}

// applyPatch merges an applied configuration into live (nil when the
// object does not exist) for manager: the configuration's fields are set,
// the fields the manager applied before and omits now are removed unless
// another manager owns them, and a field another manager owns with a
// different value is a conflict unless force. It returns the object to
// store, with its managed fields.
func applyPatch(r *resource, live *unstructured.Unstructured, name, ns string, body []byte, manager string, force bool) (*unstructured.Unstructured, error) {
	cfg, err := unstructuredFrom(body)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	if cfg.GetAPIVersion() != r.gv.String() || cfg.GetKind() != r.kind {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %s", r.kind, cfg.GroupVersionKind()))
	}
	if cfg.GetName() != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", cfg.GetName(), name))
	}
	if r.namespaced && cfg.GetNamespace() != "" && cfg.GetNamespace() != ns {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if live != nil {
		if rv := cfg.GetResourceVersion(); rv != "" && rv != live.GetResourceVersion() {
			return nil, conflict(r, name)
		}
	}
	if md, ok := cfg.Object["metadata"].(map[string]any); ok {
		delete(md, "resourceVersion")
	}
	base := live
	if base == nil {
		base = &unstructured.Unstructured{Object: map[string]any{}}
		base.SetAPIVersion(r.gv.String())
		base.SetKind(r.kind)
		base.SetName(name)
		if r.namespaced {
			base.SetNamespace(ns)
		}
	}
	liveTV, err := trackable(r, base)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	cfgTV, err := trackable(r, cfg)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	managed, times := decodeManaged(base.GetManagedFields())
	key := managerKey(manager, metav1.ManagedFieldsOperationApply, r.gv.String())
	merged, managed, err := updater.Apply(liveTV, cfgTV, fieldpath.APIVersion(r.gv.String()), managed, key, force)
	if err != nil {
		var conflicts merge.Conflicts
		if errors.As(err, &conflicts) {
			return nil, applyConflict(conflicts)
		}
		return nil, apierrors.NewInternalError(err)
	}
	out := base.DeepCopy()
	if merged != nil {
		m, ok := merged.AsValue().Unstructured().(map[string]any)
		if !ok {
			return nil, apierrors.NewInternalError(errors.New("the applied object is not an object"))
		}
		out.Object = m
		if status, ok := base.Object["status"]; ok && r.hasSub("status") {
			out.Object["status"] = status
		}
	}
	entries, err := encodeManaged(managed, times, key, metav1.NewTime(time.Now().Truncate(time.Second)))
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out.SetManagedFields(entries)
	out.SetResourceVersion(base.GetResourceVersion())
	return out, nil
}

// applyConflict is kube-apiserver's 409 for conflicting managers.
func applyConflict(conflicts merge.Conflicts) error {
	var causes []metav1.StatusCause
	for _, c := range conflicts {
		causes = append(causes, metav1.StatusCause{
			Type: metav1.CauseTypeFieldManagerConflict, Message: "conflict with " + printManager(c.Manager), Field: c.Path.String(),
		})
	}
	var msg string
	if len(conflicts) == 1 {
		msg = fmt.Sprintf("Apply failed with 1 conflict: conflict with %s: %v", printManager(conflicts[0].Manager), conflicts[0].Path)
	} else {
		byManager := map[string][]string{}
		var managers []string
		for _, c := range conflicts {
			if _, ok := byManager[c.Manager]; !ok {
				managers = append(managers, c.Manager)
			}
			byManager[c.Manager] = append(byManager[c.Manager], c.Path.String())
		}
		sort.Strings(managers)
		var lines []string
		for _, m := range managers {
			lines = append(lines, fmt.Sprintf("conflicts with %s:", printManager(m)))
			for _, p := range byManager[m] {
				lines = append(lines, "- "+p)
			}
		}
		msg = fmt.Sprintf("Apply failed with %d conflicts: %s", len(conflicts), strings.Join(lines, "\n"))
	}
	return apierrors.NewApplyConflict(causes, msg)
}

// printManager names a manager in a conflict message.
func printManager(key string) string {
	var e metav1.ManagedFieldsEntry
	if err := json.Unmarshal([]byte(key), &e); err != nil {
		return fmt.Sprintf("%q", key)
	}
	if e.Operation == metav1.ManagedFieldsOperationUpdate {
		return fmt.Sprintf("%q using %s", e.Manager, e.APIVersion)
	}
	return fmt.Sprintf("%q", e.Manager)
}

// applyOptions checks an apply request's options as kube-apiserver does:
// a field manager is required.
func applyOptions(manager string) error {
	if manager != "" {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "PatchOptions"}, "",
		field.ErrorList{field.Required(field.NewPath("fieldManager"), "is required for apply patch")})
}

// defaultManager is the manager of a non-apply write without a
// fieldManager: the User-Agent up to its first slash, printable runes only.
func defaultManager(userAgent string) string {
	head, _, _ := strings.Cut(userAgent, "/")
	var b strings.Builder
	for _, r := range head {
		if unicode.IsPrint(r) && b.Len() < 128 {
			b.WriteRune(r)
		}
	}
	return b.String()
}
