package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// The media types the emulator reads and writes, as kube-apiserver does.
const (
	mediaJSON     = "application/json"
	mediaYAML     = "application/yaml"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
)

// maxBody bounds a request body; kube-apiserver's limit is 3 MiB.
const maxBody = 3 << 20

var (
	scheme = runtime.NewScheme()
	codecs serializer.CodecFactory
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, policyv1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, metav1.AddMetaToScheme} {
		if err := add(scheme); err != nil {
			panic(fmt.Sprintf("registering API types: %v", err))
		}
	}
	codecs = serializer.NewCodecFactory(scheme)
}

// negotiate picks the response encoding from the Accept header the way
// kube-apiserver does for the media types it supports: the first acceptable
// one in the client's order. Accept entries asking for another shape
// (as=Table, as=PartialObjectMetadata) are passed over.
func negotiate(r *http.Request) (runtime.SerializerInfo, bool) {
	return negotiateFor(r, false)
}

// negotiateFor negotiates as negotiate does, passing over protobuf for
// objects that have no protobuf encoding (custom resources).
func negotiateFor(r *http.Request, noProtobuf bool) (runtime.SerializerInfo, bool) {
	accept := r.Header.Get("Accept")
	if strings.TrimSpace(accept) == "" {
		accept = "*/*"
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if _, ok := params["as"]; ok {
			continue
		}
		switch mt {
		case "*/*", "application/*":
			mt = mediaJSON
		case mediaProtobuf:
			if noProtobuf {
				continue
			}
		}
		if info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mt); ok {
			return info, true
		}
	}
	return runtime.SerializerInfo{}, false
}

// writeObject encodes obj in the negotiated media type with the given HTTP
// status code.
func writeObject(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	_, unstructured := obj.(runtime.Unstructured)
	info, ok := negotiateFor(r, unstructured)
	if !ok {
		writeJSONStatus(w, notAcceptable())
		return
	}
	var body []byte
	var err error
	if unstructured {
		// Custom resources are written as they are kept.
		body, err = runtime.Encode(info.Serializer, obj)
	} else {
		var gvks []schema.GroupVersionKind
		if gvks, _, err = scheme.ObjectKinds(obj); err == nil {
			body, err = runtime.Encode(codecs.EncoderForVersion(info.Serializer, gvks[0].GroupVersion()), obj)
		}
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("encoding a response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", info.MediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writeError answers with err as a metav1.Status: a *apierrors.StatusError
// keeps its reason and code, anything else is a 500 InternalError.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	if _, ok := negotiate(r); !ok {
		writeJSONStatus(w, &st)
		return
	}
	writeObject(w, r, int(st.Code), &st)
}

// writeJSONStatus writes a Status as JSON whatever the client accepts, for
// the cases where negotiation itself failed.
func writeJSONStatus(w http.ResponseWriter, st *metav1.Status) {
	st.Kind, st.APIVersion = "Status", "v1"
	body, _ := json.Marshal(st)
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}

// writeJSON writes a document that is always JSON: version and discovery.
func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, fmt.Sprintf("encoding a response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func notAcceptable() *metav1.Status {
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Message: "only the following media types are accepted: " + mediaJSON + ", " + mediaYAML + ", " + mediaProtobuf,
		Reason:  metav1.StatusReasonNotAcceptable,
		Code:    http.StatusNotAcceptable,
	}
}

// readBody reads a request body within the size limit.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	if len(body) > maxBody {
		return nil, apierrors.NewRequestEntityTooLargeError("limit is 3145728")
	}
	return body, nil
}

// decodeInto decodes a request body of the request's Content-Type into obj,
// whose kind is want; a body without apiVersion and kind is taken as want.
func decodeInto(r *http.Request, body []byte, want schema.GroupVersionKind, obj runtime.Object) error {
	mt := mediaJSON
	if ct := r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return unsupportedMediaType(ct)
		}
	}
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mt)
	if !ok {
		return unsupportedMediaType(mt)
	}
	_, gvk, err := info.Serializer.Decode(body, &want, obj)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v", want.Kind, err))
	}
	if gvk.Group != want.Group || gvk.Kind != want.Kind {
		return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %s", want.Kind, gvk))
	}
	return nil
}

func unsupportedMediaType(mt string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s", mediaJSON, mediaYAML, mediaProtobuf),
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Code:    http.StatusUnsupportedMediaType,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Message: "unsupported media type " + mt}}},
	}}
}
