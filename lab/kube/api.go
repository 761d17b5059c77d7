package kube

import (
	"fmt"
	"net/http"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/taloscluster/taloscluster/lab/internal/connabort"
)

// request is what the router makes of a URL.
type request struct {
	kind      string // "resource", "version", "discovery", "health"
	res       *resource
	sub       string
	namespace string
	name      string
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ServeHTTP serves the emulated API. Requests without a client certificate
// signed by the cluster's CA get 401 Unauthorized.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := &Op{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery}
	s.mu.Lock()
	s.log = append(s.log, op)
	s.mu.Unlock()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		op.Code = rec.code
		s.mu.Unlock()
	}()

	var user string
	if r.TLS != nil {
		u, _, err := verifyClient(s.caPool, r.TLS.PeerCertificates)
		if err == nil {
			user = u
		}
	}
	req, verb := route(r, s.lookupResource)
	s.mu.Lock()
	op.User, op.Verb = user, verb
	op.Resource, op.Namespace, op.Name = opResource(req), req.namespace, req.name
	s.mu.Unlock()
	if user == "" {
		writeError(rec, r, apierrors.NewUnauthorized("Unauthorized"))
		return
	}

	delay, f := s.takeFaults(op)
	if delay > 0 {
		s.mu.Lock()
		op.Fault = "delay"
		s.mu.Unlock()
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.closed:
			t.Stop()
			return
		}
	}
	if f != nil {
		s.mu.Lock()
		op.Fault = f.kind
		s.mu.Unlock()
		switch f.kind {
		case "hang":
			select {
			case <-r.Context().Done():
			case <-s.closed:
			}
			// Nothing is written: the client has gone, or the server is closing
			// the connection under it.
			rec.code = 0
		case "reset":
			connabort.HTTP(w, r)
		case "lost-reply":
			lost := &connabort.Unsent{}
			s.serve(lost, r, req, verb)
			// Logged before the client can notice, as answers are.
			rec.code = lost.Code
			s.mu.Lock()
			op.Code = lost.Code
			s.mu.Unlock()
			connabort.HTTP(w, r)
		default:
			writeError(rec, r, injectedError(op, f.status))
		}
		return
	}
	s.serve(rec, r, req, verb)
}

func opResource(req request) string {
	switch {
	case req.kind != "resource":
		return req.kind
	case req.res == nil:
		return ""
	case req.sub != "":
		return req.res.name + "/" + req.sub
	}
	return req.res.name
}

// route parses a request's URL and method into the resource it names and
// the Kubernetes verb.
func route(r *http.Request, lookupResource func(schema.GroupVersion, string) *resource) (request, string) {
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	verb := strings.ToLower(r.Method)
	switch {
	case len(segs) == 1 && segs[0] == "version":
		return request{kind: "version"}, "get"
	case segs[0] == "healthz" || segs[0] == "livez" || segs[0] == "readyz":
		return request{kind: "health"}, "get"
	case len(segs) <= 2 && segs[0] == "api", len(segs) <= 3 && segs[0] == "apis":
		return request{kind: "discovery"}, "get"
	case len(segs) >= 2 && segs[0] == "openapi" && segs[1] == "v3":
		return request{kind: "openapi"}, "get"
	}
	var gv schema.GroupVersion
	var rest []string
	switch {
	case segs[0] == "api" && segs[1] == "v1":
		gv, rest = schema.GroupVersion{Version: "v1"}, segs[2:]
	case segs[0] == "apis" && len(segs) > 3:
		gv, rest = schema.GroupVersion{Group: segs[1], Version: segs[2]}, segs[3:]
	default:
		return request{kind: "unknown"}, verb
	}
	watch := false
	if rest[0] == "watch" {
		watch, rest = true, rest[1:]
	}
	if v := r.URL.Query().Get("watch"); v == "true" || v == "1" {
		watch = true
	}
	req := request{kind: "resource"}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		if res := lookupResource(gv, rest[2]); res != nil && res.namespaced {
			req.namespace, rest = rest[1], rest[2:]
		}
	}
	if len(rest) == 0 || len(rest) > 3 {
		return request{kind: "unknown"}, verb
	}
	req.res = lookupResource(gv, rest[0])
	if req.res == nil {
		return request{kind: "unknown"}, verb
	}
	if len(rest) > 1 {
		req.name = rest[1]
	}
	if len(rest) > 2 {
		req.sub = rest[2]
	}
	switch r.Method {
	case http.MethodGet:
		switch {
		case watch:
			verb = "watch"
		case req.name == "":
			verb = "list"
		default:
			verb = "get"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if req.name == "" {
			verb = "deletecollection"
		}
	}
	return req, verb
}

