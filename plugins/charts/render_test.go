package charts_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/plugins/internal/plugintest"

	"sigs.k8s.io/yaml"

	"github.com/taloscluster/taloscluster/plugins/charts"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// load reads an example cluster directory with extra cluster.yaml text
// and secrets.yaml text appended.
func load(t *testing.T, example, extra, secrets string) *spec.Cluster {
	t.Helper()
	return plugintest.Load(t, example, extra, secrets)
}

func entries(t *testing.T, c *spec.Cluster) map[string]charts.Entry {
	t.Helper()
	list, err := charts.Entries(c)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]charts.Entry{}
	for _, e := range list {
		out[e.Name] = e
	}
	return out
}

// same compares as JSON sees them (ints and floats alike).
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	var w any
	if s, ok := want.(string); ok {
		if err := yaml.Unmarshal([]byte(s), &w); err != nil {
			t.Fatal(err)
		}
	} else {
		w = want
	}
	wj, _ := json.Marshal(w)
	var a, b any
	_ = json.Unmarshal(g, &a)
	_ = json.Unmarshal(wj, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, wj)
	}
}

// TestOrderedPutsGatewayFirst: the known entries in their order, then the
// others in cluster.yaml order.
func TestOrderedPutsGatewayFirst(t *testing.T) {
	t.Parallel()
	c := load(t, "proxmox-external", `charts:
  zcustom: {repo: https://charts.example.org}
  traefik: {}
  acustom: {repo: https://charts.example.org}
  metallb: {}
  gateway: {version: v1.3.1}
`, "")
	list, err := charts.Entries(c)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Name)
	}
	if want := []string{"gateway", "metallb", "traefik", "zcustom", "acustom"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestKnownDefaults: the known entries' repos, namespaces and Pod
// Security labels; an unknown chart's namespace is its name, unlabelled;
// a configured namespace wins.
func TestKnownDefaults(t *testing.T) {
	t.Parallel()
	c := load(t, "proxmox-external", `charts:
  metallb: {}
  sealed-secrets: {}
  cert-manager: {version: v1.18.2}
  traefik: {namespace: {name: edge, enforce: baseline}}
  mine: {repo: https://charts.example.org}
  theirs: {repo: https://charts.example.org, namespace: apps}
  gateway: {version: v1.3.1}
`, "")
	e := entries(t, c)
	m := e["metallb"]
	if !m.Enabled || !m.Latest() || m.Repo != "https://metallb.github.io/metallb" || m.Namespace.Name != "metallb-system" ||
		m.Namespace.PSA["pod-security.kubernetes.io/enforce"] != "privileged" || len(m.Namespace.PSA) != 3 {
		t.Errorf("metallb %+v", m)
	}
	if s := e["sealed-secrets"]; s.Repo != "https://bitnami.github.io/sealed-secrets" || s.Namespace.PSA["pod-security.kubernetes.io/audit"] != "restricted" {
		t.Errorf("sealed-secrets %+v", s)
	}
	if cm := e["cert-manager"]; cm.Repo != "https://charts.jetstack.io" || cm.Version != "v1.18.2" || cm.Latest() {
		t.Errorf("cert-manager %+v", cm)
	}
	if tr := e["traefik"]; tr.Namespace.Name != "edge" || !reflect.DeepEqual(tr.Namespace.PSA, map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}) {
		t.Errorf("traefik's namespace %+v", tr.Namespace)
	}
	if mine := e["mine"]; mine.Namespace.Name != "mine" || len(mine.Namespace.PSA) != 0 {
		t.Errorf("an unknown chart's namespace %+v", mine.Namespace)
	}
	if theirs := e["theirs"]; theirs.Namespace.Name != "apps" || len(theirs.Namespace.PSA) != 0 {
		t.Errorf("a configured namespace %+v", theirs.Namespace)
	}
	if g := e["gateway"]; !g.Manifest() || g.Version != "v1.3.1" {
		t.Errorf("gateway %+v", g)
	}
	x := charts.ContextOf(c, nil, "")
	rels := charts.Releases(e["sealed-secrets"], x)
	if len(rels) != 1 || rels[0].Name != "sealed-secrets" || rels[0].Chart != "sealed-secrets" || rels[0].Namespace != "sealed-secrets" {
		t.Errorf("sealed-secrets' release %+v", rels)
	}
}

