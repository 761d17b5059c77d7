package kube

import (
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// writeOptions are the query options of a write: dry run, field manager
// and force.
type writeOptions struct {
	dryRun  bool
	manager string
	force   bool
}

// parseWriteOptions reads and checks a write's query options the way
// kube-apiserver validates CreateOptions, UpdateOptions and PatchOptions.
func parseWriteOptions(r *http.Request, verb string) (writeOptions, error) {
	q := r.URL.Query()
	var o writeOptions
	kind := map[string]string{"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions", "delete": "DeleteOptions"}[verb]
	for _, v := range q["dryRun"] {
		if v != metav1.DryRunAll {
			return o, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "",
				field.ErrorList{field.NotSupported(field.NewPath("dryRun"), v, []string{metav1.DryRunAll})})
		}
		o.dryRun = true
	}
	o.manager = q.Get("fieldManager")
	if f := q.Get("force"); f != "" {
		force, err := strconv.ParseBool(f)
		if err != nil {
			return o, apierrors.NewBadRequest("invalid force " + strconv.Quote(f))
		}
		o.force = force
	}
	return o, nil
}

// serveStore serves the generic kinds and the writes of namespaces that
// need managed fields, dry runs or deletion.
func (s *Server) serveStore(r *http.Request, req request, verb string, body []byte) (runtime.Object, int, error) {
	o, err := parseWriteOptions(r, verb)
	if err != nil {
		return nil, 0, err
	}
	var del *metav1.DeleteOptions
	if verb == "delete" {
		if del, err = deleteOptions(r, req.res, body); err != nil {
			return nil, 0, err
		}
		o.dryRun = o.dryRun || len(del.DryRun) > 0
	}
	ct := mediaOf(r.Header.Get("Content-Type"))
	apply := verb == "patch" && (ct == string(types.ApplyYAMLPatchType) || ct == string(types.ApplyCBORPatchType))
	if apply {
		if err := applyOptions(o.manager); err != nil {
			return nil, 0, err
		}
		if ct == string(types.ApplyCBORPatchType) {
			return nil, 0, unsupportedMediaType(ct)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if req.res.crd != "" && st.customResource(req.res.gv, req.res.name) == nil {
		return nil, 0, notFoundPath()
	}
	if o.dryRun {
		defer st.snapshot()()
	}
	if req.res == namespacesResource {
		return s.serveNamespace(r, req, verb, body, o, del, apply)
	}
	if o.manager == "" && !apply {
		o.manager = defaultManager(r.UserAgent())
	}
	return st.serveGeneric(r, req, verb, body, o, del, apply)
}

// deleteOptions reads a delete request's options from its body and query.
func deleteOptions(r *http.Request, res *resource, body []byte) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	if len(body) > 0 {
		if err := decodeOptions(r, body, res, opts); err != nil {
			return nil, err
		}
	}
	for _, v := range opts.DryRun {
		if v != metav1.DryRunAll {
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "",
				field.ErrorList{field.NotSupported(field.NewPath("dryRun"), v, []string{metav1.DryRunAll})})
		}
	}
	return opts, nil
}