// lookupResource finds a served resource: a built-in one, or one a
// CustomResourceDefinition serves.
func (s *Server) lookupResource(gv schema.GroupVersion, name string) *resource {
	for _, r := range resources {
		if r.gv == gv && r.name == name {
			return r
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.customResource(gv, name)
}

func notFoundPath() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Message: "the server could not find the requested resource",
		Reason: metav1.StatusReasonNotFound, Details: &metav1.StatusDetails{}, Code: http.StatusNotFound,
	}}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, req request, verb string) {
	switch req.kind {
	case "version":
		s.mu.Lock()
		v := s.version
		s.mu.Unlock()
		writeJSON(w, versionInfo(v))
		return
	case "health":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
		return
	case "discovery":
		if doc := s.discovery(r.URL.Path); doc != nil {
			writeJSON(w, doc)
			return
		}
		writeError(w, r, notFoundPath())
		return
	case "openapi":
		if doc := s.openAPI(r.URL.Path); doc != nil && r.Method == http.MethodGet {
			writeJSON(w, doc)
			return
		}
		writeError(w, r, notFoundPath())
		return
	case "unknown":
		writeError(w, r, notFoundPath())
		return
	}
	res := req.res
	if req.sub != "" && !res.hasSub(req.sub) {
		writeError(w, r, notFoundPath())
		return
	}
	if res.namespaced && req.namespace == "" && !(verb == "list" || verb == "watch") {
		writeError(w, r, notFoundPath())
		return
	}
	if verb == "watch" {
		writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotImplemented,
			Message: "watch is not implemented by the Kubernetes API emulator; poll with list or get",
		}})
		return
	}
	obj, code, err := s.serveResource(r, req, verb)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if st, ok := obj.(*metav1.Status); ok && st.Code != 0 {
		code = int(st.Code)
	}
	writeObject(w, r, code, obj)
}

