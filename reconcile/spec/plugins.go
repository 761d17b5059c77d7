package spec

import (
	"fmt"
	"slices"
	"strings"
)

// plugins validates the plugin sections (argocd, rancher, charts) the way
// each plugin's validate hook does, and refuses a component that two of
// them would install. They are kept as plain data for the plugins.
func (v *validator) plugins(t *node, _ *Cluster) Plugins {
	var p Plugins
	v.installedTwice(t.get("argocd"), t.get("charts"))
	if n := t.get("rancher"); !n.isNull() {
		if v.rancher(n) {
			p.Rancher = plain(n).(map[string]any)
		}
	}
	if n := t.get("argocd"); !n.isNull() {
		if v.argocd(n) {
			p.ArgoCD = plain(n).(map[string]any)
		}
	}
	if n := t.get("charts"); !n.isNull() {
		if v.charts(n) {
			p.Charts = plain(n).(map[string]any)
			p.ChartsOrder = slices.Clone(n.keys)
		}
	}
	return p
}

// twiceInstallable pairs the argocd apps with the charts entries that
// install the same component.
var twiceInstallable = []struct{ argocd, chart, component string }{
	{"metallb", "metallb", "MetalLB"},
	{"ingress", "traefik", "Traefik"},
	{"certmanager", "cert-manager", "cert-manager"},
	{"sealedsecrets", "sealed-secrets", "sealed-secrets"},
	{"nfs", "nfs", "the NFS CSI driver"},
}

// installedTwice refuses a component enabled both as an argocd app (Argo
// CD installs it) and as a charts entry (the charts plugin installs it):
// the two would fight over it.
func (v *validator) installedTwice(argocd, charts *node) {
	if argocd.isNull() || charts.isNull() {
		return
	}
	for _, pair := range twiceInstallable {
		app, entry := argocd.get(pair.argocd), charts.get(pair.chart)
		on := app.get("enabled")
		if on == nil || on.kind != kindBool || !on.bool || entry == nil || entry.kind != kindMap {
			continue
		}
		if e := entry.get("enabled"); e != nil && e.kind == kindBool && !e.bool {
			continue
		}
		v.errorf(on, "argocd."+pair.argocd+".enabled",
			"%s is enabled both in argocd.%s (Argo CD installs it) and in charts.%s (the charts plugin installs it); enable it in one of them", pair.component, pair.argocd, pair.chart)
	}
}

// plain converts a node to ordinary Go values.
func plain(n *node) any {
	switch n.kind {
	case kindMap:
		m := make(map[string]any, len(n.keys))
		for _, k := range n.keys {
			m[k] = plain(n.vals[k])
		}
		return m
	case kindList:
		l := make([]any, len(n.items))
		for i, it := range n.items {
			l[i] = plain(it)
		}
		return l
	case kindBool:
		return n.bool
	case kindInt:
		return n.num
	case kindNull:
		return nil
	default:
		return n.str
	}
}

// setValue reports whether a value counts as set the way the plugins test it
// (a Python truth test): null, false, zero and empty values do not.
func setValue(n *node) bool {
	if n == nil {
		return false
	}
	switch n.kind {
	case kindBool:
		return n.bool
	case kindInt:
		return n.num != 0
	case kindFloat:
		return strings.Trim(strings.TrimLeft(n.str, "+-"), "0._") != ""
	case kindString:
		return n.str != ""
	case kindList:
		return len(n.items) > 0
	case kindMap:
		return len(n.keys) > 0
	}
	return false
}

// isText reports whether n is a string with something besides spaces.
func isText(n *node) bool {
	return n != nil && n.kind == kindString && strings.TrimSpace(n.str) != ""
}

