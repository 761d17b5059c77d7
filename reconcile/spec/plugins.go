package spec

import (
	"fmt"
	"slices"
	"strings"
)

// plugins validates the plugin sections (argocd, rancher, charts) the way
// each plugin's validate hook does. Nothing acts on them yet; they are kept
// as plain data.
func (v *validator) plugins(t *node, _ *Cluster) Plugins {
	var p Plugins
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
		}
	}
	return p
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

// names reads a list of user names.
func (v *validator) names(n *node, key, path string) []string {
	x := n.get(key)
	if x.isNull() {
		return nil
	}
	if x.kind != kindList {
		v.errorf(x, path, "%s must be a list of user names", path)
		return nil
	}
	var out []string
	for i, it := range x.items {
		if it.kind != kindString || strings.TrimSpace(it.str) == "" {
			v.errorf(it, fmt.Sprintf("%s[%d]", path, i), "%s must be a list of user names; entry %d is %s", path, i+1, emptyOr(it))
			continue
		}
		out = append(out, it.str)
	}
	return out
}

// tiers checks that no name is both an admin and a user.
func (v *validator) tiers(n *node, section string) bool {
	admins := v.names(n, "admins", section+".admins")
	users := v.names(n, "users", section+".users")
	var both []string
	for _, a := range admins {
		if slices.Contains(users, a) && !slices.Contains(both, a) {
			both = append(both, a)
		}
	}
	if len(both) > 0 {
		v.errorf(where(n, "users"), section+".users", "%s lists %s in both admins and users", section, strings.Join(both, ", "))
		return false
	}
	return true
}