// serveResource carries out a verb on a resource, answering the object (or
// Status) to write and the HTTP status code.
func (s *Server) serveResource(r *http.Request, req request, verb string) (obj runtime.Object, code int, err error) {
	res := req.res
	var body []byte
	if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch || r.Method == http.MethodDelete {
		if body, err = readBody(r); err != nil {
			return nil, 0, err
		}
	}
	if res.generic || res == namespacesResource {
		return s.serveStore(r, req, verb, body)
	}
	if q := r.URL.Query(); q.Has("dryRun") {
		return nil, 0, apierrors.NewBadRequest("dry runs are not supported by the Kubernetes API emulator")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serveTyped(r, req, verb, body)
}

// serveTyped carries out a verb on one of the kinds modelled with their Go
// types. s.mu is held.
func (s *Server) serveTyped(r *http.Request, req request, verb string, body []byte) (obj runtime.Object, code int, err error) {
	res, ns, name, sub := req.res, req.namespace, req.name, req.sub
	st := s.st
	switch {
	case verb == "list" && sub == "":
		lsel, fsel, err := selectors(r, res)
		if err != nil {
			return nil, 0, err
		}
		return st.list(res, ns, lsel, fsel), http.StatusOK, nil
	case verb == "get" && (sub == "" || sub == "status"):
		o, err := st.get(res, ns, name)
		return o, http.StatusOK, err
	case verb == "create" && sub == "" && name == "":
		o := res.newObject()
		if err := decodeInto(r, body, res.gvk(), o); err != nil {
			return nil, 0, err
		}
		out, err := st.create(res, ns, o)
		return out, http.StatusCreated, err
	case verb == "create" && sub == "eviction":
		ev := &policyv1.Eviction{}
		if err := decodeInto(r, body, policyv1.SchemeGroupVersion.WithKind("Eviction"), ev); err != nil {
			return nil, 0, err
		}
		if ev.Namespace != "" && ev.Namespace != ns {
			return nil, 0, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		out, err := st.evict(ns, name, ev)
		return out, http.StatusCreated, err
	case verb == "update" && (sub == "" || sub == "status"):
		o := res.newObject()
		if err := decodeInto(r, body, res.gvk(), o); err != nil {
			return nil, 0, err
		}
		out, err := st.update(res, ns, name, sub, o)
		return out, http.StatusOK, err
	case verb == "patch" && (sub == "" || sub == "status"):
		ct := r.Header.Get("Content-Type")
		if i := strings.IndexByte(ct, ';'); i >= 0 {
			ct = ct[:i]
		}
		out, err := st.patch(res, ns, name, sub, strings.TrimSpace(ct), body)
		return out, http.StatusOK, err
	case verb == "delete" && sub == "":
		opts := &metav1.DeleteOptions{}
		if len(body) > 0 {
			if err := decodeOptions(r, body, res, opts); err != nil {
				return nil, 0, err
			}
		}
		if g := r.URL.Query().Get("gracePeriodSeconds"); g != "" {
			n, err := strconv.ParseInt(g, 10, 64)
			if err != nil {
				return nil, 0, apierrors.NewBadRequest(fmt.Sprintf("invalid gracePeriodSeconds %q", g))
			}
			opts.GracePeriodSeconds = &n
		}
		if len(opts.DryRun) > 0 {
			return nil, 0, apierrors.NewBadRequest("dry runs are not supported by the Kubernetes API emulator")
		}
		out, err := st.remove(res, ns, name, opts)
		return out, http.StatusOK, err
	}
	return nil, 0, apierrors.NewMethodNotSupported(res.groupResource(), verb)
}

// decodeOptions decodes a DeleteOptions body, which clients send in the
// resource's group version, in meta.k8s.io/v1 or in v1.
func decodeOptions(r *http.Request, body []byte, res *resource, opts *metav1.DeleteOptions) error {
	var err error
	for _, gv := range []schema.GroupVersion{res.gv, metav1.SchemeGroupVersion, {Version: "v1"}} {
		if _, e := scheme.New(gv.WithKind("DeleteOptions")); e != nil {
			continue
		}
		if err = decodeInto(r, body, gv.WithKind("DeleteOptions"), opts); err == nil {
			return nil
		}
	}
	return err
}

// selectors parses a list request's label and field selectors; a field the
// resource cannot be selected by is a 400, as from kube-apiserver.
func selectors(r *http.Request, res *resource) (labels.Selector, fields.Selector, error) {
	q := r.URL.Query()
	lsel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	fsel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(err.Error())
	}
	for _, req := range fsel.Requirements() {
		ok := false
		for _, f := range res.fields {
			ok = ok || f == req.Field
		}
		if !ok {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return lsel, fsel, nil
}

// parseVersion splits a version like v1.36.1 into its major and minor.
func parseVersion(v string) (major, minor string, err error) {
	rest, ok := strings.CutPrefix(v, "v")
	parts := strings.SplitN(rest, ".", 3)
	if !ok || len(parts) != 3 {
		return "", "", fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", v)
	}
	for _, p := range parts[:2] {
		if _, err := strconv.Atoi(p); err != nil {
			return "", "", fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", v)
		}
	}
	return parts[0], parts[1], nil
}

// versionInfo is the /version document of a release build of v.
func versionInfo(v string) version.Info {
	major, minor, _ := parseVersion(v)
	prev := minor
	if n, err := strconv.Atoi(minor); err == nil && n > 0 {
		prev = strconv.Itoa(n - 1)
	}
	return version.Info{
		Major: major, Minor: minor,
		EmulationMajor: major, EmulationMinor: minor,
		MinCompatibilityMajor: major, MinCompatibilityMinor: prev,
		GitVersion: v, GitCommit: "0000000000000000000000000000000000000000", GitTreeState: "clean",
		BuildDate: "1970-01-01T00:00:00Z", GoVersion: goruntime.Version(), Compiler: goruntime.Compiler,
		Platform: goruntime.GOOS + "/" + goruntime.GOARCH,
	}
}

// discovery returns the legacy discovery document for a path, or nil.
func (s *Server) discovery(path string) any {
	groups := s.apiGroups()
	path = strings.TrimSuffix(path, "/")
	switch path {
	case "/api":
		return &metav1.APIVersions{
			TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
			Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
				{ClientCIDR: "0.0.0.0/0", ServerAddress: s.Addr().String()},
			},
		}
	case "/apis":
		list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
		for _, g := range groups {
			g.TypeMeta = metav1.TypeMeta{}
			list.Groups = append(list.Groups, g)
		}
		return list
	case "/api/v1":
		return resourceList("v1", s.apiResources(schema.GroupVersion{Version: "v1"}))
	}
	for _, g := range groups {
		if path == "/apis/"+g.Name {
			return &g
		}
		for _, v := range g.Versions {
			if path == "/apis/"+v.GroupVersion {
				gv := schema.GroupVersion{Group: g.Name, Version: v.Version}
				return resourceList(v.GroupVersion, s.apiResources(gv))
			}
		}
	}
	return nil
}

// builtinGroups are the API groups the emulator serves without a
// CustomResourceDefinition, in kube-apiserver's order.
var builtinGroups = []string{"apps", "policy", "rbac.authorization.k8s.io", "apiextensions.k8s.io"}

// apiGroups lists the served groups: the built-in ones, then those of the
// CustomResourceDefinitions by name.
func (s *Server) apiGroups() []metav1.APIGroup {
	s.mu.Lock()
	custom, versions := s.st.customGroups()
	s.mu.Unlock()
	var out []metav1.APIGroup
	for _, name := range append(slices.Clone(builtinGroups), custom...) {
		vs := versions[name]
		if slices.Contains(builtinGroups, name) {
			vs = []string{"v1"}
		}
		g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: name}
		for _, v := range vs {
			g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
		}
		g.PreferredVersion = g.Versions[0]
		out = append(out, g)
	}
	return out
}

// apiResources lists the resources of a group version, each followed by
// its subresources, sorted by name as kube-apiserver sorts them.
func (s *Server) apiResources(gv schema.GroupVersion) []metav1.APIResource {
	rs := slices.Clone(resources)
	s.mu.Lock()
	rs = append(rs, s.st.custom...)
	s.mu.Unlock()
	var out []metav1.APIResource
	for _, r := range rs {
		if r.gv != gv {
			continue
		}
		out = append(out, metav1.APIResource{
			Name: r.name, SingularName: r.singular, Namespaced: r.namespaced, Kind: r.kind,
			ShortNames: r.shortNames, Categories: r.categories, Verbs: r.verbs(),
		})
		for _, sub := range r.subs {
			sr := metav1.APIResource{Name: r.name + "/" + sub, Namespaced: r.namespaced, Kind: r.kind, Verbs: []string{"get", "patch", "update"}}
			if sub == "eviction" {
				sr.Group, sr.Version, sr.Kind, sr.Verbs = "policy", "v1", "Eviction", []string{"create"}
			}
			out = append(out, sr)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// verbs are the verbs a resource is served with.
func (r *resource) verbs() []string {
	return []string{"create", "delete", "get", "list", "patch", "update"}
}

// resourceList is a group version's resource list; kube-apiserver leaves
// out the apiVersion of the core group's.
func resourceList(gv string, rs []metav1.APIResource) *metav1.APIResourceList {
	tm := metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}
	if gv == "v1" {
		tm.APIVersion = ""
	}
	return &metav1.APIResourceList{TypeMeta: tm, GroupVersion: gv, APIResources: rs}
}
