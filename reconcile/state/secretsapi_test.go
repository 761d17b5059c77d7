package state_test

// The lab's Kubernetes emulator (lab/kube) serves nodes, pods, budgets and
// namespaces but not Secrets or Leases, so KubeStore is tested against
// secretsAPI (which also serves the Leases of KubeStore.Lock, see
// leaseapi_test.go): a
// minimal Secrets endpoint of the core/v1 API that client-go talks to
// unchanged, over TLS. It serves create, get, update and delete of
// namespaced Secrets with the semantics of kube-apiserver that KubeStore
// depends on:
//
//   - JSON bodies (the client is configured for JSON; protobuf gets 415);
//   - every write takes the next value of one resourceVersion counter; an
//     update that changes nothing keeps the resourceVersion;
//   - create of an existing name is 409 AlreadyExists;
//   - update with a stale resourceVersion is 409 Conflict with the
//     optimistic-lock message; an update without one is unconditional, as
//     for Secrets in kube-apiserver; update of a missing Secret is 404;
//   - delete honours UID and resourceVersion preconditions (409 Conflict)
//     and answers with a Success Status;
//   - names must be DNS-1123 subdomains, data keys valid Secret keys, the
//     type immutable and the data at most 1 MiB (422 Invalid);
//   - errors are metav1.Status bodies built by apimachinery's error
//     constructors, so reasons, codes and messages are the real ones.
//
// It keeps an ordered request log and lets a test run code between reading
// a write request and applying it (to play a concurrent writer), inject
// error answers, or hold writes until the client gives up.

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var secretsResource = schema.GroupResource{Resource: "secrets"}

// apiRequest is one entry of the request log.
type apiRequest struct {
	Method string
	Name   string
	Code   int
}

func (r apiRequest) String() string { return fmt.Sprintf("%s %s %d", r.Method, r.Name, r.Code) }

// secretsAPI is the test Secrets endpoint described above.
type secretsAPI struct {
	srv *httptest.Server

	mu      sync.Mutex
	rv      int
	uid     int
	secrets map[string]*corev1.Secret // namespace/name
	log     []apiRequest
	// interleave, when set, runs before a write request is applied,
	// without the lock held, and is then cleared.
	interleave func(method, name string)
	// faults answer the next write requests of a method with a status
	// code instead of serving them: 409 as a Conflict, anything else as
	// an internal error with that code.
	faults map[string][]int
	// hold makes write requests wait until the client goes away.
	hold bool

	// leases are the coordination.k8s.io/v1 Leases (leaseapi_test.go).
	leases map[string]*coordinationv1.Lease
	// leaseFaults answer the next Lease requests of a method with a status
	// code instead of serving them.
	leaseFaults map[string][]int
}

func newSecretsAPI(t *testing.T) *secretsAPI {
	t.Helper()
	a := &secretsAPI{secrets: map[string]*corev1.Secret{}, faults: map[string][]int{},
		leases: map[string]*coordinationv1.Lease{}, leaseFaults: map[string][]int{}}
	mux := http.NewServeMux()
	a.routeLeases(mux)
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/secrets", a.create)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/secrets/{name}", a.get)
	mux.HandleFunc("PUT /api/v1/namespaces/{ns}/secrets/{name}", a.replace)
	mux.HandleFunc("DELETE /api/v1/namespaces/{ns}/secrets/{name}", a.remove)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.status(w, r, apierrors.NewNotFound(schema.GroupResource{}, ""), "")
	})
	a.srv = httptest.NewTLSServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// client returns a clientset for the endpoint, as a separate process
// would have.
func (a *secretsAPI) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	cfg := &rest.Config{
		Host:            a.srv.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/json",
			AcceptContentTypes: "application/json",
		},
		QPS:   1000,
		Burst: 1000,
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// requests returns the request log.
func (a *secretsAPI) requests() []apiRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]apiRequest{}, a.log...)
}

// secret returns a copy of a stored Secret, or nil.
func (a *secretsAPI) secret(ns, name string) *corev1.Secret {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.secrets[ns+"/"+name]; s != nil {
		return s.DeepCopy()
	}
	return nil
}