func (v *validator) optionalNonEmpty(n *node, key, path string) bool {
	x := n.get(key)
	if x == nil {
		return true
	}
	if x.kind != kindString || strings.TrimSpace(x.str) == "" {
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
	v.tiers(n, "rancher")
	v.optionalNonEmpty(n, "url", "rancher.url")
	v.optionalNonEmpty(n, "token", "rancher.token")
	return len(v.errs) == before
}

func (v *validator) argocd(n *node) bool {
	before := len(v.errs)
	if !v.mapping(n, "argocd", "admins", "users", "git", "infra", "sync", "automated", "metallb", "ingress",
		"sealedsecrets", "certmanager", "cinder", "nfs", "monitoring", "kubeconfig", "context", "url", "token") {
		return false
	}
	v.tiers(n, "argocd")
	v.boolean(n, "sync", "argocd.sync")
	v.boolean(n, "automated", "argocd.automated")
	for _, k := range []string{"kubeconfig", "context", "url", "token"} {
		if n.get(k) != nil {
			v.optionalNonEmpty(n, k, "argocd."+k)
		}
	}
	gitURL := ""
	if g := n.get("git"); !g.isNull() && v.mapping(g, "argocd.git", "url", "username", "token") {
		if v.optionalNonEmpty(g, "url", "argocd.git.url") && g.get("url") != nil {
			gitURL = g.get("url").str
		}
		v.optionalNonEmpty(g, "username", "argocd.git.username")
		v.optionalNonEmpty(g, "token", "argocd.git.token")
		if gitURL == "" && (g.get("username") != nil || g.get("token") != nil) {
			v.errorf(g, "argocd.git.url", "argocd.git credentials are set but argocd.git.url is not")
		}
	}
	infraURL := ""
	if i := n.get("infra"); !i.isNull() && v.mapping(i, "argocd.infra", "url") {
		if v.optionalNonEmpty(i, "url", "argocd.infra.url") && i.get("url") != nil {
			infraURL = i.get("url").str
		}
	}
	if (gitURL == "") != (infraURL == "") {
		v.errorf(n, "argocd.git.url", "argocd.git.url and argocd.infra.url must be set together")
	}
	app := func(key string, allowed ...string) *node {
		a := n.get(key)
		if a.isNull() {
			return nil
		}
		path := "argocd." + key
		if a.kind != kindMap {
			v.errorf(a, path, "%s must be a mapping", path)
			return nil
		}
		if a.get("version") != nil && !slices.Contains(allowed, "version") {
			v.errorf(a.get("version"), path+".version", "%s.version is not supported: the version comes from the infra repository", path)
			a = withoutKey(a, "version")
		}
		v.unknownKeys(a, path, allowed)
		v.boolean(a, "enabled", path+".enabled")
		if a.get("version") != nil {
			v.optionalNonEmpty(a, "version", path+".version")
		}
		return a
	}
	app("metallb", "enabled", "version")
	app("sealedsecrets", "enabled", "version")
	app("cinder", "enabled", "version")
	app("monitoring", "enabled")
	if cm := app("certmanager", "enabled", "version", "email"); cm != nil && cm.get("email") != nil {
		v.optionalNonEmpty(cm, "email", "argocd.certmanager.email")
	}
	if in := app("ingress", "enabled", "class", "traefik"); in != nil {
		if in.get("class") != nil {
			v.optionalNonEmpty(in, "class", "argocd.ingress.class")
		}
		if tr := in.get("traefik"); !tr.isNull() && v.mapping(tr, "argocd.ingress.traefik", "version") && tr.get("version") != nil {
			v.optionalNonEmpty(tr, "version", "argocd.ingress.traefik.version")
		}
	}
	if nfs := app("nfs", "enabled", "servers"); nfs != nil {
		if s := nfs.get("servers"); !s.isNull() {
			if s.kind != kindMap {
				v.errorf(s, "argocd.nfs.servers", "argocd.nfs.servers must be a mapping of name to {server, path, defaultClass}")
			} else {
				for _, name := range s.keys {
					path := "argocd.nfs.servers." + name
					e := s.vals[name]
					if !v.mapping(e, path, "server", "path", "defaultClass") {
						if e.isNull() {
							v.errorf(e, path, "%s must be a mapping", path)
						}
						continue
					}
					v.requiredStr(e, "server", path+".server")
					v.requiredStr(e, "path", path+".path")
					v.boolean(e, "defaultClass", path+".defaultClass")
				}
			}
		}
	}
	return len(v.errs) == before
}

func withoutKey(n *node, key string) *node {
	c := *n
	c.vals = map[string]*node{}
	for k, val := range n.vals {
		c.vals[k] = val
	}
	c.keys = slices.Clone(n.keys)
	c.remove(key)
	return &c
}

var (
	chartGenericKeys = []string{"enabled", "version", "repo", "manifest", "namespace", "values"}
	chartKnownKeys   = map[string][]string{
		"gateway":        nil,
		"metallb":        nil,
		"traefik":        nil,
		"cert-manager":   {"email", "staging", "prod"},
		"sealed-secrets": nil,
		"nfs":            {"storageClasses"},
		"ceph":           {"clusterID", "monitors", "rbd", "fs", "userID", "userKey"},
	}
	nfsClassKeys = []string{"name", "server", "share", "defaultClass", "subDir", "onDelete", "reclaimPolicy",
		"volumeBindingMode", "mountOptions", "annotations", "parameters"}
)

func (v *validator) charts(n *node) bool {
	before := len(v.errs)
	if n.kind != kindMap {
		v.errorf(n, "charts", "charts must be a mapping of chart name to settings")
		return false
	}
	for _, name := range n.keys {
		e := n.vals[name]
		path := "charts." + name
		if e.isNull() {
			continue
		}
		if e.kind != kindMap {
			v.errorf(e, path, "%s must be a mapping", path)
			continue
		}
		extra, known := chartKnownKeys[name]
		v.unknownKeys(e, path, append(slices.Clone(chartGenericKeys), extra...))
		enabled := true
		if b, ok := v.boolean(e, "enabled", path+".enabled"); ok {
			enabled = b
		}
		if e.get("version") != nil {
			v.optionalNonEmpty(e, "version", path+".version")
		}
		repo, manifest := e.get("repo"), e.get("manifest")
		if repo != nil {
			v.optionalNonEmpty(e, "repo", path+".repo")
		}
		if manifest != nil {
			v.chartManifest(manifest, path+".manifest")
			if e.get("version") != nil {
				v.errorf(e.get("version"), path+".version", "%s.version cannot be combined with manifest", path)
			}
		}
		if repo != nil && manifest != nil {
			v.errorf(manifest, path, "%s sets both repo and manifest; use one", path)
		}
		if !known && repo == nil && manifest == nil {
			v.errorf(e, path, "%s is not a known chart; it needs repo or manifest", path)
		}
		if ns := e.get("namespace"); !ns.isNull() {
			switch ns.kind {
			case kindString:
			case kindMap:
				if v.mapping(ns, path+".namespace", "name", "enforce", "audit", "warn") {
					v.requiredStr(ns, "name", path+".namespace.name")
				}
			default:
				v.errorf(ns, path+".namespace", "%s.namespace must be a name or {name, enforce, audit, warn}", path)
			}
		}
		if vals := e.get("values"); !vals.isNull() && vals.kind != kindMap {
			v.errorf(vals, path+".values", "%s.values must be a mapping", path)
		}
		switch name {
		case "cert-manager":
			v.chartCertManager(e, path, enabled)
		case "nfs":
			v.chartNFS(e, path, enabled)
		case "ceph":
			v.chartCeph(e, path, enabled)
		}
	}
	if tr, cm := n.get("traefik"), n.get("cert-manager"); !tr.isNull() && !cm.isNull() && tr.kind == kindMap && cm.kind == kindMap {
		issuers := false
		for _, k := range []string{"staging", "prod"} {
			if b := cm.get(k); b != nil && b.kind == kindBool && b.bool {
				issuers = true
			}
		}
		if issuers && hasKeyDeep(tr.get("values"), "certificatesResolvers") {
			v.errorf(tr.get("values"), "charts.traefik.values", "charts.cert-manager letsencrypt issuers cannot be combined with a traefik ACME resolver (certificatesResolvers) in charts.traefik.values")
		}
	}
	return len(v.errs) == before
}

func hasKeyDeep(n *node, key string) bool {
	if n == nil {
		return false
	}
	switch n.kind {
	case kindMap:
		for _, k := range n.keys {
			if k == key || hasKeyDeep(n.vals[k], key) {
				return true
			}
		}
	case kindList:
		for _, it := range n.items {
			if hasKeyDeep(it, key) {
				return true
			}
		}
	}
	return false
}

func (v *validator) chartManifest(n *node, path string) {
	switch n.kind {
	case kindString:
		if !isURL(n.str) {
			v.errorf(n, path, "%s must be a URL or a list of URLs", path)
		}
	case kindList:
		for i, it := range n.items {
			if it.kind != kindString || !isURL(it.str) {
				v.errorf(it, fmt.Sprintf("%s[%d]", path, i), "%s must be a URL or a list of URLs", path)
			}
		}
	default:
		v.errorf(n, path, "%s must be a URL or a list of URLs", path)
	}
}

func isURL(s string) bool {
	return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "oci://")
}

