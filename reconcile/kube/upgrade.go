package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Component is the state of one control-plane component's static pod on a
// node, as its mirror pod shows it.
type Component struct {
	// Found is set when the node has a pod of the component.
	Found bool
	// Image is the pod's container image.
	Image string
	// Ready is set when the pod's Ready condition is True.
	Ready bool
}

// ControlPlaneComponent reads the mirror pod of a control-plane component
// (kube-apiserver, kube-controller-manager, kube-scheduler) on a node: the
// pod in kube-system labelled k8s-app=<component> that runs there.
func (c *Client) ControlPlaneComponent(ctx context.Context, component, node string) (Component, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	pods, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
		LabelSelector: "k8s-app=" + component,
		FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return Component{}, fmt.Errorf("reading the %s pod of %s: %w", component, node, err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			continue
		}
		out := Component{Found: true, Ready: podReady(p)}
		for _, ct := range p.Spec.Containers {
			if ct.Name == component || out.Image == "" {
				out.Image = ct.Image
			}
		}
		return out, nil
	}
	return Component{}, nil
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// KubeProxy is the state of the kube-proxy DaemonSet.
type KubeProxy struct {
	// Found is set when the cluster runs kube-proxy as the DaemonSet
	// kube-system/kube-proxy.
	Found bool
	// Image is the image its pod template names.
	Image string
	// RolledOut is set when every scheduled pod runs the current template
	// and is available, as kubectl rollout status decides it.
	RolledOut bool
	// Progress says how far the rollout is, for a person.
	Progress string
}

// KubeProxyState reads the kube-proxy DaemonSet.
func (c *Client) KubeProxyState(ctx context.Context) (KubeProxy, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	ds, err := c.cs.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return KubeProxy{}, nil
	}
	if err != nil {
		return KubeProxy{}, fmt.Errorf("reading the kube-proxy DaemonSet: %w", err)
	}
	return kubeProxyOf(ds), nil
}

func kubeProxyOf(ds *appsv1.DaemonSet) KubeProxy {
	out := KubeProxy{Found: true}
	for _, ct := range ds.Spec.Template.Spec.Containers {
		if ct.Name == "kube-proxy" || out.Image == "" {
			out.Image = ct.Image
		}
	}
	st := ds.Status
	out.RolledOut = ds.Generation <= st.ObservedGeneration &&
		st.UpdatedNumberScheduled >= st.DesiredNumberScheduled &&
		st.NumberAvailable >= st.DesiredNumberScheduled
	out.Progress = fmt.Sprintf("%d of %d pods updated, %d available", st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberAvailable)
	return out
}

// SetKubeProxyImage sets the image of the kube-proxy container of the
// kube-proxy DaemonSet (a strategic merge patch, which merges containers
// by name); the DaemonSet controller then rolls it out node by node.
func (c *Client) SetKubeProxyImage(ctx context.Context, image string) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []map[string]string{{"name": "kube-proxy", "image": image}},
	}}}})
	if err != nil {
		return err
	}
	if _, err := c.cs.AppsV1().DaemonSets("kube-system").Patch(ctx, "kube-proxy", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting the kube-proxy image to %s: %w", image, err)
	}
	return nil
}

// ImageTag returns an image reference's tag, "" when it has none (a colon
// before the last slash is a registry's port).
func ImageTag(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	i := strings.LastIndexByte(image, ':')
	if i < 0 || strings.ContainsRune(image[i:], '/') {
		return ""
	}
	return image[i+1:]
}