// put stores a Secret directly, as another writer would, taking the next
// resourceVersion.
func (a *secretsAPI) put(s *corev1.Secret) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s = s.DeepCopy()
	a.rv++
	s.ResourceVersion = strconv.Itoa(a.rv)
	if s.UID == "" {
		a.uid++
		s.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", a.uid))
	}
	a.secrets[s.Namespace+"/"+s.Name] = s
}

func (a *secretsAPI) setInterleave(f func(method, name string)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.interleave = f
}

func (a *secretsAPI) failNext(method string, codes ...int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.faults[method] = append(a.faults[method], codes...)
}

func (a *secretsAPI) setHold(hold bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hold = hold
}

// beforeWrite runs the interleaved writer, holds or fails the request as
// configured, and reports whether the request was answered already.
func (a *secretsAPI) beforeWrite(w http.ResponseWriter, r *http.Request, name string) bool {
	a.mu.Lock()
	f := a.interleave
	a.interleave = nil
	hold := a.hold
	var fault int
	if q := a.faults[r.Method]; len(q) > 0 {
		fault, a.faults[r.Method] = q[0], q[1:]
	}
	a.mu.Unlock()
	if f != nil {
		f(r.Method, name)
	}
	if hold {
		<-r.Context().Done()
		a.record(r.Method, name, 0)
		// A server that never answers: abort the response instead of
		// returning, which would send an empty 200 if the request ended
		// for any other reason than the client giving up.
		panic(http.ErrAbortHandler)
	}
	switch fault {
	case 0:
		return false
	case http.StatusConflict:
		a.status(w, r, apierrors.NewConflict(secretsResource, name,
			errors.New("the object has been modified; please apply your changes to the latest version and try again")), name)
	default:
		a.status(w, r, apierrors.FromObject(&metav1.Status{
			Status: metav1.StatusFailure, Code: int32(fault),
			Reason:  metav1.StatusReasonInternalError,
			Message: "Internal error occurred: injected fault",
		}), name)
	}
	return true
}

func (a *secretsAPI) record(method, name string, code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log = append(a.log, apiRequest{Method: method, Name: name, Code: code})
}

// status answers with err as a metav1.Status body.
func (a *secretsAPI) status(w http.ResponseWriter, r *http.Request, err error, name string) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		st = apierrors.NewInternalError(err)
	}
	body := st.Status()
	body.Kind, body.APIVersion = "Status", "v1"
	a.record(r.Method, name, int(body.Code))
	writeJSON(w, int(body.Code), &body)
}

func (a *secretsAPI) answer(w http.ResponseWriter, r *http.Request, code int, s *corev1.Secret) {
	a.record(r.Method, s.Name, code)
	out := s.DeepCopy()
	out.Kind, out.APIVersion = "Secret", "v1"
	writeJSON(w, code, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a Secret from a JSON request body.
func decode(r *http.Request) (*corev1.Secret, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "application/json" {
		return nil, apierrors.FromObject(&metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
			Reason:  metav1.StatusReasonUnsupportedMediaType,
			Message: "the body of the request was in an unknown format - accepted media types include: application/json",
		})
	}
	var s corev1.Secret
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if s.Kind != "" && (s.Kind != "Secret" || s.APIVersion != "v1") {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type Secret): %s/%s", s.APIVersion, s.Kind))
	}
	// stringData is a write-only convenience merged into data.
	for k, v := range s.StringData {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
	return &s, nil
}

// validate checks what kube-apiserver's Secret validation would refuse
// for the fields KubeStore sends.
func validate(s *corev1.Secret) error {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(s.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), s.Name, msg))
	}
	total := 0
	for k, v := range s.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
		}
		total += len(k) + len(v)
	}
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath("data"), "", corev1.MaxSecretSize))
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, s.Name, errs)
	}
	return nil
}