// TestCommonValues: each known chart's values, and the user's merged over
// them (mappings merge, lists and scalars replace).
func TestCommonValues(t *testing.T) {
	t.Parallel()
	c := load(t, "proxmox-external", `charts:
  metallb: {}
  traefik: {values: {deployment: {replicas: 2}, additionalArguments: [--log.level=DEBUG]}}
  sealed-secrets: {}
  cert-manager: {email: ops@example.org, staging: true, prod: true}
  mine: {repo: https://charts.example.org}
`, "")
	e := entries(t, c)
	x := charts.ContextOf(c, nil, "")
	if !reflect.DeepEqual(x.Pool, []string{"203.0.113.20-203.0.113.29"}) {
		t.Errorf("the Proxmox pool %v", x.Pool)
	}
	same(t, "metallb", charts.CommonValues(e["metallb"], x), `{speaker: {frr: {enabled: false}}, frrk8s: {enabled: false}}`)
	same(t, "sealed-secrets", charts.CommonValues(e["sealed-secrets"], x), `{fullnameOverride: sealed-secrets-controller}`)
	same(t, "an unknown chart", charts.CommonValues(e["mine"], x), `{}`)
	same(t, "cert-manager", charts.CommonValues(e["cert-manager"], x), `{crds: {enabled: true}, ingressShim: {defaultIssuerKind: ClusterIssuer,
  defaultIssuerGroup: cert-manager.io, defaultIssuerName: letsencrypt-prod}}`)
	traefik := `{deployment: {replicas: 1}, service: {type: LoadBalancer, loadBalancerIP: 203.0.113.20},
  ports: {web: {port: 8000, exposedPort: 80, protocol: TCP, http: {redirections: {entryPoint: {to: websecure, scheme: https, permanent: true}}}},
          websecure: {port: 8443, exposedPort: 443, protocol: TCP}}}`
	same(t, "traefik", charts.CommonValues(e["traefik"], x), traefik)
	rel := charts.Releases(e["traefik"], x)[0]
	if rel.Values["deployment"].(map[string]any)["replicas"] != int64(2) || rel.Values["service"].(map[string]any)["type"] != "LoadBalancer" {
		t.Errorf("traefik's merged values %v", rel.Values)
	}
	gw := x
	gw.Gateway = true
	v := charts.CommonValues(e["traefik"], gw)
	same(t, "traefik's gateway providers", v["providers"], `{kubernetesGateway: {enabled: true}}`)
	same(t, "traefik's gateway", v["gateway"], `{enabled: true, listeners: {web: {port: 8000, protocol: HTTP}}}`)

	staging := load(t, "proxmox-external", "charts:\n  cert-manager: {email: ops@example.org, staging: true, prod: false}\n", "")
	same(t, "cert-manager with staging only", charts.CommonValues(entries(t, staging)["cert-manager"], x)["ingressShim"],
		`{defaultIssuerKind: ClusterIssuer, defaultIssuerGroup: cert-manager.io, defaultIssuerName: letsencrypt-staging}`)
	none := load(t, "proxmox-external", "charts:\n  cert-manager: {}\n", "")
	same(t, "cert-manager without issuers", charts.CommonValues(entries(t, none)["cert-manager"], x), `{crds: {enabled: true}}`)

	same(t, "merge", charts.MergeValues(map[string]any{"a": map[string]any{"b": 1, "c": 2}, "l": []any{1, 2}},
		map[string]any{"a": map[string]any{"b": 9}, "l": []any{3}}), `{a: {b: 9, c: 2}, l: [3]}`)
}

