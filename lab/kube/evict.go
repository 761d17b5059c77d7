package kube

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// evictMessage is kube-apiserver's message for an eviction a disruption
// budget refuses.
const evictMessage = "Cannot evict pod as it would violate the pod's disruption budget."

// evict runs the rules of kube-apiserver's eviction subresource: a pod that
// is terminal, pending or already terminating is deleted outright; a pod
// with more than one disruption budget cannot be evicted; otherwise the
// budget must allow a disruption, which the eviction uses up, and the pod
// is marked as a disruption target and deleted gracefully.
func (st *state) evict(ns, name string, ev *policyv1.Eviction) (*metav1.Status, error) {
	if ev.Name != name {
		return nil, apierrors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	opts := ev.DeleteOptions
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	if len(opts.DryRun) > 0 {
		return nil, apierrors.NewBadRequest("dry runs are not supported by the Kubernetes API emulator")
	}
	obj, err := st.lookup(podsResource, ns, name)
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	success := &metav1.Status{Status: metav1.StatusSuccess, Code: 201}

	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		pod.Status.Phase == corev1.PodPending || pod.DeletionTimestamp != nil {
		if err := st.evictDelete(pod, opts); err != nil {
			return nil, err
		}
		return success, nil
	}

	var budgets []*policyv1.PodDisruptionBudget
	for _, k := range sortedKeys(st.objs[pdbsResource]) {
		pdb := st.objs[pdbsResource][k].(*policyv1.PodDisruptionBudget)
		if pdb.Namespace != ns {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		budgets = append(budgets, pdb)
	}
	if len(budgets) > 1 {
		return &metav1.Status{
			Status:  metav1.StatusFailure,
			Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
			Code:    500,
		}, nil
	}
	if len(budgets) == 1 {
		pdb := budgets[0]
		unhealthyOK := false
		if !isPodReady(pod) {
			p := pdb.Spec.UnhealthyPodEvictionPolicy
			unhealthyOK = (p != nil && *p == policyv1.AlwaysAllow) ||
				(pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0)
		}
		if !unhealthyOK {
			if err := st.takeDisruption(pdb, pod.Name); err != nil {
				return nil, err
			}
		}
	}
	if err := st.evictDelete(pod, opts); err != nil {
		return nil, err
	}
	return success, nil
}

// takeDisruption checks that a budget allows a disruption and uses it up.
func (st *state) takeDisruption(pdb *policyv1.PodDisruptionBudget, pod string) error {
	if pdb.Status.ObservedGeneration < pdb.Generation {
		err := apierrors.NewTooManyRequests(evictMessage, 10)
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdb.Name),
		})
		return err
	}
	if pdb.Status.DisruptionsAllowed < 0 {
		err := apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, errors.New("pdb disruptions allowed is negative"))
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s does not allow evicting pods currently: pdb disruptions allowed is negative", pdb.Name),
		})
		return err
	}
	if pdb.Status.DisruptionsAllowed == 0 {
		err := apierrors.NewTooManyRequests(evictMessage, 0)
		cond := meta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
		var msg string
		switch {
		case cond != nil && cond.Status == metav1.ConditionFalse && cond.Message != "" && cond.Reason == policyv1.SyncFailedReason:
			msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently because it failed sync: %s", pdb.Name, cond.Message)
		case pdb.Status.CurrentHealthy <= pdb.Status.DesiredHealthy:
			msg = fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy)
		case cond != nil && cond.Status == metav1.ConditionFalse && cond.Message != "":
			msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently (%s): %s", pdb.Name, cond.Reason, cond.Message)
		default:
			msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently", pdb.Name)
		}
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: policyv1.DisruptionBudgetCause, Message: msg,
		})
		return err
	}
	next := pdb.DeepCopy()
	next.Status.DisruptionsAllowed--
	if next.Status.DisruptedPods == nil {
		next.Status.DisruptedPods = map[string]metav1.Time{}
	}
	next.Status.DisruptedPods[pod] = metav1.NewTime(st.now().Truncate(time.Second))
	st.store(pdbsResource, next)
	return nil
}

// evictDelete marks the pod as a disruption target and deletes it
// gracefully, honouring the eviction's preconditions and grace period.
func (st *state) evictDelete(pod *corev1.Pod, opts *metav1.DeleteOptions) error {
	if err := preconditions("Pod", pod, opts); err != nil {
		return err
	}
	next := pod.DeepCopy()
	setPodCondition(next, corev1.DisruptionTarget, corev1.ConditionTrue, st.metaNow())
	for i := range next.Status.Conditions {
		if c := &next.Status.Conditions[i]; c.Type == corev1.DisruptionTarget {
			c.Reason, c.Message = "EvictionByEvictionAPI", "Eviction API: evicting"
		}
	}
	st.store(podsResource, next)
	st.deletePod(next, opts.GracePeriodSeconds)
	st.reconcile()
	return nil
}

// preconditions checks a deletion's preconditions as kube-apiserver's
// storage does, naming the kind rather than the resource.
func preconditions(kind string, m metav1.Object, opts *metav1.DeleteOptions) error {
	p := opts.Preconditions
	if p == nil {
		return nil
	}
	gr := schema.GroupResource{Resource: kind}
	if p.UID != nil && *p.UID != m.GetUID() {
		return apierrors.NewConflict(gr, m.GetName(),
			fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *p.UID, m.GetUID()))
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
		return apierrors.NewConflict(gr, m.GetName(),
			fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *p.ResourceVersion, m.GetResourceVersion()))
	}
	return nil
}
