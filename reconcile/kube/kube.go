// Package kube is the engine's side of the workload cluster's Kubernetes
// API, through client-go: the running version, node readiness, cordon,
// drain with PodDisruptionBudget-aware eviction, and node deletion. Every
// call is bounded (CallTimeout; drains DrainTimeout) so an API that accepts
// connections but never answers fails the run instead of hanging it.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/internal/noredirect"
)

// Bounds on Kubernetes API calls.
const (
	CallTimeout  = 30 * time.Second
	DrainTimeout = 330 * time.Second
)

// Client talks to one cluster's Kubernetes API.
type Client struct {
	cs kubernetes.Interface
}

// New builds a client from kubeconfig bytes.
func New(kubeconfig []byte) (*Client, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	cfg.Timeout = CallTimeout
	// The client certificate or token goes with every request: a redirect
	// is never followed.
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return noredirect.Transport(rt) }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return &Client{cs: cs}, nil
}

// NewFromInterface wraps an existing clientset (for tests).
func NewFromInterface(cs kubernetes.Interface) *Client { return &Client{cs: cs} }

// Version returns the API server's version, e.g. v1.36.1.
func (c *Client) Version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	body, err := c.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("reading the Kubernetes version: %w", err)
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return "", fmt.Errorf("reading the Kubernetes version: %w", err)
	}
	return info.GitVersion, nil
}

// Node is what the engine needs to know of a Kubernetes node.
type Node struct {
	Name           string
	Ready          bool
	Unschedulable  bool
	KubeletVersion string
	Labels         map[string]string
}

// Nodes lists the cluster's nodes.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	list, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := make([]Node, 0, len(list.Items))
	for _, n := range list.Items {
		out = append(out, Node{
			Name:           n.Name,
			Ready:          ready(n),
			Unschedulable:  n.Spec.Unschedulable,
			KubeletVersion: n.Status.NodeInfo.KubeletVersion,
			Labels:         n.Labels,
		})
	}
	slices.SortFunc(out, func(a, b Node) int { return compare(a.Name, b.Name) })
	return out, nil
}

func ready(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// SetUnschedulable cordons (true) or uncordons (false) a node.
func (c *Client) SetUnschedulable(ctx context.Context, node string, unschedulable bool) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable)
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting unschedulable=%t on node %s: %w", unschedulable, node, err)
	}
	return nil
}

// DeleteNode removes a node object; a node that is already gone is fine.
func (c *Client) DeleteNode(ctx context.Context, node string) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	err := c.cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", node, err)
	}
	return nil
}

// ErrDrainTimeout is returned when pods are still on a node at the end of
// the drain deadline, typically held by a PodDisruptionBudget.
var ErrDrainTimeout = errors.New("drain timed out")

// Drain cordons a node and evicts its pods through the eviction API, so
// PodDisruptionBudgets are honoured: a blocked eviction (429) is retried
// until DrainTimeout. DaemonSet pods and mirror pods stay.
func (c *Client) Drain(ctx context.Context, node string) error {
	ctx, cancel := context.WithTimeout(ctx, DrainTimeout)
	defer cancel()
	if err := c.SetUnschedulable(ctx, node, true); err != nil {
		return err
	}
	for {
		pods, err := c.evictable(ctx, node)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return nil
		}
		var blocked []string
		for _, p := range pods {
			if err := c.evict(ctx, p); err != nil {
				if apierrors.IsTooManyRequests(err) {
					blocked = append(blocked, p.Namespace+"/"+p.Name)
					continue
				}
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("draining node %s: %w: pods still there, blocked by disruption budgets: %v", node, ErrDrainTimeout, blocked)
		case <-time.After(time.Second):
		}
	}
}

func (c *Client) evictable(ctx context.Context, node string) ([]corev1.Pod, error) {
	callCtx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	list, err := c.cs.CoreV1().Pods("").List(callCtx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "DaemonSet" }) {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func (c *Client) evict(ctx context.Context, p corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	err := c.cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsTooManyRequests(err) {
			return err
		}
		return fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
