package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/lab/kube/realkube"
)

// wireRequest is one raw request whose answer the emulator and the real
// server must give alike.
type wireRequest struct {
	name, method, path, body string
	// contentType, if any, is the body's type instead of JSON, or of a
	// strategic merge patch for PATCH.
	contentType []string
}

func wr(name, method, path, body string, contentType ...string) wireRequest {
	return wireRequest{name: name, method: method, path: path, body: body, contentType: contentType}
}

// wireRequests run in order after wireFixtures on both servers.
var wireRequests = []wireRequest{
	wr("version", "GET", "/version", ""),
	wr("api", "GET", "/api", ""),
	wr("apis policy", "GET", "/apis/policy", ""),
	wr("node", "GET", "/api/v1/nodes/n1", ""),
	wr("missing node", "GET", "/api/v1/nodes/nope", ""),
	wr("node list by label", "GET", "/api/v1/nodes?labelSelector=lab.test%2Fwire%3Dyes", ""),
	wr("cordon", "PATCH", "/api/v1/nodes/n1", `{"spec":{"unschedulable":true}}`),
	wr("stale update", "PUT", "/api/v1/nodes/n1", `{"metadata":{"name":"n1","resourceVersion":"1"}}`),
	wr("existing node", "POST", "/api/v1/nodes", `{"metadata":{"name":"n1"}}`),
	wr("invalid node", "POST", "/api/v1/nodes", `{"metadata":{"name":"Bad_Name"}}`),
	wr("pod", "GET", "/api/v1/namespaces/wire/pods/w1", ""),
	wr("pods on n1", "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", ""),
	wr("bad field", "GET", "/api/v1/namespaces/wire/pods?fieldSelector=spec.color%3Dblue", ""),
	wr("budget", "GET", "/apis/policy/v1/namespaces/wire/poddisruptionbudgets/strict", ""),
	wr("missing budget", "GET", "/apis/policy/v1/namespaces/wire/poddisruptionbudgets/nope", ""),
	wr("budget with both bounds", "POST", "/apis/policy/v1/namespaces/wire/poddisruptionbudgets",
		`{"metadata":{"name":"both"},"spec":{"minAvailable":1,"maxUnavailable":1,"selector":{}}}`),
	wr("refused eviction", "POST", "/api/v1/namespaces/wire/pods/w1/eviction",
		`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"w1","namespace":"wire"}}`),
	wr("eviction of a missing pod", "POST", "/api/v1/namespaces/wire/pods/nope/eviction",
		`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"nope","namespace":"wire"}}`),
	wr("eviction with a wrong name", "POST", "/api/v1/namespaces/wire/pods/w1/eviction",
		`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"w2","namespace":"wire"}}`),
	wr("allowed eviction", "POST", "/api/v1/namespaces/wire/pods/f1/eviction",
		`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"f1","namespace":"wire"}}`),
	wr("evicted pod", "GET", "/api/v1/namespaces/wire/pods/f1", ""),
	wr("delete node", "DELETE", "/api/v1/nodes/n2", ""),
	wr("api v1 resources", "GET", "/api/v1", ""),
	wr("policy v1 resources", "GET", "/apis/policy/v1", ""),
	wr("create node", "POST", "/api/v1/nodes", `{"metadata":{"name":"n3","labels":{"a":"b"}},"spec":{"unschedulable":true,"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]}}`),
	wr("create pod", "POST", "/api/v1/namespaces/wire/pods",
		`{"metadata":{"name":"c1","labels":{"app":"c"}},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"i","resources":{"requests":{"cpu":"1"}}}]}}`),
	wr("pod status patch", "PATCH", "/api/v1/namespaces/wire/pods/c1/status", `{"status":{"phase":"Running"}}`),
	wr("delete pod", "DELETE", "/api/v1/namespaces/wire/pods/c1", ""),
	wr("budget over bare pods with maxUnavailable", "GET", "/apis/policy/v1/namespaces/wire/poddisruptionbudgets/bare", ""),
	wr("eviction under a budget that expects no pods", "POST", "/api/v1/namespaces/wire/pods/b1/eviction",
		`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"b1","namespace":"wire"}}`),
	wr("eviction under two budgets", "POST", "/api/v1/namespaces/wire/pods/d1/eviction",
		`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"d1","namespace":"wire"}}`),
	wr("eviction of an unready pod", "POST", "/api/v1/namespaces/wire/pods/u1/eviction",
		`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"u1","namespace":"wire"}}`),
	wr("budget list", "GET", "/apis/policy/v1/namespaces/wire/poddisruptionbudgets", ""),
	wr("bad label selector", "GET", "/api/v1/nodes?labelSelector=a%20in", ""),
	wr("name mismatch", "PUT", "/api/v1/nodes/n1", `{"metadata":{"name":"other"}}`),
	wr("stale delete precondition", "DELETE", "/api/v1/namespaces/wire/pods/w2", `{"preconditions":{"resourceVersion":"1"}}`),
	wr("namespace", "GET", "/api/v1/namespaces/wire", ""),
	wr("stale node delete precondition", "DELETE", "/api/v1/nodes/n3", `{"preconditions":{"resourceVersion":"1"}}`),
	wr("JSON patch test failure", "PATCH", "/api/v1/nodes/n1",
		`[{"op":"test","path":"/spec/unschedulable","value":false}]`, "application/json-patch+json"),
	wr("merge patch with a stale resourceVersion", "PATCH", "/api/v1/nodes/n1",
		`{"metadata":{"resourceVersion":"2"},"spec":{"unschedulable":false}}`, "application/merge-patch+json"),
	wr("unknown resource", "GET", "/api/v1/frobs", ""),
	wr("pods in a missing namespace", "POST", "/api/v1/namespaces/nope/pods",
		`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}`),
	wr("secret", "GET", "/api/v1/namespaces/wire/secrets/ws", ""),
	wr("create secret with stringData", "POST", "/api/v1/namespaces/wire/secrets",
		`{"metadata":{"name":"cattle-credentials-x","labels":{"owner":"helm"}},"data":{"a":"YQ=="},"stringData":{"b":"bee","a":"ay"}}`),
	wr("secrets by label", "GET", "/api/v1/namespaces/wire/secrets?labelSelector=owner%3Dhelm%2Cname%20notin%20(x)", ""),
	wr("dry-run secret", "POST", "/api/v1/namespaces/wire/secrets?dryRun=All", `{"metadata":{"name":"dry"},"stringData":{"k":"v"}}`),
	wr("dry-run secret is not there", "GET", "/api/v1/namespaces/wire/secrets/dry", ""),
	wr("secret in a missing namespace", "POST", "/api/v1/namespaces/nope/secrets", `{"metadata":{"name":"s"}}`),
	wr("apply a configmap", "PATCH", "/api/v1/namespaces/wire/configmaps/applied?fieldManager=lab",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied","labels":{"l":"1"}},"data":{"a":"1","b":"2"}}`, "application/apply-patch+yaml"),
	wr("re-apply a configmap without a field", "PATCH", "/api/v1/namespaces/wire/configmaps/applied?fieldManager=lab",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"1\"\n", "application/apply-patch+yaml"),
	wr("apply conflict", "PATCH", "/api/v1/namespaces/wire/configmaps/applied?fieldManager=other",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"},"data":{"a":"9"}}`, "application/apply-patch+yaml"),
	wr("apply without a field manager", "PATCH", "/api/v1/namespaces/wire/configmaps/applied",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"applied"}}`, "application/apply-patch+yaml"),
	wr("create service account", "POST", "/api/v1/namespaces/wire/serviceaccounts", `{"metadata":{"name":"cattle"}}`),
	wr("delete service account", "DELETE", "/api/v1/namespaces/wire/serviceaccounts/cattle", ""),
	wr("delete secret", "DELETE", "/api/v1/namespaces/wire/secrets/cattle-credentials-x", ""),
	wr("create service", "POST", "/api/v1/namespaces/wire/services",
		`{"metadata":{"name":"web"},"spec":{"selector":{"app":"web"},"ports":[{"name":"http","port":80}]}}`),
	wr("create deployment", "POST", "/apis/apps/v1/namespaces/wire/deployments",
		`{"metadata":{"name":"cattle-cluster-agent"},"spec":{"selector":{"matchLabels":{"app":"a"}},"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"agent","image":"rancher/rancher-agent:v2.12.0"}]}}}}`),
	wr("patch deployment", "PATCH", "/apis/apps/v1/namespaces/wire/deployments/cattle-cluster-agent",
		`{"spec":{"replicas":2}}`),
	wr("apply cluster role", "PATCH", "/apis/rbac.authorization.k8s.io/v1/clusterroles/proxy-clusterrole-kubeapiserver?fieldManager=lab",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"proxy-clusterrole-kubeapiserver"},"rules":[{"apiGroups":[""],"resources":["nodes/proxy"],"verbs":["get"]}]}`,
		"application/apply-patch+yaml"),
	wr("apply namespace", "PATCH", "/api/v1/namespaces/cattle-system?fieldManager=lab",
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"cattle-system","labels":{"a":"b"}}}`, "application/apply-patch+yaml"),
	wr("dry-run namespace delete", "DELETE", "/api/v1/namespaces/cattle-system?dryRun=All", ""),
	wr("delete an immortal namespace", "DELETE", "/api/v1/namespaces/default", ""),
	wr("apps v1 resources", "GET", "/apis/apps/v1", ""),
	wr("rbac v1 resources", "GET", "/apis/rbac.authorization.k8s.io/v1", ""),
	wr("apiextensions v1 resources", "GET", "/apis/apiextensions.k8s.io/v1", ""),
}

// knownWireDifferences are the differences the emulator keeps on purpose,
// by request name and JSON path; see the package documentation.
var knownWireDifferences = map[string][]string{
	// The emulator's build information is its own.
	"version": {"buildDate", "compiler", "gitCommit", "goVersion"},
	// The real server reports its serving address.
	"api": {"serverAddressByClientCIDRs.0.serverAddress"},
	// The real validation message prints the internal Go value of the spec.
	"budget with both bounds": {"details.causes.0.message", "message"},
	// The emulator neither watches nor deletes collections, and has no
	// storage to hash; the resources it does not serve at all are left
	// out before comparing.
	"api v1 resources":           {"resources.*.verbs", "resources.*.storageVersionHash"},
	"policy v1 resources":        {"resources.*.verbs", "resources.*.storageVersionHash"},
	"apps v1 resources":          {"resources.*.verbs", "resources.*.storageVersionHash"},
	"rbac v1 resources":          {"resources.*.verbs", "resources.*.storageVersionHash"},
	"apiextensions v1 resources": {"resources.*.verbs", "resources.*.storageVersionHash"},
	// Cluster IPs are allocated at random by the real server, in order by
	// the emulator.
	"create service": {"spec.clusterIP", "spec.clusterIPs.0"},
}

// knownDifference reports whether a differing path is expected for a
// request; a "*" in a known path matches one element.
func knownDifference(req, path string) bool {
	for _, known := range knownWireDifferences[req] {
		k, p := strings.Split(known, "."), strings.Split(path, ".")
		if len(k) != len(p) {
			continue
		}
		match := true
		for i := range k {
			match = match && (k[i] == "*" || k[i] == p[i])
		}
		if match {
			return true
		}
	}
	return false
}

// servedOnly keeps, in a real discovery document, the resources the
// emulator's document lists.
func servedOnly(real, emu any) {
	rm, ok1 := real.(map[string]any)
	em, ok2 := emu.(map[string]any)
	if !ok1 || !ok2 || rm["kind"] != "APIResourceList" {
		return
	}
	served := map[any]bool{}
	for _, r := range em["resources"].([]any) {
		served[r.(map[string]any)["name"]] = true
	}
	var kept []any
	for _, r := range rm["resources"].([]any) {
		if served[r.(map[string]any)["name"]] {
			kept = append(kept, r)
		}
	}
	rm["resources"] = kept
}

// wireFixtures creates the same objects on a server.
func wireFixtures(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	f := fixtures{c: c}
	if _, err := c.CoreV1().Namespaces().Create(ctx, nsObject("wire"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets("wire").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ws", Labels: map[string]string{"owner": "helm", "name": "ws"}},
		StringData: map[string]string{"token": "t"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.node(ctx, t, "n1", map[string]string{"lab.test/wire": "yes"})
	f.node(ctx, t, "n2", nil)
	strict := map[string]string{"app": "strict"}
	f.pod(ctx, t, "wire", "w1", "n1", strict, true)
	f.pod(ctx, t, "wire", "w2", "n1", strict, true)
	f.pod(ctx, t, "wire", "f1", "n1", map[string]string{"app": "free"}, true)
	two := intstr.FromInt32(2)
	f.budget(ctx, t, "wire", "strict", policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: strict}}, 2)
	bare := map[string]string{"app": "bare"}
	f.pod(ctx, t, "wire", "b1", "n1", bare, true)
	f.pod(ctx, t, "wire", "b2", "n1", bare, true)
	one := intstr.FromInt32(1)
	f.budget(ctx, t, "wire", "bare", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: bare}}, 0)
	double := map[string]string{"app": "double"}
	f.pod(ctx, t, "wire", "d1", "n1", double, true)
	zero := intstr.FromInt32(0)
	f.budget(ctx, t, "wire", "double-a", policyv1.PodDisruptionBudgetSpec{MinAvailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: double}}, 1)
	f.budget(ctx, t, "wire", "double-b", policyv1.PodDisruptionBudgetSpec{MinAvailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: double}}, 1)
	unready := map[string]string{"app": "unready"}
	f.pod(ctx, t, "wire", "u1", "n1", unready, false)
	f.pod(ctx, t, "wire", "u2", "n1", unready, true)
	f.budget(ctx, t, "wire", "unready", policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: unready}}, 2)
}