// TestOpenStackPool: the pool is the ingress VIP as a /32, traefik's
// address the VIP itself.
func TestOpenStackPool(t *testing.T) {
	t.Parallel()
	c := load(t, "openstack", "charts:\n  metallb: {}\n  traefik: {}\n", "")
	x := charts.ContextOf(c, nil, "10.0.0.2")
	if !reflect.DeepEqual(x.Pool, []string{"10.0.0.2/32"}) || charts.FirstPoolAddress(x.Pool) != "10.0.0.2" {
		t.Errorf("pool %v, first %q", x.Pool, charts.FirstPoolAddress(x.Pool))
	}
	for _, tc := range []struct {
		pool []string
		want string
	}{{[]string{"a-b"}, "a"}, {[]string{" 192.0.2.190 - 192.0.2.199"}, "192.0.2.190"}, {[]string{"192.0.2.7"}, "192.0.2.7"}, {nil, ""}} {
		if got := charts.FirstPoolAddress(tc.pool); got != tc.want {
			t.Errorf("FirstPoolAddress(%v) = %q, want %q", tc.pool, got, tc.want)
		}
	}
	pool := charts.PoolObjects([]string{"192.0.2.190-192.0.2.199"}, "lb")
	if len(pool) != 2 {
		t.Fatalf("pool objects %v", pool)
	}
	same(t, "IPAddressPool", pool[0].Object, `{apiVersion: metallb.io/v1beta1, kind: IPAddressPool, metadata: {name: external, namespace: lb},
  spec: {addresses: [192.0.2.190-192.0.2.199], autoAssign: true}}`)
	same(t, "L2Advertisement", pool[1].Object, `{apiVersion: metallb.io/v1beta1, kind: L2Advertisement, metadata: {name: external, namespace: lb},
  spec: {ipAddressPools: [external]}}`)
	if charts.PoolObjects(nil, "lb") != nil {
		t.Error("an empty pool renders objects")
	}
}

// TestNFSStorageClasses: the classes' defaults and overrides, as the
// Python tool renders them.
func TestNFSStorageClasses(t *testing.T) {
	t.Parallel()
	c := load(t, "proxmox-external", `charts:
  nfs:
    storageClasses:
      - {name: nfs-a, server: nfs.example.org, share: /export/a, defaultClass: true}
      - {name: nfs-b, server: nfs.example.org, share: /export/b, mountOptions: [nfsvers=3], reclaimPolicy: Delete, parameters: {extra: x}}
`, "")
	e := entries(t, c)["nfs"]
	rel := charts.Releases(e, charts.ContextOf(c, nil, ""))[0]
	if rel.Chart != "csi-driver-nfs" || rel.Namespace != "nfs" {
		t.Errorf("nfs release %+v", rel)
	}
	same(t, "nfs values", rel.Values, `{driver: {mountPermissions: "0777"}, storageClasses: [
  {name: nfs-a, parameters: {server: nfs.example.org, share: /export/a, subDir: "edge/${pvc.metadata.namespace}-${pvc.metadata.name}-${pv.metadata.name}", onDelete: retain},
   reclaimPolicy: Retain, volumeBindingMode: Immediate, mountOptions: [nfsvers=4.1], annotations: {storageclass.kubernetes.io/is-default-class: "true"}},
  {name: nfs-b, parameters: {server: nfs.example.org, share: /export/b, subDir: "edge/${pvc.metadata.namespace}-${pvc.metadata.name}-${pv.metadata.name}", onDelete: retain, extra: x},
   reclaimPolicy: Delete, volumeBindingMode: Immediate, mountOptions: [nfsvers=3]}]}`)
}