// names reads a list of user names; noun says what a member is.
func (v *validator) names(n *node, key, path, noun string) []string {
	x := n.get(key)
	if x.isNull() {
		return nil
	}
	if x.kind != kindList {
		v.errorf(x, path, "%s must be a list of %s", path, noun)
		return nil
	}
	var out []string
	for i, it := range x.items {
		if !isText(it) {
			v.errorf(it, fmt.Sprintf("%s[%d]", path, i), "%s must be a list of %s; entry %d is %s", path, noun, i+1, emptyOr(it))
			continue
		}
		out = append(out, it.str)
	}
	return out
}

// mustMapping checks that a present key holds a mapping: unlike mapping, an
// explicit null is refused too, the way the plugins test a supplied key.
func (v *validator) mustMapping(parent *node, key, path string, allowed ...string) *node {
	x := parent.get(key)
	if x == nil {
		return nil
	}
	if x.kind != kindMap {
		v.errorf(x, path, "%s must be a mapping, not a %s", path, x.describe())
		return nil
	}
	if allowed != nil {
		v.unknownKeys(x, path, allowed)
	}
	return x
}

// presentBool checks that a present key (null included) is a boolean.
func (v *validator) presentBool(parent *node, key, path string) (bool, bool) {
	x := parent.get(key)
	if x == nil {
		return false, false
	}
	if x.kind != kindBool {
		v.errorf(x, path, "%s must be a boolean (true or false)", path)
		return false, false
	}
	return x.bool, true
}

// presentText checks that a present key (null included) is a string with
// something besides spaces.
func (v *validator) presentText(parent *node, key, path string) bool {
	x := parent.get(key)
	if x == nil {
		return true
	}
	if !isText(x) {
		v.errorf(x, path, "%s must be a non-empty string", path)
		return false
	}
	return true
}

func (v *validator) rancher(n *node) bool {
	before := len(v.errs)
	if !v.mapping(n, "rancher", "admins", "users", "url", "token") {
		return false
	}
	admins := v.names(n, "admins", "rancher.admins", "user names")
	users := v.names(n, "users", "rancher.users", "user names")
	var both []string
	for _, a := range admins {
		if slices.Contains(users, a) && !slices.Contains(both, a) {
			both = append(both, a)
		}
	}
	if len(both) > 0 {
		slices.Sort(both)
		v.errorf(where(n, "users"), "rancher.users", "rancher lists %s under both admins and users; list each member in one tier only", strings.Join(both, ", "))
	}
	// The credentials feed the Rancher client: a present key must hold a
	// non-empty string (an explicit null included).
	for _, k := range []string{"url", "token"} {
		if x := n.get(k); x != nil && (x.kind != kindString || x.str == "") {
			v.errorf(x, "rancher."+k, "rancher.%s must be a non-empty string", k)
		}
	}
	return len(v.errs) == before
}

var (
	argocdKeys = []string{"admins", "users", "git", "infra", "sync", "automated", "metallb", "ingress",
		"sealedsecrets", "certmanager", "cinder", "nfs", "monitoring", "kubeconfig", "context", "url", "token"}
	// argocdApps are the per-app sections and the keys each accepts.
	argocdApps = []struct {
		name    string
		allowed []string
	}{
		{"metallb", []string{"enabled", "version"}},
		{"sealedsecrets", []string{"enabled", "version"}},
		{"certmanager", []string{"enabled", "version", "email"}},
		{"cinder", []string{"enabled", "version"}},
		{"ingress", []string{"enabled", "class", "traefik", "version"}},
		{"nfs", []string{"enabled", "servers", "version"}},
		{"monitoring", []string{"enabled", "version"}},
	}
	// argocdVersioned are the apps whose version reaches the rendered chart.
	argocdVersioned = []string{"metallb", "sealedsecrets", "certmanager", "cinder"}
)

