package kube

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// serviceCIDR is where the emulator allocates cluster IPs, kube-apiserver's
// default --service-cluster-ip-range.
var serviceCIDR = netip.MustParsePrefix("10.96.0.0/12")

// genericValidate keeps the few validation rules of the generic kinds a
// client could trip on: labels, a Secret's immutable type and a
// CustomResourceDefinition's name.
func genericValidate(r *resource, u, cur *unstructured.Unstructured) field.ErrorList {
	errs := metav1validation.ValidateLabels(u.GetLabels(), field.NewPath("metadata", "labels"))
	switch r {
	case secretsResource:
		if cur != nil {
			was, _, _ := unstructured.NestedString(cur.Object, "type")
			now, _, _ := unstructured.NestedString(u.Object, "type")
			if now != "" && now != was {
				errs = append(errs, field.Invalid(field.NewPath("type"), now, "field is immutable"))
			}
		}
	case crdsResource:
		errs = append(errs, validateCRD(u)...)
	}
	return errs
}

// genericPrepare applies the defaults and strategies of a kind to an
// object being written (cur is the stored object on update, nil on
// create).
func (st *state) genericPrepare(r *resource, u, cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	switch r {
	case secretsResource:
		return prepareTyped(r, u, func(s *corev1.Secret) { prepareSecret(s) })
	case servicesResource:
		return prepareTyped(r, u, func(s *corev1.Service) { st.prepareService(s, cur) })
	case deploymentsResource:
		return prepareTyped(r, u, func(d *appsv1.Deployment) {
			defaultDeployment(d)
			if st.deploymentsAvailable {
				available(d, st.now())
			}
		})
	case statefulSetsResource:
		return prepareTyped(r, u, defaultStatefulSet)
	case crdsResource:
		prepareCRD(u, cur)
		return u, nil
	}
	return normalized(r, u)
}

// prepareTyped converts an object to its Go type, lets change act on it,
// and converts it back.
func prepareTyped[T any, P interface {
	*T
	runtime.Object
}](r *resource, u *unstructured.Unstructured, change func(P)) (*unstructured.Unstructured, error) {
	obj := P(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	change(obj)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := &unstructured.Unstructured{Object: m}
	out.SetAPIVersion(r.gv.String())
	out.SetKind(r.kind)
	return out, nil
}

// prepareSecret merges stringData into data (the conversion of a v1
// Secret does it, so stringData is never stored) and defaults the type.
func prepareSecret(s *corev1.Secret) {
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	}
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}

// prepareService defaults a service and allocates its cluster IP (kept
// on update), as the service registry and the IP allocator do.
func (st *state) prepareService(s *corev1.Service, cur *unstructured.Unstructured) {
	if s.Spec.Type == "" {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if s.Spec.SessionAffinity == "" {
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	if s.Spec.InternalTrafficPolicy == nil {
		policy := corev1.ServiceInternalTrafficPolicyCluster
		s.Spec.InternalTrafficPolicy = &policy
	}
	if s.Spec.ClusterIP == "" && cur != nil {
		s.Spec.ClusterIP, _, _ = unstructured.NestedString(cur.Object, "spec", "clusterIP")
	}
	if s.Spec.ClusterIP == "" {
		s.Spec.ClusterIP = st.allocateClusterIP()
	}
	if len(s.Spec.ClusterIPs) == 0 {
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
	}
	if len(s.Spec.IPFamilies) == 0 {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	if s.Spec.IPFamilyPolicy == nil {
		policy := corev1.IPFamilyPolicySingleStack
		s.Spec.IPFamilyPolicy = &policy
	}
}

// allocateClusterIP returns the first free address of serviceCIDR after
// the one kube-apiserver keeps for the kubernetes service.
func (st *state) allocateClusterIP() string {
	used := map[string]bool{}
	for _, obj := range st.objs[servicesResource] {
		ip, _, _ := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "spec", "clusterIP")
		used[ip] = true
	}
	ip := serviceCIDR.Addr().Next().Next()
	for used[ip.String()] && serviceCIDR.Contains(ip) {
		ip = ip.Next()
	}
	return ip.String()
}

// defaultDeployment applies the apps/v1 defaults of a Deployment and of
// its pod template.
func defaultDeployment(d *appsv1.Deployment) {
	if d.Spec.Replicas == nil {
		d.Spec.Replicas = new(int32(1))
	}
	if d.Spec.Strategy.Type == "" {
		d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if d.Spec.Strategy.RollingUpdate == nil {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		quarter := intstr.FromString("25%")
		if d.Spec.Strategy.RollingUpdate.MaxUnavailable == nil {
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = &quarter
		}
		if d.Spec.Strategy.RollingUpdate.MaxSurge == nil {
			d.Spec.Strategy.RollingUpdate.MaxSurge = &quarter
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		d.Spec.RevisionHistoryLimit = new(int32(10))
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		d.Spec.ProgressDeadlineSeconds = new(int32(600))
	}
	d.Spec.Template.Spec = defaultedPodSpec(d.Spec.Template.Spec)
}

// defaultStatefulSet applies the apps/v1 defaults of a StatefulSet and of
// its pod template.
func defaultStatefulSet(s *appsv1.StatefulSet) {
	if s.Spec.Replicas == nil {
		s.Spec.Replicas = new(int32(1))
	}
	if s.Spec.PodManagementPolicy == "" {
		s.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	if s.Spec.UpdateStrategy.Type == "" {
		s.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
	}
	if s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && s.Spec.UpdateStrategy.RollingUpdate == nil {
		s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(0))}
	}
	if s.Spec.RevisionHistoryLimit == nil {
		s.Spec.RevisionHistoryLimit = new(int32(10))
	}
	if s.Spec.PersistentVolumeClaimRetentionPolicy == nil {
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		}
	}
	s.Spec.Template.Spec = defaultedPodSpec(s.Spec.Template.Spec)
}

// defaultedPodSpec applies to a pod template the pod defaults the emulator
// applies to pods, but enableServiceLinks, which only pods get.
func defaultedPodSpec(spec corev1.PodSpec) corev1.PodSpec {
	links := spec.EnableServiceLinks
	p := &corev1.Pod{Spec: spec}
	defaultPod(p)
	p.Spec.EnableServiceLinks = links
	return p.Spec
}

// mediaOf returns the media type of a Content-Type header.
func mediaOf(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(mt)
}

// available gives a Deployment the status the Deployment controller
// writes once every replica of its template runs and is ready.
func available(d *appsv1.Deployment, now time.Time) {
	n := *d.Spec.Replicas
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = n, n, n, n
	d.Status.UnavailableReplicas = 0
	t := metav1.NewTime(now)
	d.Status.Conditions = []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
			Message: "Deployment has minimum availability.", LastUpdateTime: t, LastTransitionTime: t},
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
			Message: fmt.Sprintf("ReplicaSet %q has successfully progressed.", d.Name), LastUpdateTime: t, LastTransitionTime: t},
	}
}