// TestCeph: the two charts, each its own release and namespace, wanted by
// their flags; the StorageClass values of a mapping flag; the Secrets
// with the credentials from secrets.yaml.
func TestCeph(t *testing.T) {
	t.Parallel()
	c := load(t, "proxmox-external", `charts:
  ceph:
    clusterID: abc
    monitors: [10.0.0.1:6789]
    rbd: {pool: kube, defaultClass: true, parameters: {imageFeatures: layering}}
    fs: {name: cephfs-shared, fsName: cephfs, reclaimPolicy: Delete, mountOptions: [noatime]}
`, "charts:\n  ceph:\n    userID: kubernetes\n    userKey: AQCs3cr3tKey==\n")
	e := entries(t, c)["ceph"]
	rels := charts.Releases(e, charts.ContextOf(c, nil, ""))
	if len(rels) != 2 || rels[0].Name != charts.CephRBD || rels[1].Namespace != charts.CephFS || !rels[0].Wanted || !rels[1].Wanted ||
		rels[1].PSA["pod-security.kubernetes.io/warn"] != "privileged" || rels[0].Repo != "https://ceph.github.io/csi-charts" {
		t.Fatalf("ceph releases %+v", rels)
	}
	same(t, "rbd values", rels[0].Values, `{csiConfig: [{clusterID: abc, monitors: [10.0.0.1:6789]}], storageClass: {create: true, name: csi-rbd-sc, clusterID: abc,
  reclaimPolicy: Retain, pool: kube, annotations: {storageclass.kubernetes.io/is-default-class: "true"}, imageFeatures: layering}}`)
	same(t, "cephfs values", rels[1].Values["storageClass"], `{create: true, name: cephfs-shared, clusterID: abc, reclaimPolicy: Delete, fsName: cephfs,
  mountOptions: [noatime]}`)
	if !charts.HasCephCredentials(e) {
		t.Fatal("the credentials of secrets.yaml are not the entry's")
	}
	secrets := charts.CephSecrets(e, []string{charts.CephRBD, charts.CephFS})
	if len(secrets) != 2 || secrets[0].GetName() != "csi-rbd-secret" || secrets[1].GetNamespace() != charts.CephFS {
		t.Fatalf("secrets %v", secrets)
	}
	same(t, "rbd's Secret data", secrets[0].Object["stringData"], `{userID: kubernetes, userKey: AQCs3cr3tKey==}`)

	bare := load(t, "proxmox-external", "charts:\n  ceph: {clusterID: abc, monitors: [m], rbd: true}\n", "")
	rels = charts.Releases(entries(t, bare)["ceph"], charts.Context{})
	if !rels[0].Wanted || rels[1].Wanted || len(charts.CephStorageClassValues(entries(t, bare)["ceph"], "rbd")) != 0 {
		t.Errorf("a bare rbd: %+v", rels)
	}
	if charts.CephSecrets(entries(t, bare)["ceph"], []string{charts.CephRBD}) != nil {
		t.Error("Secrets without credentials")
	}
}

// TestIssuers: one ClusterIssuer per flag, staging then prod.
func TestIssuers(t *testing.T) {
	t.Parallel()
	c := load(t, "proxmox-external", "charts:\n  cert-manager: {email: ops@example.org, staging: true, prod: true}\n", "")
	is := charts.Issuers(entries(t, c)["cert-manager"])
	if len(is) != 2 || is[0].GetName() != "letsencrypt-staging" || is[1].GetName() != "letsencrypt-prod" {
		t.Fatalf("issuers %v", is)
	}
	same(t, "prod", is[1].Object, `{apiVersion: cert-manager.io/v1, kind: ClusterIssuer, metadata: {name: letsencrypt-prod}, spec: {acme: {
  email: ops@example.org, server: "https://acme-v02.api.letsencrypt.org/directory", privateKeySecretRef: {name: letsencrypt-prod-account-key},
  solvers: [{http01: {ingress: {ingressClassName: traefik, ingressTemplate: {metadata: {annotations: {
    traefik.ingress.kubernetes.io/router.priority: "99999", traefik.ingress.kubernetes.io/router.entrypoints: web}}}}}}]}}}`)
	none := load(t, "proxmox-external", "charts:\n  cert-manager: {}\n", "")
	if is := charts.Issuers(entries(t, none)["cert-manager"]); len(is) != 0 {
		t.Errorf("issuers without flags %v", is)
	}
}

// TestNamespaceObject: the labels and the ownership marker.
func TestNamespaceObject(t *testing.T) {
	t.Parallel()
	psa := map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}
	same(t, "owned", charts.NamespaceObject("lb", psa, true).Object, `{apiVersion: v1, kind: Namespace, metadata: {name: lb, labels: {
  pod-security.kubernetes.io/enforce: privileged, app.kubernetes.io/managed-by: taloscluster}}}`)
	same(t, "unlabelled, owned", charts.NamespaceObject("x", nil, true).GetLabels(), `{app.kubernetes.io/managed-by: taloscluster}`)
	same(t, "not owned", charts.NamespaceObject("x", nil, false).Object, `{apiVersion: v1, kind: Namespace, metadata: {name: x}}`)
}

