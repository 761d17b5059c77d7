package state_test

// The Leases of the coordination.k8s.io/v1 API, served by secretsAPI with
// the semantics of kube-apiserver that KubeStore.Lock depends on: create of
// an existing name is 409 AlreadyExists, an update with a stale
// resourceVersion is 409 Conflict, a delete honours UID and
// resourceVersion preconditions, every write takes the next
// resourceVersion, and errors are metav1.Status bodies.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

const leasesPath = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"

func (a *secretsAPI) routeLeases(mux *http.ServeMux) {
	mux.HandleFunc("POST "+leasesPath, a.createLease)
	mux.HandleFunc("GET "+leasesPath+"/{name}", a.getLease)
	mux.HandleFunc("PUT "+leasesPath+"/{name}", a.replaceLease)
	mux.HandleFunc("DELETE "+leasesPath+"/{name}", a.removeLease)
}

// lease returns a copy of a stored Lease, or nil.
func (a *secretsAPI) lease(ns, name string) *coordinationv1.Lease {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.leases[ns+"/"+name]; l != nil {
		return l.DeepCopy()
	}
	return nil
}

// putLease stores a Lease directly, as another holder would.
func (a *secretsAPI) putLease(l *coordinationv1.Lease) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l = l.DeepCopy()
	a.rv++
	l.ResourceVersion = strconv.Itoa(a.rv)
	if l.UID == "" {
		a.uid++
		l.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", a.uid))
	}
	a.leases[l.Namespace+"/"+l.Name] = l
}

// failLeases answers the next Lease requests of method with code.
func (a *secretsAPI) failLeases(method string, codes ...int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leaseFaults[method] = append(a.leaseFaults[method], codes...)
}

// leaseFault answers with an injected fault; it reports whether it did.
func (a *secretsAPI) leaseFault(w http.ResponseWriter, r *http.Request, name string) bool {
	a.mu.Lock()
	var code int
	if q := a.leaseFaults[r.Method]; len(q) > 0 {
		code, a.leaseFaults[r.Method] = q[0], q[1:]
	}
	a.mu.Unlock()
	if code == 0 {
		return false
	}
	a.status(w, r, apierrors.FromObject(&metav1.Status{
		Status: metav1.StatusFailure, Code: int32(code),
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: "injected fault",
	}), "lease/"+name)
	return true
}

func (a *secretsAPI) answerLease(w http.ResponseWriter, r *http.Request, code int, l *coordinationv1.Lease) {
	a.record(r.Method, "lease/"+l.Name, code)
	out := l.DeepCopy()
	out.Kind, out.APIVersion = "Lease", "coordination.k8s.io/v1"
	writeJSON(w, code, out)
}

func decodeLease(r *http.Request) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return &l, nil
}

func (a *secretsAPI) createLease(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	l, err := decodeLease(r)
	if err != nil {
		a.status(w, r, err, "lease/")
		return
	}
	if a.leaseFault(w, r, l.Name) {
		return
	}
	a.mu.Lock()
	if _, ok := a.leases[ns+"/"+l.Name]; ok {
		a.mu.Unlock()
		a.status(w, r, apierrors.NewAlreadyExists(leasesResource, l.Name), "lease/"+l.Name)
		return
	}
	a.rv++
	a.uid++
	l.Namespace = ns
	l.ResourceVersion = strconv.Itoa(a.rv)
	l.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", a.uid))
	l.CreationTimestamp = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	a.leases[ns+"/"+l.Name] = l.DeepCopy()
	a.mu.Unlock()
	a.answerLease(w, r, http.StatusCreated, l)
}

func (a *secretsAPI) getLease(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if a.leaseFault(w, r, name) {
		return
	}
	l := a.lease(ns, name)
	if l == nil {
		a.status(w, r, apierrors.NewNotFound(leasesResource, name), "lease/"+name)
		return
	}
	a.answerLease(w, r, http.StatusOK, l)
}

func (a *secretsAPI) replaceLease(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	l, err := decodeLease(r)
	if err != nil {
		a.status(w, r, err, "lease/"+name)
		return
	}
	if a.leaseFault(w, r, name) {
		return
	}
	a.mu.Lock()
	cur := a.leases[ns+"/"+name]
	switch {
	case cur == nil:
		a.mu.Unlock()
		a.status(w, r, apierrors.NewNotFound(leasesResource, name), "lease/"+name)
		return
	case l.ResourceVersion != "" && l.ResourceVersion != cur.ResourceVersion:
		a.mu.Unlock()
		a.status(w, r, apierrors.NewConflict(leasesResource, name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again")), "lease/"+name)
		return
	}
	next := cur.DeepCopy()
	next.Labels, next.Annotations, next.Spec = l.Labels, l.Annotations, l.Spec
	a.rv++
	next.ResourceVersion = strconv.Itoa(a.rv)
	a.leases[ns+"/"+name] = next
	a.mu.Unlock()
	a.answerLease(w, r, http.StatusOK, next)
}

func (a *secretsAPI) removeLease(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	var opts metav1.DeleteOptions
	if r.ContentLength != 0 {
		_ = json.NewDecoder(r.Body).Decode(&opts)
	}
	if a.leaseFault(w, r, name) {
		return
	}
	a.mu.Lock()
	cur := a.leases[ns+"/"+name]
	if cur == nil {
		a.mu.Unlock()
		a.status(w, r, apierrors.NewNotFound(leasesResource, name), "lease/"+name)
		return
	}
	if p := opts.Preconditions; p != nil {
		if (p.UID != nil && *p.UID != cur.UID) || (p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion) {
			a.mu.Unlock()
			a.status(w, r, apierrors.NewConflict(leasesResource, name, preconditionFailed("ResourceVersion", "", cur.ResourceVersion)), "lease/"+name)
			return
		}
	}
	delete(a.leases, ns+"/"+name)
	a.mu.Unlock()
	a.record(r.Method, "lease/"+name, http.StatusOK)
	writeJSON(w, http.StatusOK, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: name, Group: "coordination.k8s.io", Kind: "leases", UID: cur.UID},
	})
}