// TestWireConformance sends the same raw requests to the emulator and to a
// real kube-apiserver and compares the status codes and JSON bodies, less
// the fields that differ by nature (identifiers, resource versions, times)
// and the known differences above.
func TestWireConformance(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp := realkube.Start(t, realkube.Options{Controllers: []string{"disruption"}})
	emu, _, _ := startEmulator(t, kube.Options{Version: conformanceVersion})
	emuAdmin, err := emu.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	answers := map[string][]wireAnswer{}
	for name, cfg := range map[string]*rest.Config{"real": cp.Admin, "emulator": emuAdmin} {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS = -1
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wireFixtures(ctx, t, c)
		for _, req := range wireRequests {
			answers[name] = append(answers[name], rawRequest(ctx, t, c, req))
		}
	}
	for i, req := range wireRequests {
		real, emu := answers["real"][i], answers["emulator"][i]
		if real.code != emu.code {
			t.Errorf("%s: status %d from the real server, %d from the emulator\nreal: %s\nemulator: %s", req.name, real.code, emu.code, real.body, emu.body)
			continue
		}
		var diffs []string
		servedOnly(real.json, emu.json)
		diffJSON("", real.json, emu.json, &diffs)
		diffs = slices.DeleteFunc(diffs, func(d string) bool {
			path, _, _ := strings.Cut(d, ":")
			return knownDifference(req.name, path)
		})
		if len(diffs) > 0 {
			t.Errorf("%s: the answers differ:\n  %s\nreal: %s\nemulator: %s", req.name, strings.Join(diffs, "\n  "), real.body, emu.body)
		}
	}
}