// TestVersions: is_newer and same_version as the Python tool's.
func TestVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b  string
		newer bool
	}{{"0.15.0", "0.14.9", true}, {"v1.3.1", "1.3.0", true}, {"1.3.0", "1.3.0", false}, {"0.14", "0.14.9", false}, {"0.10.0", "0.9.9", true}, {"", "1", false}} {
		if got := charts.IsNewer(tc.a, tc.b); got != tc.newer {
			t.Errorf("IsNewer(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
	for _, tc := range []struct {
		a, b string
		same bool
	}{{"v1.21.2", "1.21.2", true}, {"V1.21.2", "v1.21.2", true}, {"1.21.3", "1.21.2", false}, {"", "", false}, {"version", "1.21.2", false}} {
		if got := charts.SameVersion(tc.a, tc.b); got != tc.same {
			t.Errorf("SameVersion(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// TestRedacted: secret-looking keys never show.
func TestRedacted(t *testing.T) {
	t.Parallel()
	v := map[string]any{"auth": map[string]any{"password": "hunter2", "apiToken": "t0k", "user": "bob"}, "list": []any{map[string]any{"userKey": "AQC"}},
		"credentials": "c", "clientSecret": "s"}
	got := charts.ShowValues(v)
	for _, s := range []string{"hunter2", "t0k", "AQC", `"c"`, `"s"`} {
		if strings.Contains(got, s) {
			t.Errorf("%s shows %s", got, s)
		}
	}
	if !strings.Contains(got, "bob") {
		t.Errorf("%s hides what is not secret", got)
	}
}

// TestHostileNames: an entry or namespace that cannot name a release or
// namespace, or a version that is not one, is refused naming the entry.
func TestHostileNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ section, want string }{
		{"charts:\n  Evil_Name: {repo: https://charts.example.org}\n", "charts.Evil_Name"},
		{"charts:\n  mine: {repo: https://charts.example.org, namespace: ../x}\n", "charts.mine"},
		{"charts:\n  gateway: {version: ../../x}\n", "charts.gateway"},
	} {
		cl := load(t, "proxmox-external", tc.section, "")
		if _, err := charts.Entries(cl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v", tc.section, err)
		}
	}
}

// TestVersionConstraints: a chart entry's version may be a constraint, a
// manifest entry's may not; what is neither a version nor a constraint is
// refused.
func TestVersionConstraints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version    string
		chart      bool
		constraint bool
	}{
		{"0.14.9", true, false}, {"v1.18.2", true, false}, {"1.2.3-rc.1", true, false},
		{"~0.14", true, true}, {"1.x", true, true}, {"^1.2", true, true}, {">=1.2, <2", true, true}, {"0.14", true, true},
		{"nope", false, false}, {"~1.2; rm -rf", false, false}, {">=", false, false},
	} {
		if got := charts.IsConstraint(tc.version); tc.chart && got != tc.constraint {
			t.Errorf("IsConstraint(%q) = %v", tc.version, got)
		}
		cl := load(t, "proxmox-external", "charts:\n  metallb: {version: \""+tc.version+"\"}\n", "")
		if _, err := charts.Entries(cl); (err == nil) != tc.chart || err != nil && !strings.Contains(err.Error(), "charts.metallb") {
			t.Errorf("metallb at %q: %v", tc.version, err)
		}
	}
	gw := load(t, "proxmox-external", "charts:\n  gateway: {version: \"~1.2\"}\n", "")
	if _, err := charts.Entries(gw); err == nil || !strings.Contains(err.Error(), "charts.gateway") {
		t.Errorf("a gateway at a constraint: %v", err)
	}
	for _, tc := range []struct {
		version, constraint string
		ok                  bool
	}{{"0.14.9", "~0.14", true}, {"0.15.2", "~0.14", false}, {"v1.3.0", "1.x", true}, {"x", "1.x", false}, {"1.0.0", "><", false}} {
		if got := charts.Satisfies(tc.version, tc.constraint); got != tc.ok {
			t.Errorf("Satisfies(%q, %q) = %v", tc.version, tc.constraint, got)
		}
	}
}
