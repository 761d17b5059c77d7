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
	"strings"
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

// The client's request rate: kubectl's defaults (k8s.io/kubectl
// pkg/cmd/util, 50 requests a second in bursts of 300).
const (
	ClientQPS   = 50
	ClientBurst = 300
)

// Client talks to one cluster's Kubernetes API.
type Client struct {
	cs kubernetes.Interface
}

// New builds a client from kubeconfig bytes.
func New(kubeconfig []byte) (*Client, error) {
	return NewAt(kubeconfig, "")
}

// NewAt builds a client from kubeconfig bytes that talks to server instead
// of the server the kubeconfig names (when server is not empty), with the
// kubeconfig's credentials and CA: another address of the same API.
func NewAt(kubeconfig []byte, server string) (*Client, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if server != "" {
		cfg.Host = server
	}
	cfg.Timeout = CallTimeout
	// client-go's own default (5 requests a second, bursts of 10) would
	// hold every gate, cordon and drain of a rollout for 200 ms a request
	// once the waits used up the burst; kubectl's defaults are taken
	// instead.
	cfg.QPS, cfg.Burst = ClientQPS, ClientBurst
	// The client certificate or token goes with every request: a redirect
	// is never followed.
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return noredirect.Transport(rt) }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return &Client{cs: cs}, nil
}

// Server returns the API server a kubeconfig's current context names, ""
// when it names none or does not parse.
func Server(kubeconfig []byte) string {
	if len(kubeconfig) == 0 {
		return ""
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return ""
	}
	return cfg.Host
}

// WithServer returns the kubeconfig with every cluster entry naming server.
func WithServer(kubeconfig []byte, server string) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return out, nil
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
	Name string
	// Ready is set when the node's Ready condition is True.
	Ready bool
	// Condition is the Ready condition's status: "True", "False",
	// "Unknown" (the node controller heard nothing from the kubelet for its
	// grace period), or "" when the node has none yet.
	Condition string
	// ConditionSince is when the Ready condition last changed its status
	// (its lastTransitionTime); zero when the node has no Ready condition.
	ConditionSince time.Time
	Unschedulable  bool
	KubeletVersion string
	Labels         map[string]string
	// Schematic is the Image Factory schematic of the Talos image the
	// node runs, as Talos annotates its Node; "" when it does not.
	Schematic string
	// CordonedBy says who cordoned the node and left a mark: CordonedByUs
	// when this engine did, CordonedByTalos when Talos did (it uncordons
	// such a node when it boots again), "" otherwise.
	CordonedBy string
}

// Marks of who cordoned a node, in Node.CordonedBy.
const (
	CordonedByUs    = "taloscluster"
	CordonedByTalos = "talos"
)

// Annotations that mark a cordon. Talos sets its own during reset,
// upgrade and shutdown and uncordons on boot only a node that carries it;
// the engine marks its own cordons, so that it uncordons a node it
// cordoned that is not removed after all.
const (
	cordonAnnotation      = "taloscluster.dev/cordoned"
	talosCordonAnnotation = "talos.dev/cordoned"
)

// schematicAnnotation is the Node annotation in which Talos names the
// Image Factory schematic of the image it runs (NodeAnnotationSpec from
// the "schematic" extension, too long for a label value).
const schematicAnnotation = "extensions.talos.dev/schematic"

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
		out = append(out, nodeOf(n))
	}
	slices.SortFunc(out, func(a, b Node) int { return compare(a.Name, b.Name) })
	return out, nil
}

// Node reads one node; ok is false when it does not exist.
func (c *Client) Node(ctx context.Context, name string) (n Node, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	got, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Node{}, false, nil
	}
	if err != nil {
		return Node{}, false, fmt.Errorf("reading node %s: %w", name, err)
	}
	return nodeOf(*got), true, nil
}

func nodeOf(n corev1.Node) Node {
	cond, since := condition(n)
	out := Node{
		Name:           n.Name,
		Condition:      cond,
		ConditionSince: since,
		Unschedulable:  n.Spec.Unschedulable,
		KubeletVersion: n.Status.NodeInfo.KubeletVersion,
		Labels:         n.Labels,
		Schematic:      n.Annotations[schematicAnnotation],
	}
	out.Ready = out.Condition == string(corev1.ConditionTrue)
	if n.Spec.Unschedulable {
		switch {
		case n.Annotations[cordonAnnotation] != "":
			out.CordonedBy = CordonedByUs
		case n.Annotations[talosCordonAnnotation] != "":
			out.CordonedBy = CordonedByTalos
		}
	}
	return out
}

