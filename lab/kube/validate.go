package kube

import (
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validate checks the few rules of kube-apiserver's validation that the
// emulator keeps: object names, labels, a pod's containers, and a
// disruption budget's spec.
func validate(r *resource, obj runtime.Object) field.ErrorList {
	m, _ := meta.Accessor(obj)
	var errs field.ErrorList
	name := field.NewPath("metadata", "name")
	switch {
	case m.GetName() == "":
		errs = append(errs, field.Required(name, "name or generateName is required"))
	case r == namespacesResource:
		for _, msg := range validation.IsDNS1123Label(m.GetName()) {
			errs = append(errs, field.Invalid(name, m.GetName(), msg))
		}
	default:
		for _, msg := range validation.IsDNS1123Subdomain(m.GetName()) {
			errs = append(errs, field.Invalid(name, m.GetName(), msg))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(m.GetLabels(), field.NewPath("metadata", "labels"))...)
	switch o := obj.(type) {
	case *corev1.Pod:
		spec := field.NewPath("spec")
		if len(o.Spec.Containers) == 0 {
			errs = append(errs, field.Required(spec.Child("containers"), ""))
		}
		for i, c := range o.Spec.Containers {
			p := spec.Child("containers").Index(i)
			if c.Name == "" {
				errs = append(errs, field.Required(p.Child("name"), ""))
			}
			if c.Image == "" {
				errs = append(errs, field.Required(p.Child("image"), ""))
			}
		}
	case *policyv1.PodDisruptionBudget:
		spec := field.NewPath("spec")
		if o.Spec.MinAvailable != nil && o.Spec.MaxUnavailable != nil {
			errs = append(errs, field.Invalid(spec, o.Spec, "minAvailable and maxUnavailable cannot be both set"))
		}
		for _, v := range []struct {
			val  *intstr.IntOrString
			path *field.Path
		}{{o.Spec.MinAvailable, spec.Child("minAvailable")}, {o.Spec.MaxUnavailable, spec.Child("maxUnavailable")}} {
			if v.val != nil {
				errs = append(errs, validateIntOrPercent(*v.val, v.path)...)
			}
		}
		errs = append(errs, metav1validation.ValidateLabelSelector(o.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, spec.Child("selector"))...)
		if p := o.Spec.UnhealthyPodEvictionPolicy; p != nil && *p != policyv1.IfHealthyBudget && *p != policyv1.AlwaysAllow {
			errs = append(errs, field.NotSupported(spec.Child("unhealthyPodEvictionPolicy"), *p,
				[]string{string(policyv1.AlwaysAllow), string(policyv1.IfHealthyBudget)}))
		}
	}
	return errs
}

// validateIntOrPercent requires a non-negative integer or a percentage of
// at most 100%.
func validateIntOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	switch v.Type {
	case intstr.Int:
		if v.IntVal < 0 {
			return field.ErrorList{field.Invalid(p, v.IntVal, "must be greater than or equal to 0")}
		}
	default:
		n, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false)
		if err != nil {
			return field.ErrorList{field.Invalid(p, v.StrVal, "a valid percent string must be a numeric string followed by an ending '%'")}
		}
		if n < 0 {
			return field.ErrorList{field.Invalid(p, v.StrVal, "must be greater than or equal to 0")}
		}
		if n > 100 {
			return field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
		}
	}
	return nil
}

// validatePodUpdate refuses changes to a pod's spec beyond those a running
// pod allows.
func validatePodUpdate(upd, cur *corev1.Pod) field.ErrorList {
	if podSpecsEqualForUpdate(upd.Spec, cur.Spec) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec"),
		"pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")}
}

// randomSuffix is the five characters kube-apiserver appends to a
// generateName, from the same consonant-and-digit alphabet.
func randomSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// isPodReady reports the pod's Ready condition.
func isPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// isNodeReady reports the node's Ready condition.
func isNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// controllerOf returns a pod's controller reference, or nil.
func controllerOf(p *corev1.Pod) *metav1.OwnerReference {
	return metav1.GetControllerOfNoCopy(p)
}