func (a *secretsAPI) create(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	s, err := decode(r)
	if err != nil {
		a.status(w, r, err, "")
		return
	}
	if a.beforeWrite(w, r, s.Name) {
		return
	}
	if s.Namespace != "" && s.Namespace != ns {
		a.status(w, r, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"), s.Name)
		return
	}
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
	if err := validate(s); err != nil {
		a.status(w, r, err, s.Name)
		return
	}
	a.mu.Lock()
	if _, ok := a.secrets[ns+"/"+s.Name]; ok {
		a.mu.Unlock()
		a.status(w, r, apierrors.NewAlreadyExists(secretsResource, s.Name), s.Name)
		return
	}
	a.rv++
	a.uid++
	s.Namespace = ns
	s.ResourceVersion = strconv.Itoa(a.rv)
	s.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", a.uid))
	s.CreationTimestamp = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	a.secrets[ns+"/"+s.Name] = s.DeepCopy()
	a.mu.Unlock()
	a.answer(w, r, http.StatusCreated, s)
}

func (a *secretsAPI) get(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	s := a.secret(ns, name)
	if s == nil {
		a.status(w, r, apierrors.NewNotFound(secretsResource, name), name)
		return
	}
	a.answer(w, r, http.StatusOK, s)
}

func (a *secretsAPI) replace(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	s, err := decode(r)
	if err != nil {
		a.status(w, r, err, name)
		return
	}
	if a.beforeWrite(w, r, name) {
		return
	}
	if s.Name != name {
		a.status(w, r, apierrors.NewBadRequest("the name of the object ("+s.Name+") does not match the name on the URL ("+name+")"), name)
		return
	}
	if s.Namespace != "" && s.Namespace != ns {
		a.status(w, r, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"), name)
		return
	}
	if err := validate(s); err != nil {
		a.status(w, r, err, name)
		return
	}
	a.mu.Lock()
	cur := a.secrets[ns+"/"+name]
	if cur == nil {
		a.mu.Unlock()
		a.status(w, r, apierrors.NewNotFound(secretsResource, name), name)
		return
	}
	if s.ResourceVersion != "" && s.ResourceVersion != cur.ResourceVersion {
		a.mu.Unlock()
		a.status(w, r, apierrors.NewConflict(secretsResource, name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again")), name)
		return
	}
	if s.Type == "" {
		s.Type = cur.Type
	}
	if s.Type != cur.Type {
		a.mu.Unlock()
		a.status(w, r, apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, name, field.ErrorList{
			field.Invalid(field.NewPath("type"), s.Type, "field is immutable"),
		}), name)
		return
	}
	next := cur.DeepCopy()
	next.Labels, next.Annotations, next.Data = s.Labels, s.Annotations, s.Data
	unchanged := reflect.DeepEqual(normal(next.Data), normal(cur.Data)) &&
		maps.Equal(next.Labels, cur.Labels) && maps.Equal(next.Annotations, cur.Annotations)
	if !unchanged {
		a.rv++
		next.ResourceVersion = strconv.Itoa(a.rv)
		a.secrets[ns+"/"+name] = next
	}
	a.mu.Unlock()
	a.answer(w, r, http.StatusOK, next)
}

// normal makes a nil and an empty data map compare equal.
func normal(d map[string][]byte) map[string][]byte {
	if len(d) == 0 {
		return nil
	}
	return d
}

func (a *secretsAPI) remove(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	var opts metav1.DeleteOptions
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&opts); err != nil && !strings.Contains(err.Error(), "EOF") {
			a.status(w, r, apierrors.NewBadRequest(err.Error()), name)
			return
		}
	}
	if a.beforeWrite(w, r, name) {
		return
	}
	a.mu.Lock()
	cur := a.secrets[ns+"/"+name]
	if cur == nil {
		a.mu.Unlock()
		a.status(w, r, apierrors.NewNotFound(secretsResource, name), name)
		return
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != cur.UID {
			a.mu.Unlock()
			a.status(w, r, apierrors.NewConflict(secretsResource, name,
				preconditionFailed("UID", string(*p.UID), string(cur.UID))), name)
			return
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion {
			a.mu.Unlock()
			a.status(w, r, apierrors.NewConflict(secretsResource, name,
				preconditionFailed("ResourceVersion", *p.ResourceVersion, cur.ResourceVersion)), name)
			return
		}
	}
	delete(a.secrets, ns+"/"+name)
	a.mu.Unlock()
	a.record(r.Method, name, http.StatusOK)
	writeJSON(w, http.StatusOK, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: name, Kind: "secrets", UID: cur.UID},
	})
}

// preconditionFailed is kube-apiserver's error for a delete precondition
// that does not hold.
func preconditionFailed(field, want, got string) error {
	msg := fmt.Sprintf("Precondition failed: %s in precondition: %s, %s in object meta: %s", field, want, field, got)
	return errors.New(msg)
}