func (v *validator) argocd(n *node) bool {
	before := len(v.errs)
	if !v.mapping(n, "argocd", argocdKeys...) {
		return false
	}
	v.names(n, "admins", "argocd.admins", "email addresses")
	v.names(n, "users", "argocd.users", "email addresses")
	v.boolean(n, "sync", "argocd.sync")
	v.boolean(n, "automated", "argocd.automated")

	// The apply target feeds kubectl: each value must be a string.
	for _, k := range []string{"kubeconfig", "context", "url", "token"} {
		if x := n.get(k); !x.isNull() && x.kind != kindString {
			v.errorf(x, "argocd."+k, "argocd.%s must be a string", k)
		}
	}
	if (setValue(n.get("url")) || setValue(n.get("token"))) && !setValue(n.get("kubeconfig")) && !setValue(n.get("context")) {
		key := "argocd.url"
		if !setValue(n.get("url")) {
			key = "argocd.token"
		}
		v.errorf(where(n, strings.TrimPrefix(key, "argocd.")), key,
			"argocd url/token is not a supported apply target: the plugin applies manifests with kubectl, so set argocd.kubeconfig or argocd.context")
	}

	var gitURL, infraURL *node
	if g := v.mustMapping(n, "git", "argocd.git", "url", "username", "token"); g != nil {
		gitURL = g.get("url")
		v.presentText(g, "url", "argocd.git.url")
		for _, k := range []string{"username", "token"} {
			if x := g.get(k); x != nil && x.kind != kindString {
				v.errorf(x, "argocd.git."+k, "argocd.git.%s must be a string", k)
			}
		}
		if !setValue(gitURL) && (setValue(g.get("username")) || setValue(g.get("token"))) {
			v.errorf(g, "argocd.git.url", "argocd.git credentials are set but argocd.git.url is not, so no repository secret can be rendered; set argocd.git.url or remove the credentials")
		}
	}
	if i := v.mustMapping(n, "infra", "argocd.infra", "url"); i != nil {
		infraURL = i.get("url")
		v.presentText(i, "url", "argocd.infra.url")
	}
	if setValue(gitURL) != setValue(infraURL) {
		missing := "argocd.infra.url"
		if !setValue(gitURL) {
			missing = "argocd.git.url"
		}
		v.errorf(n, missing, "%s must be set: argocd.git.url and argocd.infra.url are set together", missing)
	}

	for _, app := range argocdApps {
		path := "argocd." + app.name
		a := v.mustMapping(n, app.name, path, app.allowed...)
		if a == nil {
			continue
		}
		v.presentBool(a, "enabled", path+".enabled")
		if ver := a.get("version"); ver != nil {
			if slices.Contains(argocdVersioned, app.name) {
				v.presentText(a, "version", path+".version")
			} else {
				v.errorf(ver, path+".version", "%s.version is not used: the plugin does not forward a chart version for this app (set it under argocd.metallb, argocd.sealedsecrets, argocd.certmanager, argocd.cinder or argocd.ingress.traefik)", path)
			}
		}
		switch app.name {
		case "ingress":
			if tr := a.get("traefik"); !tr.isNull() {
				if tr.kind != kindMap {
					v.errorf(tr, "argocd.ingress.traefik", "argocd.ingress.traefik must be a mapping, not a %s", tr.describe())
				} else {
					v.unknownKeys(tr, "argocd.ingress.traefik", []string{"version"})
					v.presentText(tr, "version", "argocd.ingress.traefik.version")
				}
			}
		case "nfs":
			if s := a.get("servers"); !s.isNull() {
				ok := s.kind == kindMap
				if ok {
					for _, name := range s.keys {
						if s.vals[name].isNull() || s.vals[name].kind != kindMap {
							ok = false
						}
					}
				}
				if !ok {
					v.errorf(s, "argocd.nfs.servers", "argocd.nfs.servers must map server names to mappings")
				}
			}
		}
	}
	return len(v.errs) == before
}