// condition returns the status of the node's Ready condition and when it
// last changed.
func condition(n corev1.Node) (string, time.Time) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status), c.LastTransitionTime.Time
		}
	}
	return "", time.Time{}
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

// Cordon marks a node unschedulable and records that this engine did it,
// with why.
func (c *Client) Cordon(ctx context.Context, node, why string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{cordonAnnotation: why}},
		"spec":     map[string]any{"unschedulable": true},
	})
	if err != nil {
		return err
	}
	return c.patchCordon(ctx, node, patch)
}

// Uncordon makes a node schedulable again and removes the engine's mark.
func (c *Client) Uncordon(ctx context.Context, node string) error {
	return c.patchCordon(ctx, node, []byte(`{"metadata":{"annotations":{"`+cordonAnnotation+`":null}},"spec":{"unschedulable":false}}`))
}

func (c *Client) patchCordon(ctx context.Context, node string, patch []byte) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("changing whether node %s is schedulable: %w", node, err)
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

// DrainError is a drain that ran out of time with pods left on the node.
type DrainError struct {
	Node string
	// Blocked are the pods whose eviction a PodDisruptionBudget refused
	// (429) until the end; Terminating are evicted pods that had not gone
	// yet.
	Blocked, Terminating []string
	// Budgets names the PodDisruptionBudgets that refused, as the API
	// server's answers did.
	Budgets []string
}

func (e *DrainError) Error() string {
	msg := fmt.Sprintf("draining node %s: %v", e.Node, ErrDrainTimeout)
	if len(e.Blocked) > 0 {
		msg += fmt.Sprintf(": eviction of %s refused by a PodDisruptionBudget", strings.Join(e.Blocked, ", "))
		if len(e.Budgets) > 0 {
			msg += " (" + strings.Join(e.Budgets, "; ") + ")"
		}
	}
	if len(e.Terminating) > 0 {
		msg += fmt.Sprintf("; still terminating: %s", strings.Join(e.Terminating, ", "))
	}
	return msg
}

func (e *DrainError) Unwrap() error { return ErrDrainTimeout }

// Drain evicts a node's pods through the eviction API, so
// PodDisruptionBudgets are honoured: a refused eviction (429) is retried
// until timeout, and then Drain returns a *DrainError. It does not cordon
// (see Cordon). DaemonSet pods, mirror pods and finished pods stay. An
// evicted pod counts as gone when it is deleted, or at once when the node
// is not Ready (its kubelet cannot finish the deletion).
func (c *Client) Drain(ctx context.Context, node string, timeout time.Duration) error {
	// Each call gets its own bound from ctx; the drain's deadline is
	// checked between rounds, so a call is never cut short (or refused by
	// the client's rate limiter) for the drain's sake.
	deadline := time.Now().Add(timeout)
	last := &DrainError{Node: node}
	for {
		pods, err := c.evictable(ctx, node)
		if err != nil {
			return err
		}
		n, _, err := c.Node(ctx, node)
		if err != nil {
			return err
		}
		de := &DrainError{Node: node}
		for _, p := range pods {
			name := p.Namespace + "/" + p.Name
			if p.DeletionTimestamp != nil {
				if n.Ready {
					de.Terminating = append(de.Terminating, name)
				}
				continue
			}
			if err := c.evict(ctx, p); err != nil {
				if apierrors.IsTooManyRequests(err) {
					de.Blocked = append(de.Blocked, name)
					de.Budgets = appendUnique(de.Budgets, err.Error())
					continue
				}
				return err
			}
			if n.Ready {
				de.Terminating = append(de.Terminating, name)
			}
		}
		if len(de.Blocked) == 0 && len(de.Terminating) == 0 {
			return nil
		}
		last = de
		wait := min(time.Second, time.Until(deadline))
		if wait <= 0 {
			return last
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("draining node %s: %w (%w)", node, ctx.Err(), last)
		case <-time.After(wait):
		}
	}
}

func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
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
