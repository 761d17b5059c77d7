// Package charts is the charts plugin: it installs Helm charts and
// manifest sets on the cluster, as the Python taloscluster's charts plugin
// does, from the cluster.yaml's charts section: the known entries
// (gateway, metallb, traefik, sealed-secrets, cert-manager, ceph, nfs)
// with their namespaces, common values, MetalLB pool, cert-manager
// issuers and ceph Secrets, and any other chart or manifest the section
// names.
//
// render.go reads the section and renders what each entry makes, without
// I/O; plugin.go reads it from the cluster, plans, applies and tears it
// down, as a reconcile.Plugin; client.go reaches the cluster (Helm
// releases through the Helm SDK, objects through client-go, from the
// admin kubeconfig held in memory); fetch.go fetches repository indexes,
// chart archives and manifests over HTTP(S). The commands do not run it
// yet.
package charts

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// FieldManager is the field manager of the plugin's server-side applies.
const FieldManager = "taloscluster"

// The ownership label the plugin puts on the namespaces it creates; only
// a namespace carrying it is ever deleted.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "taloscluster"
)

// Order is the order of the known entries; other entries follow in
// cluster.yaml order.
var Order = []string{"gateway", "metallb", "traefik", "sealed-secrets", "cert-manager", "ceph", "nfs"}

// The ceph entry's two charts, each its own release and namespace.
const (
	CephRBD    = "ceph-csi-rbd"
	CephFS     = "ceph-csi-cephfs"
	cephSecret = "csi-rbd-secret"
	fsSecret   = "csi-cephfs-secret"
)

// cephCharts are the ceph charts in install order, with the entry's flag
// that wants each and its Secret.
var cephCharts = []struct{ chart, flag, secret, class string }{
	{CephRBD, "rbd", cephSecret, "csi-rbd-sc"},
	{CephFS, "fs", fsSecret, "csi-cephfs-sc"},
}

// GatewayManifest is the gateway entry's manifest URL; {version} is the
// release tag.
const GatewayManifest = "https://github.com/kubernetes-sigs/gateway-api/releases/download/{version}/standard-install.yaml"

// known is what the plugin knows of a known chart entry.
type known struct {
	chart, repo, namespace, psa string
}

var knownCharts = map[string]known{
	"metallb":        {"metallb", "https://metallb.github.io/metallb", "metallb-system", "privileged"},
	"traefik":        {"traefik", "https://traefik.github.io/charts", "traefik", "restricted"},
	"sealed-secrets": {"sealed-secrets", "https://bitnami.github.io/sealed-secrets", "sealed-secrets", "restricted"},
	"cert-manager":   {"cert-manager", "https://charts.jetstack.io", "cert-manager", "restricted"},
	"nfs":            {"csi-driver-nfs", "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts", "nfs", "privileged"},
	"ceph":           {"", "https://ceph.github.io/csi-charts", "", "privileged"},
}

// protectedNamespaces are the cluster's own: never deleted.
var protectedNamespaces = []string{"default", "kube-system", "kube-public"}

// Namespace is a namespace an entry installs into, with its Pod Security
// labels.
type Namespace struct {
	Name string
	// PSA holds the pod-security.kubernetes.io labels, by full key.
	PSA map[string]string
}

// Entry is one charts entry as the plugin reads it. The section was
// validated when the cluster was loaded.
type Entry struct {
	Name    string
	Enabled bool
	// Version is the pinned version or, for a chart entry, a version
	// constraint (IsConstraint); "" is the latest.
	Version string
	// Repo is the chart repository (a known chart's unless set).
	Repo string
	// URLs are a manifest entry's URLs, possibly with {version}; nil for
	// a chart entry.
	URLs []string
	// Namespace is a chart entry's namespace (not ceph's).
	Namespace Namespace
	// Values are the user's values.
	Values map[string]any
	raw    map[string]any
}

// Manifest reports whether the entry applies manifests, not a chart.
func (e Entry) Manifest() bool { return e.URLs != nil }

// Latest reports whether the entry follows the newest version.
func (e Entry) Latest() bool { return e.Version == "" }

