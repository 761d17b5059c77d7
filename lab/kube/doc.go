// Package kube is an emulator of the subset of the Kubernetes API that
// taloscluster's engine uses through client-go. It is not a Kubernetes API
// server: it keeps a handful of resource kinds in memory, plays the parts of
// the kubelet, the scheduler, the ReplicaSet controller, the pod garbage
// collector and the disruption controller in a few lines each, and answers
// everything else with the errors a real server would give for an unknown
// resource.
//
// What it serves, over HTTPS with client-certificate authentication against
// the cluster's Kubernetes CA (401 Unauthorized without a valid one, as from
// a kube-apiserver started with --anonymous-auth=false):
//
//   - /version, /healthz, /livez, /readyz;
//   - legacy discovery: /api, /api/v1, /apis, /apis/policy, /apis/policy/v1,
//     /apis/apps, /apis/apps/v1,
//     listing only what the emulator serves (the aggregated discovery format
//     is not offered, so client-go falls back to the legacy documents);
//   - nodes: list (label selectors and the field selectors metadata.name and
//     spec.unschedulable), get, create, update, patch (strategic merge, JSON
//     merge and JSON patch), delete, and the status subresource;
//   - pods: list across namespaces and in one namespace (label selectors and
//     field selectors such as spec.nodeName and status.phase), get, create,
//     update, patch, delete (graceful, with preconditions), the status
//     subresource and the eviction subresource (policy/v1 Eviction) with the
//     disruption-budget rules of kube-apiserver;
//   - poddisruptionbudgets (policy/v1): list, get, create, update, patch,
//     delete, with a status kept current the way the disruption controller
//     of kube-controller-manager computes it;
//   - namespaces: list, get, create, update, patch;
//   - daemonsets (apps/v1): get, list, create, update, patch (JSON, merge
//     and strategic merge), delete and the status subresource, with a
//     DaemonSet controller that keeps one pod per node and rolls a template
//     change one node at a time (kube-proxy is one, as Talos renders it).
//
// Requests and responses use the real wire formats: JSON, YAML and the
// Kubernetes protobuf encoding that client-go prefers for built-in types;
// errors are metav1.Status bodies with the messages, reasons and codes of
// kube-apiserver (NotFound 404, AlreadyExists and Conflict 409, Invalid 422,
// TooManyRequests 429 with Retry-After where the real server sends one).
// Every write takes the next resourceVersion of one cluster-wide counter, an
// update or patch carrying a stale resourceVersion is a Conflict, and an
// update that changes nothing keeps the resourceVersion. The admission
// plugins that shape these objects are imitated: TaintNodesByCondition
// (new nodes carry the not-ready taint), Priority and
// DefaultTolerationSeconds (new pods get a priority, a preemption policy and
// five-minute tolerations of not-ready and unreachable nodes), and the pod
// defaults the engine reads.
//
// Not served: watches (list requests with watch=true and /watch/ paths get
// 501 Not Implemented, so informers do not work against the emulator;
// callers poll), server-side apply (415), pagination (limit is ignored and
// every list is complete), deletecollection and namespace deletion (405),
// dry runs (400), every other resource and subresource (404, where a real
// server would serve services, logs, exec and the rest), managed fields,
// authorization (every authenticated user may do everything) and the rest
// of the real server's defaulting and validation.
//
// A simulated world sits behind the API: nodes added with [Server.AddNode]
// have a kubelet that turns them Ready after [Options.ReadyDelay], runs the
// pods bound to them (those placed with [Server.AddPod] and those created
// through the API with spec.nodeName set to the node, or bound by the
// emulated scheduler), and finishes the graceful deletion of those pods
// while the node is Ready (a NotReady node's pods stay Terminating, as they
// do in a real cluster). [Server.StopKubelet] stops a node's kubelet: with a
// machine shutdown it first runs the kubelet's graceful node shutdown (the
// node is posted NotReady, "node is shutting down", and every pod it runs
// turns Failed with reason Terminated); either way nothing runs or finishes
// terminating there any more, and after [Options.NodeMonitorGracePeriod] the
// node lifecycle controller turns the node Unknown (NodeStatusUnknown),
// taints it unreachable and marks its pods NotReady. Nodes and pods created
// through the API on nodes without an emulated kubelet have none, as in a
// cluster without one: their status is what clients write. A pod whose
// controller (ownerReferences with controller: true, whether set by AddPod
// or by a client) is a ReplicaSet is replaced on another Ready, schedulable
// node as soon as it starts terminating or fails; a StatefulSet pod is
// recreated under its own name once it is gone (a failed one is deleted
// first); a DaemonSet pod is recreated on its own node (likewise). Deleting
// a node deletes its pods. [Server.SetServing] stops and resumes serving
// (connections refused meanwhile), for an API endpoint with no
// kube-apiserver behind it; [Server.SetEndpoints] sets every address it
// answers at, each with a serving certificate for its own names and
// addresses, as kube-apiservers bound to all addresses answer at each VIP
// their machines hold.
//
// Unlike a real control plane, where controllers catch up within a moment,
// the simulated controllers act before the request that triggered them is
// answered: a budget's status is current on the next read, and a
// ReplicaSet's replacement pod exists as soon as an eviction returns.
//
// Faults are injected per operation ([Server.Fail], [Server.Hang],
// [Server.Delay]) and every request is recorded in an ordered log
// ([Server.Log]) that tests assert on.
//
// The conformance tests in this package run the same client-go cases
// against the emulator and against a real kube-apiserver, etcd and
// kube-controller-manager (its disruption controller), and compare the raw
// answers of both to a list of requests field by field; the differences
// they accept are listed there. They need the binaries that
// .ci/kube-binaries.sh builds, and skip without them.
package kube