// chartEntryKeys are the keys any charts entry may carry; the rules below
// refuse the ones an entry does not use.
var (
	chartEntryKeys = []string{"enabled", "version", "repo", "manifest", "namespace", "values", "email", "staging", "prod",
		"storageClasses", "clusterID", "monitors", "rbd", "fs", "userID", "userKey"}
	// chartKinds are the entries the plugin knows: a helm chart or a
	// manifest set.
	chartKinds = map[string]string{
		"ceph": "chart", "cert-manager": "chart", "nfs": "chart", "gateway": "manifest",
		"metallb": "chart", "sealed-secrets": "chart", "traefik": "chart",
	}
	cephOnlyKeys   = []string{"clusterID", "monitors", "rbd", "fs", "userID", "userKey"}
	namespaceKeys  = []string{"name", "enforce", "audit", "warn"}
	nfsClassKeys   = []string{"name", "server", "share", "subDir", "onDelete", "defaultClass", "reclaimPolicy", "volumeBindingMode", "mountOptions", "annotations", "parameters"}
	cephClassKeys  = []string{"name", "defaultClass", "reclaimPolicy", "mountOptions", "annotations", "parameters"}
	cephDriverKeys = map[string][]string{"rbd": {"pool"}, "fs": {"fsName", "pool"}}
	cephRequired   = map[string]string{"rbd": "pool", "fs": "fsName"}
)

// chartState is what the cross-entry rule needs of an entry.
type chartState struct {
	enabled, issuers bool
	values           *node
}

func (v *validator) charts(n *node) bool {
	before := len(v.errs)
	if n.kind != kindMap {
		v.errorf(n, "charts", "charts must be a mapping of chart name to settings")
		return false
	}
	states := map[string]chartState{}
	for _, name := range n.keys {
		if st, ok := v.chartEntry(n.vals[name], name); ok {
			states[name] = st
		}
	}
	cm, okCM := states["cert-manager"]
	tr, okTr := states["traefik"]
	if okCM && okTr && cm.enabled && cm.issuers && tr.enabled && acmeResolver(tr.values) {
		v.errorf(tr.values, "charts.traefik.values", "charts.cert-manager has its letsencrypt issuers on while charts.traefik.values configures an acme resolver (certificatesResolvers or --certificatesresolvers); the two ACME clients fight over the HTTP-01 challenge path, so drop one")
	}
	return len(v.errs) == before
}

// acmeResolver reports whether traefik values configure an ACME resolver.
func acmeResolver(values *node) bool {
	if values == nil || values.kind != kindMap {
		return false
	}
	if setValue(values.get("certificatesResolvers")) {
		return true
	}
	if args := values.get("additionalArguments"); args != nil && args.kind == kindList {
		for _, a := range args.items {
			if strings.HasPrefix(strings.ToLower(a.str), "--certificatesresolvers") {
				return true
			}
		}
	}
	return false
}