// serveGeneric carries out a verb on a generic kind. s.mu is held.
func (st *state) serveGeneric(r *http.Request, req request, verb string, body []byte, o writeOptions, del *metav1.DeleteOptions, apply bool) (runtime.Object, int, error) {
	res, ns, name, sub := req.res, req.namespace, req.name, req.sub
	gopts := genericOpts{dryRun: o.dryRun, manager: o.manager}
	answer := func(u *unstructured.Unstructured, code int, err error) (runtime.Object, int, error) {
		if err != nil {
			return nil, 0, err
		}
		obj, err := toTyped(res, u)
		return obj, code, err
	}
	switch {
	case verb == "list" && sub == "":
		lsel, fsel, err := selectors(r, res)
		if err != nil {
			return nil, 0, err
		}
		obj, err := st.genericList(res, ns, lsel, fsel)
		return obj, http.StatusOK, err
	case verb == "get":
		u, err := st.genericGet(res, ns, name)
		return answer(u, http.StatusOK, err)
	case verb == "create" && sub == "" && name == "":
		u, err := decodeGeneric(r, body, res)
		if err != nil {
			return nil, 0, err
		}
		u, err = st.genericCreate(res, ns, u, gopts)
		return answer(u, http.StatusCreated, err)
	case verb == "update":
		u, err := decodeGeneric(r, body, res)
		if err != nil {
			return nil, 0, err
		}
		if sub == "" {
			if u, err = normalized(res, u); err != nil {
				return nil, 0, err
			}
		}
		u, err = st.genericUpdate(res, ns, name, sub, u, gopts)
		return answer(u, http.StatusOK, err)
	case verb == "patch" && apply && sub == "":
		return st.genericApply(res, ns, name, body, o)
	case verb == "patch" && !apply:
		u, err := st.genericPatch(res, ns, name, sub, mediaOf(r.Header.Get("Content-Type")), body, gopts)
		return answer(u, http.StatusOK, err)
	case verb == "delete" && sub == "":
		obj, err := st.genericDelete(res, ns, name, del, o.dryRun)
		return obj, http.StatusOK, err
	}
	return nil, 0, apierrors.NewMethodNotSupported(res.groupResource(), verb)
}

// genericApply serves server-side apply of a generic kind: it creates the
// object when absent (201) and merges into it when present (200).
func (st *state) genericApply(r *resource, ns, name string, body []byte, o writeOptions) (runtime.Object, int, error) {
	cur, err := st.genericGet(r, ns, name)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, 0, err
	}
	applied, err := applyPatch(r, cur, name, ns, body, o.manager, o.force)
	if err != nil {
		return nil, 0, err
	}
	gopts := genericOpts{dryRun: o.dryRun}
	code := http.StatusOK
	var out *unstructured.Unstructured
	if cur == nil {
		code = http.StatusCreated
		out, err = st.genericCreate(r, ns, applied, gopts)
	} else {
		if applied, err = normalized(r, applied); err != nil {
			return nil, 0, err
		}
		out, err = st.genericUpdate(r, ns, name, "", applied, gopts)
	}
	if err != nil {
		return nil, 0, err
	}
	obj, err := toTyped(r, out)
	return obj, code, err
}

// serveNamespace serves namespaces: reads and plain writes as before,
// plus server-side apply, dry runs and deletion. s.mu is held.
func (s *Server) serveNamespace(r *http.Request, req request, verb string, body []byte, o writeOptions, del *metav1.DeleteOptions, apply bool) (runtime.Object, int, error) {
	st := s.st
	var before string
	if prev, err := st.lookup(namespacesResource, "", req.name); err == nil && req.name != "" {
		before = prev.(*corev1.Namespace).ResourceVersion
	}
	var obj runtime.Object
	var code int
	var err error
	switch {
	case verb == "delete" && req.sub == "":
		obj, err = st.deleteNamespace(req.name, del, o.dryRun)
		code = http.StatusOK
		if err == nil && !o.dryRun && st.namespaceLinger > 0 {
			s.finalizeLater(st.namespaceLinger)
		}
	case apply && req.sub == "":
		obj, code, err = st.namespaceApply(req.name, body, o.manager, o.force)
	default:
		obj, code, err = s.serveTyped(r, req, verb, body)
	}
	if err != nil || !o.dryRun {
		return obj, code, err
	}
	// A dry run takes no resourceVersion: a creation has none yet, a
	// change keeps the stored one.
	if ns, ok := obj.(*corev1.Namespace); ok {
		ns.ResourceVersion = before
	}
	return obj, code, nil
}

// finalizeLater lets the namespace controller look again after d, when a
// terminating namespace's finalizer is due to go.
func (s *Server) finalizeLater(d time.Duration) {
	time.AfterFunc(d+10*time.Millisecond, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closing {
			s.st.reconcile()
		}
	})
}