type wireAnswer struct {
	code int
	body string
	json any
}

func rawRequest(ctx context.Context, t *testing.T, c kubernetes.Interface, req wireRequest) wireAnswer {
	t.Helper()
	r := c.CoreV1().RESTClient().Verb(req.method).AbsPath(req.path).SetHeader("Accept", "application/json")
	if req.body != "" {
		var ct string
		switch {
		case len(req.contentType) > 0:
			ct = req.contentType[0]
		case req.method == "PATCH":
			ct = "application/strategic-merge-patch+json"
		default:
			ct = "application/json"
		}
		r = r.SetHeader("Content-Type", ct).Body([]byte(req.body))
	}
	var code int
	body, _ := r.Do(ctx).StatusCode(&code).Raw()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: the answer is not JSON: %v: %q", req.name, err, body)
	}
	return wireAnswer{code: code, body: string(body), json: normalize("", v)}
}

// volatile fields differ between any two servers.
var volatile = []string{
	"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "lastTransitionTime",
	"lastHeartbeatTime", "startTime", "managedFields", "timeAdded", "generateName",
}

// normalize drops volatile fields and, in lists of API resources, entries
// the emulator does not serve.
func normalize(path string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range volatile {
			delete(x, k)
		}
		if dp, ok := x["disruptedPods"].(map[string]any); ok {
			for k := range dp {
				dp[k] = "time"
			}
		}
		for k, e := range x {
			x[k] = normalize(path+"."+k, e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(fmt.Sprintf("%s.%d", path, i), e)
		}
		return x
	}
	return v
}

var recordRV = regexp.MustCompile(`in record \(\d+\)`)

// diffJSON appends "path: real vs emulator" for each differing leaf.
func diffJSON(path string, a, b any, out *[]string) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, a, b))
			return
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			diffJSON(join(k), x[k], y[k], out)
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, a, b))
			return
		}
		for i := range x {
			diffJSON(join(fmt.Sprint(i)), x[i], y[i], out)
		}
	case string:
		// Messages may quote resource versions.
		if y, ok := b.(string); !ok || recordRV.ReplaceAllString(x, "in record (N)") != recordRV.ReplaceAllString(y, "in record (N)") {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, a, b))
		}
	default:
		if fmt.Sprint(a) != fmt.Sprint(b) {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, a, b))
		}
	}
}

func nsObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