// chartEntry checks one charts entry the way the charts plugin parses it.
func (v *validator) chartEntry(e *node, name string) (chartState, bool) {
	var st chartState
	path := "charts." + name
	if e.isNull() || e.kind != kindMap {
		v.errorf(e, path, "%s must be a mapping", path)
		return st, false
	}
	v.unknownKeys(e, path, chartEntryKeys)
	kind, known := chartKinds[name]

	st.enabled = true
	if x := e.get("enabled"); x != nil {
		if x.kind != kindBool {
			v.errorf(x, path+".enabled", "%s.enabled must be a boolean", path)
		} else {
			st.enabled = x.bool
		}
	}
	version := e.get("version")
	if setValue(version) && version.kind != kindString {
		v.errorf(version, path+".version", "%s.version must be a string", path)
	}
	repo := e.get("repo")
	if !repo.isNull() && !isText(repo) {
		v.errorf(repo, path+".repo", "%s.repo must be a non-empty string", path)
	}
	manifest := e.get("manifest")
	hasManifest := false
	if !manifest.isNull() {
		items := []*node{manifest}
		if manifest.kind == kindList {
			items = manifest.items
		}
		ok := len(items) > 0
		for _, it := range items {
			ok = ok && isText(it)
		}
		if !ok {
			v.errorf(manifest, path+".manifest", "%s.manifest must be a url or a list of urls", path)
		}
		hasManifest = len(items) > 0
	}
	switch {
	case !repo.isNull() && hasManifest:
		v.errorf(manifest, path+".manifest", "%s sets both repo and manifest; set one", path)
	case !known && repo.isNull() && !hasManifest:
		v.errorf(e, path+".repo", "%s is not a known chart; set repo or manifest", path)
	}
	if known && kind == "manifest" && !repo.isNull() {
		v.errorf(repo, path+".repo", "%s is a manifest entry; it has no repo", path)
	}
	if known && kind == "chart" && hasManifest {
		v.errorf(manifest, path+".manifest", "%s is a chart entry; set repo, not manifest", path)
	}
	if hasManifest && setValue(version) {
		v.errorf(version, path+".version", "%s.version is not used by manifest entries", path)
	}
	manifestEntry := hasManifest || (known && kind == "manifest")
	for _, k := range []string{"values", "namespace"} {
		if x := e.get(k); manifestEntry && x != nil {
			v.errorf(x, path+"."+k, "%s.%s is not used by manifest entries", path, k)
		}
	}
	if x := e.get("namespace"); name == "ceph" && x != nil {
		v.errorf(x, path+".namespace", "%s.namespace is not used by ceph; each of its charts gets its own", path)
	}
	v.chartNamespace(e.get("namespace"), path)

	values := e.get("values")
	if setValue(values) && values.kind != kindMap {
		v.errorf(values, path+".values", "%s.values must be a mapping", path)
		values = nil
	}
	st.values = values
	v.chartStorageClasses(e, name, path, st.enabled, values)
	v.chartCeph(e, name, path, st.enabled, values)

	email := e.get("email")
	if !email.isNull() {
		if !isText(email) {
			v.errorf(email, path+".email", "%s.email must be a non-empty string", path)
		} else if name != "cert-manager" {
			v.errorf(email, path+".email", "%s.email is only used by cert-manager", path)
		}
	}
	for _, k := range []string{"staging", "prod"} {
		x := e.get(k)
		if x == nil {
			continue
		}
		if x.kind != kindBool {
			v.errorf(x, path+"."+k, "%s.%s must be a boolean", path, k)
			continue
		}
		if x.bool && name != "cert-manager" {
			v.errorf(x, path+"."+k, "%s.%s is only used by cert-manager", path, k)
		}
		st.issuers = st.issuers || x.bool
	}
	if name == "cert-manager" && st.enabled && email.isNull() && st.issuers {
		v.errorf(where(e, "email"), path+".email", "%s.email is required when the staging or prod issuer is on", path)
	}
	return st, true
}

func (v *validator) chartNamespace(ns *node, path string) {
	switch {
	case ns.isNull():
	case ns.kind == kindString:
		if strings.TrimSpace(ns.str) == "" {
			v.errorf(ns, path+".namespace", "%s.namespace must not be empty", path)
		}
	case ns.kind == kindMap:
		v.unknownKeys(ns, path+".namespace", namespaceKeys)
		if !isText(ns.get("name")) {
			v.errorf(where(ns, "name"), path+".namespace.name", "%s.namespace.name must be a non-empty string", path)
		}
		for _, k := range []string{"enforce", "audit", "warn"} {
			if x := ns.get(k); !x.isNull() && !isText(x) {
				v.errorf(x, path+".namespace."+k, "%s.namespace.%s must be a non-empty string", path, k)
			}
		}
	default:
		v.errorf(ns, path+".namespace", "%s.namespace must be a name or a mapping of name and labels", path)
	}
}