func (v *validator) chartCertManager(e *node, path string, enabled bool) {
	on := false
	for _, k := range []string{"staging", "prod"} {
		if b, ok := v.boolean(e, k, path+"."+k); ok && b {
			on = true
		}
	}
	if e.get("email") != nil {
		v.optionalNonEmpty(e, "email", path+".email")
	} else if enabled && on {
		v.errorf(e, path+".email", "%s.email is required when the staging or prod issuer is on", path)
	}
}

func (v *validator) chartNFS(e *node, path string, enabled bool) {
	sc := e.get("storageClasses")
	if sc.isNull() {
		if enabled {
			v.errorf(where(e, "storageClasses"), path+".storageClasses", "%s.storageClasses is required when nfs is enabled", path)
		}
		return
	}
	if sc.kind != kindList {
		v.errorf(sc, path+".storageClasses", "%s.storageClasses must be a list", path)
		return
	}
	for i, it := range sc.items {
		p := fmt.Sprintf("%s.storageClasses[%d]", path, i)
		if it.kind != kindMap {
			v.errorf(it, p, "%s must be a mapping", p)
			continue
		}
		v.unknownKeys(it, p, nfsClassKeys)
		v.requiredStr(it, "name", p+".name")
		v.requiredStr(it, "server", p+".server")
		v.requiredStr(it, "share", p+".share")
	}
}

func (v *validator) chartCeph(e *node, path string, enabled bool) {
	if enabled {
		v.requiredStr(e, "clusterID", path+".clusterID")
		if m := e.get("monitors"); m.isNull() {
			v.errorf(where(e, "monitors"), path+".monitors", "missing required key %s.monitors", path)
		} else {
			v.strList(e, "monitors", path+".monitors")
		}
		on := 0
		for _, k := range []string{"rbd", "fs"} {
			x := e.get(k)
			switch {
			case x.isNull():
			case x.kind == kindBool:
				if x.bool {
					on++
				}
			case x.kind == kindMap:
				if b := x.get("enabled"); b == nil || (b.kind == kindBool && b.bool) {
					on++
				}
			default:
				v.errorf(x, path+"."+k, "%s.%s must be true, false or a mapping", path, k)
			}
		}
		if on == 0 {
			v.errorf(e, path+".rbd", "%s needs rbd or fs turned on", path)
		}
	}
	if (e.get("userID") == nil) != (e.get("userKey") == nil) {
		v.errorf(e, path+".userKey", "%s.userID and %s.userKey must be set together", path, path)
	}
}
