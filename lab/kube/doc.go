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
//   - legacy discovery: /api, /api/v1, /apis and /apis/<group>[/<version>]
//     for every served group (apps, policy, rbac.authorization.k8s.io,
//     apiextensions.k8s.io and the groups of the CustomResourceDefinitions),
//     listing only what the emulator serves, each resource with its kind,
//     scope, singular name, short names and categories as kube-apiserver
//     v1.37 lists them (the aggregated discovery format is not offered, so
//     client-go falls back to the legacy documents);
//   - /openapi/v3 and one document per served group version, holding only
//     each kind's PATCH operation with its fieldValidation parameter: what
//     kubectl's and Helm's resource builders read to learn that the server
//     validates fields (so they skip client-side validation, which Helm
//     could not do without a document); no schemas;
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
//   - namespaces: list, get, create, update, patch, server-side apply, dry
//     runs, and delete: the namespace is marked (deletionTimestamp, phase
//     Terminating, the answer to the DELETE), then the namespace controller
//     deletes everything in it, of every kind, before the answer is sent,
//     and the namespace is gone once nothing is left and
//     [Options.NamespaceFinalizeDelay] has passed (at once without one;
//     the lab's clusters keep it a second, as the controller's sweep
//     takes a moment); a pod that no
//     kubelet finishes (its node has none, or a stopped one) keeps the
//     namespace Terminating until it is gone. default, kube-system and
//     kube-public may not be deleted (403). Creating anything in a
//     Terminating namespace is 403 Forbidden ("unable to create new content
//     in namespace x because it is being terminated", cause
//     NamespaceTerminating), in a missing one 404 (namespaces "x" not
//     found), as the NamespaceLifecycle admission plugin answers;
//   - daemonsets (apps/v1): get, list, create, update, patch (JSON, merge
//     and strategic merge), delete and the status subresource, with a
//     DaemonSet controller that keeps one pod per node and rolls a template
//     change one node at a time (kube-proxy is one, as Talos renders it);
//   - a generic object store for kinds no controller of the emulator acts
//     on: secrets, configmaps, serviceaccounts and services (v1),
//     deployments and statefulsets (apps/v1, with a status subresource whose
//     status is what clients write: no Deployment or StatefulSet controller
//     runs, so no ReplicaSets and no pods appear; with
//     [Options.DeploymentsAvailable], as the lab's clusters run, a written
//     Deployment shows every replica available at once), clusterroles,
//     clusterrolebindings, roles and rolebindings
//     (rbac.authorization.k8s.io/v1), customresourcedefinitions
//     (apiextensions.k8s.io/v1) and the kinds those define. Verbs: get, list
//     (label selectors as kube-apiserver parses them; field selectors
//     metadata.name, metadata.namespace, and type for secrets), create
//     (generateName too), update, patch (JSON patch, JSON merge patch,
//     strategic merge patch for the built-in kinds; a custom kind refuses a
//     strategic merge patch with 415 as the real server does), server-side
//     apply, delete, and dry runs (dryRun=All) of every write. Writes take
//     uid, creationTimestamp and resourceVersion as the modelled kinds do;
//     deployments, statefulsets, definitions and custom objects count spec
//     changes in metadata.generation. The strategies kept: a Secret's
//     stringData is merged into data (never stored) and its type defaults
//     to Opaque and may not change; a Service gets its type, session
//     affinity, port protocols and target ports defaulted and a cluster IP
//     from 10.96.0.0/12 (in order, not at random); Deployments and
//     StatefulSets get the apps/v1 defaults and their pod templates the pod
//     defaults; services and service accounts answer a DELETE with the
//     deleted object, the others with a Success status;
//   - CustomResourceDefinitions: a definition's served versions are served
//     at /apis/<group>/<version>/[namespaces/<ns>/]<plural> (one store of
//     objects shared by all versions, no conversion) with the scope, names
//     and status subresource its spec gives, and appear in discovery; its
//     status gets acceptedNames, storedVersions and the conditions
//     NamesAccepted and Established, True, as the apiextensions controllers
//     set them (already in the answer to the create). Deleting a definition
//     answers it marked for deletion with the cleanup finalizer, and by then
//     its objects, its discovery entries and the definition are gone.
//     Custom objects are kept as sent: no schema validation, pruning or
//     defaulting, and JSON or YAML only (no protobuf, as for real custom
//     resources).
//
// Server-side apply (PATCH with application/apply-patch+yaml, a
// fieldManager, optional force) serves the generic kinds and namespaces:
// it creates an absent object (201), sets the applied fields, removes the
// fields the same manager applied before and omits now unless another
// manager owns them, keeps the other managers' fields, and refuses with 409
// Conflict (causes of type FieldManagerConflict) to change a field another
// manager owns unless forced; without a fieldManager it is 422 Invalid, as
// from kube-apiserver. It runs on the merge library kube-apiserver uses
// (structured-merge-diff) but with types deduced from the objects instead
// of the OpenAPI schemas: maps merge key by key and every list is atomic,
// owned and replaced as a whole (the real schemas merge lists such as
// containers, ports or env by key). metadata.managedFields holds one entry
// per manager and operation (Apply, and Update for creates, updates and
// patches of the generic kinds, the manager named by fieldManager or the
// User-Agent as kube-apiserver does), fieldsType FieldsV1; the fieldsV1
// sets follow from the deduced types, so they differ in detail from the
// real ones (lists appear whole, "." markers differ). Writes to status
// subresources are not recorded as managers, and apply to a status
// subresource is not served (405).
//
// A dry run (dryRun=All on create, update, patch, apply or delete of the
// generic kinds and namespaces) answers as the write would have, with the
// stored object's resourceVersion (none for a creation), and changes
// nothing: no object, no resourceVersion taken. Another dryRun value is
// 422, as from kube-apiserver; the other modelled kinds still answer any
// dry run with 400.
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
// callers poll), server-side apply of nodes, pods, budgets and daemonsets
// (415), pagination (limit is ignored and every list is complete),
// deletecollection (405), dry runs of nodes, pods, budgets and daemonsets
// (400), every other resource and subresource (404, where a real server
// would serve endpoints, replicasets, jobs, logs, exec, scale, tokens and
// the rest), managed fields of the kinds modelled with controllers,
// authorization (every authenticated user may do everything), the OpenAPI
// v2 document and schemas, strict field validation (fieldValidation is
// accepted and ignored: the built-in kinds drop unknown fields, custom
// kinds keep them), finalizers of the generic kinds (deletion is
// immediate), the garbage collector (ownerReferences of the generic kinds
// delete nothing) and the rest of the real server's defaulting and
// validation.
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