func (v *validator) chartStorageClasses(e *node, name, path string, enabled bool, values *node) {
	sc := e.get("storageClasses")
	key := path + ".storageClasses"
	if sc.isNull() {
		if name == "nfs" && enabled {
			v.errorf(where(e, "storageClasses"), key, "%s is required when nfs is enabled", key)
		}
		return
	}
	if name != "nfs" {
		v.errorf(sc, key, "%s is only used by nfs", key)
		return
	}
	if sc.kind != kindList || len(sc.items) == 0 {
		v.errorf(sc, key, "%s must be a non-empty list", key)
		return
	}
	if values.get("storageClasses") != nil {
		v.errorf(sc, key, "%s: use storageClasses or values.storageClasses, not both", path)
	}
	seen := map[string]bool{}
	defaults := 0
	for i, it := range sc.items {
		p := fmt.Sprintf("%s[%d]", key, i)
		if it.kind != kindMap {
			v.errorf(it, p, "%s entries must be mappings", key)
			continue
		}
		v.unknownKeys(it, p, nfsClassKeys)
		for _, k := range []string{"name", "server", "share"} {
			if !isText(it.get(k)) {
				v.errorf(where(it, k), p+"."+k, "%s.%s must be a non-empty string", p, k)
			}
		}
		if nm := it.get("name"); isText(nm) {
			if seen[nm.str] {
				v.errorf(nm, p+".name", "%s has the name %s twice", key, nm.str)
			}
			seen[nm.str] = true
		}
		if setValue(it.get("defaultClass")) {
			defaults++
		}
	}
	if defaults > 1 {
		v.errorf(sc, key, "%s: at most one storage class may set defaultClass: true", key)
	}
}

func (v *validator) chartCeph(e *node, name, path string, enabled bool, values *node) {
	if name != "ceph" {
		for _, k := range cephOnlyKeys {
			if x := e.get(k); x != nil {
				v.errorf(x, path+"."+k, "%s.%s is only used by ceph", path, k)
			}
		}
		return
	}
	on := map[string]bool{}
	classes := 0
	defaults := 0
	for _, k := range []string{"rbd", "fs"} {
		x := e.get(k)
		if x == nil {
			continue
		}
		switch x.kind {
		case kindBool:
			on[k] = x.bool
		case kindMap:
			on[k] = true
			classes++
			allowed := append(slices.Clone(cephClassKeys), cephDriverKeys[k]...)
			v.unknownKeys(x, path+"."+k, allowed)
			for _, f := range []string{cephRequired[k], "name", "pool"} {
				if f != cephRequired[k] && x.get(f).isNull() {
					continue
				}
				if !isText(x.get(f)) {
					v.errorf(where(x, f), path+"."+k+"."+f, "%s.%s.%s must be a non-empty string", path, k, f)
				}
			}
			if setValue(x.get("defaultClass")) {
				defaults++
			}
		default:
			v.errorf(x, path+"."+k, "%s.%s must be a boolean or a mapping", path, k)
		}
	}
	if classes > 0 && values.get("storageClass") != nil {
		v.errorf(values, path+".values", "%s: use rbd/fs mappings or values.storageClass, not both", path)
	}
	if defaults > 1 {
		v.errorf(e, path+".fs", "%s: at most one of rbd and fs may set defaultClass: true", path)
	}
	id, key := e.get("userID"), e.get("userKey")
	if id.isNull() != key.isNull() {
		v.errorf(e, path+".userKey", "%s: set both userID and userKey, or neither", path)
	}
	for _, k := range []string{"userID", "userKey"} {
		if x := e.get(k); !x.isNull() && !isText(x) {
			v.errorf(x, path+"."+k, "%s.%s must be a non-empty string", path, k)
		}
	}
	if !enabled {
		return
	}
	if !isText(e.get("clusterID")) {
		v.errorf(where(e, "clusterID"), path+".clusterID", "%s.clusterID is required when ceph is enabled", path)
	}
	mons := e.get("monitors")
	ok := mons != nil && mons.kind == kindList && len(mons.items) > 0
	if ok {
		for _, m := range mons.items {
			ok = ok && isText(m)
		}
	}
	if !ok {
		v.errorf(where(e, "monitors"), path+".monitors", "%s.monitors must be a non-empty list of addresses", path)
	}
	if !on["rbd"] && !on["fs"] {
		v.errorf(e, path+".rbd", "%s: enable at least one of rbd or fs", path)
	}
}