// Release is a Helm release an entry makes.
type Release struct {
	// Entry is the charts entry's name.
	Entry                        string
	Name, Namespace, Chart, Repo string
	// Version is the pinned chart version or a constraint, "" for the
	// latest.
	Version string
	// PSA are the namespace's Pod Security labels.
	PSA map[string]string
	// Values are the values the release is installed with: the common
	// values with the user's merged over them.
	Values map[string]any
	// Wanted is set when the release should be installed: its entry is
	// enabled (and, for ceph, its flag is on).
	Wanted bool
}

// Entries reads the charts section: the known entries in Order, then the
// others in cluster.yaml order. An entry whose name cannot be a release
// or namespace name is an error.
func Entries(c *spec.Cluster) ([]Entry, error) {
	sec := c.Plugins.Charts
	var names []string
	for _, n := range Order {
		if _, ok := sec[n]; ok {
			names = append(names, n)
		}
	}
	rest := slices.Clone(c.Plugins.ChartsOrder)
	if len(rest) == 0 {
		// Without the file's order (a cluster built in code), name order.
		for n := range sec {
			rest = append(rest, n)
		}
		slices.Sort(rest)
	}
	for _, n := range rest {
		if _, ok := sec[n]; ok && !slices.Contains(Order, n) {
			names = append(names, n)
		}
	}
	var out []Entry
	for _, n := range names {
		e, err := entryOf(n, sec[n])
		if err != nil {
			return nil, fmt.Errorf("charts.%s: %w", n, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func entryOf(name string, v any) (Entry, error) {
	raw, _ := v.(map[string]any)
	e := Entry{Name: name, Enabled: true, raw: raw}
	if b, ok := raw["enabled"].(bool); ok {
		e.Enabled = b
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 || len(name) > 53 {
		return e, fmt.Errorf("the entry's name must be a lower-case DNS label of at most 53 characters (it names the release)")
	}
	if s, ok := raw["version"].(string); ok && s != "latest" {
		e.Version = strings.TrimSpace(s)
	}
	e.Values, _ = raw["values"].(map[string]any)
	switch m := raw["manifest"].(type) {
	case string:
		e.URLs = []string{m}
	case []any:
		for _, u := range m {
			s, _ := u.(string)
			e.URLs = append(e.URLs, s)
		}
	}
	if name == "gateway" {
		e.URLs = []string{GatewayManifest}
	}
	if err := checkVersion(e); err != nil {
		return e, err
	}
	k, isKnown := knownCharts[name]
	e.Repo = k.repo
	if r, ok := raw["repo"].(string); ok {
		e.Repo = strings.TrimSpace(r)
	}
	if e.Manifest() || name == "ceph" {
		return e, nil
	}
	e.Namespace = Namespace{Name: name}
	if isKnown {
		e.Namespace = Namespace{Name: k.namespace, PSA: psa(k.psa, k.psa, k.psa)}
	}
	switch ns := raw["namespace"].(type) {
	case string:
		e.Namespace = Namespace{Name: strings.TrimSpace(ns)}
	case map[string]any:
		name, _ := ns["name"].(string)
		enforce, _ := ns["enforce"].(string)
		audit, _ := ns["audit"].(string)
		warn, _ := ns["warn"].(string)
		e.Namespace = Namespace{Name: strings.TrimSpace(name), PSA: psa(enforce, audit, warn)}
	}
	if errs := validation.IsDNS1123Label(e.Namespace.Name); len(errs) > 0 {
		return e, fmt.Errorf("namespace %q is not a namespace name", e.Namespace.Name)
	}
	return e, nil
}

// versionText is what a manifest entry's version may be: it goes into
// URLs.
var versionText = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

// constraintText is what a chart entry's version constraint may be
// ("1.x", "~1.2", ">=1.2, <2").
var constraintText = regexp.MustCompile(`^[A-Za-z0-9.*~^<>=!, |+-]{1,64}$`)

// checkVersion refuses a version that is not one: a manifest entry's must
// be a release tag; a chart entry's an exact version or a constraint
// Masterminds semver (Helm's) reads.
func checkVersion(e Entry) error {
	v := e.Version
	switch {
	case v == "" || versionText.MatchString(v) && (e.Manifest() || !IsConstraint(v)):
		return nil
	case !e.Manifest() && constraintText.MatchString(v):
		if _, err := semver.NewConstraint(v); err == nil {
			return nil
		}
	}
	return fmt.Errorf("version %q is not a version", v)
}

// IsConstraint reports whether a chart version is a constraint ("1.x",
// "~1.2", "1.2") rather than one version: it is not a full semantic
// version (a leading v aside). The repository's newest version matching
// it is the one installed.
func IsConstraint(version string) bool {
	if version == "" {
		return false
	}
	_, err := semver.StrictNewVersion(stripV(version))
	return err != nil
}

// Satisfies reports whether version matches constraint; a version or a
// constraint that does not parse never does.
func Satisfies(version, constraint string) bool {
	v, err := semver.NewVersion(version)
	if err != nil {
		return false
	}
	c, err := semver.NewConstraint(constraint)
	if err != nil {
		return false
	}
	return c.Check(v)
}

func psa(enforce, audit, warn string) map[string]string {
	out := map[string]string{}
	for _, kv := range [][2]string{{"enforce", enforce}, {"audit", audit}, {"warn", warn}} {
		if kv[1] != "" {
			out["pod-security.kubernetes.io/"+kv[0]] = kv[1]
		}
	}
	return out
}

// Context is what the values of an entry depend on beyond its own
// settings.
type Context struct {
	// Cluster is the cluster's name (nfs's subDir).
	Cluster string
	// Pool is the MetalLB address pool, verbatim.
	Pool []string
	// Gateway is set when the gateway entry is enabled.
	Gateway bool
}

// ContextOf is the context of a cluster's entries: its pool is the
// Proxmox ingress pool, or vip/32 where the provider allocated an ingress
// address (OpenStack).
func ContextOf(c *spec.Cluster, entries []Entry, vip string) Context {
	x := Context{Cluster: c.Name}
	if vip != "" {
		x.Pool = []string{vip + "/32"}
	} else {
		for _, l2 := range []*spec.L2{c.Network.External, &c.Network.Cluster} {
			if l2 != nil && l2.IngressPool != nil {
				x.Pool = []string{l2.IngressPool.String()}
				break
			}
		}
	}
	for _, e := range entries {
		if e.Name == "gateway" && e.Enabled {
			x.Gateway = true
		}
	}
	return x
}

// Releases returns the Helm releases of a chart entry: one, or ceph's
// two.
func Releases(e Entry, x Context) []Release {
	if e.Manifest() {
		return nil
	}
	if e.Name == "ceph" {
		return cephReleases(e)
	}
	chart := e.Name
	if k, ok := knownCharts[e.Name]; ok {
		chart = k.chart
	}
	return []Release{{Entry: e.Name, Name: e.Name, Namespace: e.Namespace.Name, Chart: chart, Repo: e.Repo, Version: e.Version,
		PSA: e.Namespace.PSA, Values: MergeValues(CommonValues(e, x), e.Values), Wanted: e.Enabled}}
}

// CommonValues are the values the plugin gives a known chart before the
// user's.
func CommonValues(e Entry, x Context) map[string]any {
	switch e.Name {
	case "metallb":
		return map[string]any{"speaker": map[string]any{"frr": map[string]any{"enabled": false}}, "frrk8s": map[string]any{"enabled": false}}
	case "traefik":
		return traefikValues(x)
	case "cert-manager":
		v := map[string]any{"crds": map[string]any{"enabled": true}}
		prod, _ := e.raw["prod"].(bool)
		staging, _ := e.raw["staging"].(bool)
		if prod || staging {
			name := "letsencrypt-staging"
			if prod {
				name = "letsencrypt-prod"
			}
			v["ingressShim"] = map[string]any{"defaultIssuerKind": "ClusterIssuer", "defaultIssuerGroup": "cert-manager.io", "defaultIssuerName": name}
		}
		return v
	case "nfs":
		v := map[string]any{"driver": map[string]any{"mountPermissions": "0777"}}
		if classes := NFSStorageClasses(e, x.Cluster); len(classes) > 0 {
			v["storageClasses"] = classes
		}
		return v
	case "sealed-secrets":
		return map[string]any{"fullnameOverride": "sealed-secrets-controller"}
	}
	return map[string]any{}
}

func traefikValues(x Context) map[string]any {
	v := map[string]any{
		"deployment": map[string]any{"replicas": 1},
		"service":    map[string]any{"type": "LoadBalancer"},
		"ports": map[string]any{
			"web": map[string]any{"port": 8000, "exposedPort": 80, "protocol": "TCP",
				"http": map[string]any{"redirections": map[string]any{"entryPoint": map[string]any{"to": "websecure", "scheme": "https", "permanent": true}}}},
			"websecure": map[string]any{"port": 8443, "exposedPort": 443, "protocol": "TCP"},
		},
	}
	if ip := FirstPoolAddress(x.Pool); ip != "" {
		v["service"].(map[string]any)["loadBalancerIP"] = ip
	}
	if x.Gateway {
		v["providers"] = map[string]any{"kubernetesGateway": map[string]any{"enabled": true}}
		v["gateway"] = map[string]any{"enabled": true, "listeners": map[string]any{"web": map[string]any{"port": 8000, "protocol": "HTTP"}}}
	}
	return v
}

// FirstPoolAddress is the first address of the pool: the first element's
// part before "-", trimmed, without a single address's /32 (or /128).
func FirstPoolAddress(pool []string) string {
	if len(pool) == 0 {
		return ""
	}
	first, _, _ := strings.Cut(pool[0], "-")
	first = strings.TrimSpace(first)
	if p, err := netip.ParsePrefix(first); err == nil && p.IsSingleIP() {
		return p.Addr().String()
	}
	return first
}

// NFSStorageClasses are the nfs entry's storage classes as the chart's
// storageClasses value.
func NFSStorageClasses(e Entry, cluster string) []any {
	list, _ := e.raw["storageClasses"].([]any)
	var out []any
	for _, it := range list {
		sc, _ := it.(map[string]any)
		params := map[string]any{
			"server":   sc["server"],
			"share":    sc["share"],
			"subDir":   or(sc["subDir"], cluster+"/${pvc.metadata.namespace}-${pvc.metadata.name}-${pv.metadata.name}"),
			"onDelete": or(sc["onDelete"], "retain"),
		}
		if extra, ok := sc["parameters"].(map[string]any); ok {
			for k, v := range extra {
				params[k] = v
			}
		}
		class := map[string]any{
			"name":              sc["name"],
			"parameters":        params,
			"reclaimPolicy":     or(sc["reclaimPolicy"], "Retain"),
			"volumeBindingMode": or(sc["volumeBindingMode"], "Immediate"),
			"mountOptions":      or(sc["mountOptions"], []any{"nfsvers=4.1"}),
		}
		if a := annotations(sc); len(a) > 0 {
			class["annotations"] = a
		}
		out = append(out, class)
	}
	return out
}

// annotations are a storage class's annotations, with the default-class
// one when defaultClass is set.
func annotations(sc map[string]any) map[string]any {
	out := map[string]any{}
	if a, ok := sc["annotations"].(map[string]any); ok {
		for k, v := range a {
			out[k] = v
		}
	}
	if truthy(sc["defaultClass"]) {
		out["storageclass.kubernetes.io/is-default-class"] = "true"
	}
	return out
}

// or is v, or def when v is unset (a Python "or").
func or(v, def any) any {
	if truthy(v) {
		return v
	}
	return def
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case int64:
		return x != 0
	case int:
		return x != 0
	case float64:
		return x != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// cephReleases are ceph's two charts: each wanted when the entry is
// enabled and its flag (rbd or fs) is on.
func cephReleases(e Entry) []Release {
	monitors, _ := e.raw["monitors"].([]any)
	clusterID, _ := e.raw["clusterID"].(string)
	shared := MergeValues(map[string]any{"csiConfig": []any{map[string]any{"clusterID": clusterID, "monitors": monitors}}}, e.Values)
	var out []Release
	for _, ch := range cephCharts {
		values := MergeValues(shared, CephStorageClassValues(e, ch.flag))
		out = append(out, Release{Entry: e.Name, Name: ch.chart, Namespace: ch.chart, Chart: ch.chart, Repo: e.Repo, Version: e.Version,
			PSA: psa("privileged", "privileged", "privileged"), Values: values, Wanted: e.Enabled && truthy(e.raw[ch.flag])})
	}
	return out
}

// CephStorageClassValues are the values making a ceph chart's
// StorageClass, when its flag (rbd or fs) is a mapping; {} otherwise.
func CephStorageClassValues(e Entry, flag string) map[string]any {
	sc, ok := e.raw[flag].(map[string]any)
	if !ok {
		return map[string]any{}
	}
	def := "csi-rbd-sc"
	if flag == "fs" {
		def = "csi-cephfs-sc"
	}
	clusterID, _ := e.raw["clusterID"].(string)
	class := map[string]any{"create": true, "name": or(sc["name"], def), "clusterID": clusterID, "reclaimPolicy": or(sc["reclaimPolicy"], "Retain")}
	if flag == "rbd" {
		class["pool"] = sc["pool"]
	} else {
		class["fsName"] = sc["fsName"]
		if truthy(sc["pool"]) {
			class["pool"] = sc["pool"]
		}
	}
	if truthy(sc["mountOptions"]) {
		class["mountOptions"] = sc["mountOptions"]
	}
	if a := annotations(sc); len(a) > 0 {
		class["annotations"] = a
	}
	if extra, ok := sc["parameters"].(map[string]any); ok {
		for k, v := range extra {
			class[k] = v
		}
	}
	return map[string]any{"storageClass": class}
}

// CephSecrets are the ceph charts' credential Secrets, for the charts
// given, when charts.ceph.userID and userKey are set; none otherwise.
func CephSecrets(e Entry, charts []string) []*unstructured.Unstructured {
	id, _ := e.raw["userID"].(string)
	key, _ := e.raw["userKey"].(string)
	if id == "" || key == "" {
		return nil
	}
	var out []*unstructured.Unstructured
	for _, ch := range cephCharts {
		if !slices.Contains(charts, ch.chart) {
			continue
		}
		out = append(out, obj(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta(ch.secret, ch.chart),
			"stringData": map[string]any{"userID": id, "userKey": key}}))
	}
	return out
}

// HasCephCredentials reports whether the ceph entry sets its credentials.
func HasCephCredentials(e Entry) bool {
	id, _ := e.raw["userID"].(string)
	key, _ := e.raw["userKey"].(string)
	return id != "" && key != ""
}

// PoolObjects are MetalLB's IPAddressPool and L2Advertisement named
// external in namespace; none for an empty pool.
func PoolObjects(pool []string, namespace string) []*unstructured.Unstructured {
	if len(pool) == 0 {
		return nil
	}
	addrs := make([]any, len(pool))
	for i, a := range pool {
		addrs[i] = a
	}
	return []*unstructured.Unstructured{
		obj(map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool", "metadata": meta("external", namespace),
			"spec": map[string]any{"addresses": addrs, "autoAssign": true}}),
		obj(map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement", "metadata": meta("external", namespace),
			"spec": map[string]any{"ipAddressPools": []any{"external"}}}),
	}
}

// Let's Encrypt's ACME directories.
const (
	StagingServer = "https://acme-staging-v02.api.letsencrypt.org/directory"
	ProdServer    = "https://acme-v02.api.letsencrypt.org/directory"
)

// Issuers are cert-manager's ClusterIssuers, staging then prod, for the
// flags that are on.
func Issuers(e Entry) []*unstructured.Unstructured {
	email, _ := e.raw["email"].(string)
	var out []*unstructured.Unstructured
	for _, is := range []struct{ flag, name, server string }{{"staging", "letsencrypt-staging", StagingServer}, {"prod", "letsencrypt-prod", ProdServer}} {
		if on, _ := e.raw[is.flag].(bool); !on {
			continue
		}
		solver := map[string]any{"http01": map[string]any{"ingress": map[string]any{"ingressClassName": "traefik",
			"ingressTemplate": map[string]any{"metadata": map[string]any{"annotations": map[string]any{
				"traefik.ingress.kubernetes.io/router.priority":    "99999",
				"traefik.ingress.kubernetes.io/router.entrypoints": "web",
			}}}}}}
		out = append(out, obj(map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": map[string]any{"name": is.name},
			"spec": map[string]any{"acme": map[string]any{"email": email, "server": is.server,
				"privateKeySecretRef": map[string]any{"name": is.name + "-account-key"}, "solvers": []any{solver}}}}))
	}
	return out
}

// NamespaceObject is a namespace with its Pod Security labels and, when
// owned, the ownership label.
func NamespaceObject(name string, labels map[string]string, owned bool) *unstructured.Unstructured {
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
	}
	if owned {
		l[ManagedByLabel] = ManagedByValue
	}
	m := map[string]any{"name": name}
	if len(l) > 0 {
		m["labels"] = l
	}
	return obj(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": m})
}

// MergeValues deep-merges over into base: mappings merge, lists and
// scalars replace. Neither is changed.
func MergeValues(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if b, ok := out[k].(map[string]any); ok {
			if o, ok := v.(map[string]any); ok {
				out[k] = MergeValues(b, o)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// SameVersion compares versions ignoring a leading v (or V) before a
// digit; an empty version is never the same.
func SameVersion(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return stripV(a) == stripV(b)
}

func stripV(v string) string {
	if len(v) > 1 && (v[0] == 'v' || v[0] == 'V') && v[1] >= '0' && v[1] <= '9' {
		return v[1:]
	}
	return v
}

// IsNewer reports whether version a is newer than b, as the Python tool
// compares them: split on . - + _ after a leading v, numbers compared as
// numbers and before text, text as text.
func IsNewer(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	return compareVersions(versionKey(a), versionKey(b)) > 0
}

type versionPart struct {
	text bool
	num  int64
	str  string
}

func versionKey(v string) []versionPart {
	var out []versionPart
	for _, p := range strings.FieldsFunc(stripV(v), func(r rune) bool { return r == '.' || r == '-' || r == '+' || r == '_' }) {
		if n, err := strconv.ParseInt(p, 10, 64); err == nil && strings.Trim(p, "0123456789") == "" {
			out = append(out, versionPart{num: n})
		} else {
			out = append(out, versionPart{text: true, str: p})
		}
	}
	return out
}

func compareVersions(a, b []versionPart) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		switch {
		case x.text != y.text:
			if x.text {
				return 1
			}
			return -1
		case x.text && x.str != y.str:
			return strings.Compare(x.str, y.str)
		case !x.text && x.num != y.num:
			if x.num > y.num {
				return 1
			}
			return -1
		}
	}
	return len(a) - len(b)
}

// Redacted is v with the values of secret-looking keys (pass, token,
// secret, key, credential) replaced, for showing in a plan.
func Redacted(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			if secretKey.MatchString(k) {
				out[k] = "REDACTED"
				continue
			}
			out[k] = Redacted(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = Redacted(val)
		}
		return out
	}
	return v
}

var secretKey = regexp.MustCompile(`(?i)pass|token|secret|key|credential`)

// ShowValues is values, redacted, as one line of JSON.
func ShowValues(values map[string]any) string {
	data, err := json.Marshal(Redacted(values))
	if err != nil {
		return "(not shown)"
	}
	return string(data)
}

// normalized is v as JSON reads it back: numbers of any type compare
// equal to Helm's stored ones.
func normalized(v map[string]any) map[string]any {
	if v == nil {
		return map[string]any{}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return v
	}
	out := map[string]any{}
	if err := json.Unmarshal(data, &out); err != nil {
		return v
	}
	return out
}

func obj(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }

func meta(name, namespace string) map[string]any {
	return map[string]any{"name": name, "namespace": namespace}
}
