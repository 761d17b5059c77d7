// Package argocd is the argocd plugin: it registers a cluster with an
// existing Argo CD, as the Python taloscluster's argocd plugin does, with
// the objects that plugin renders: the cluster Secret, the AppProject, the
// repository Secret, the root Application and the cluster's Application,
// and on OpenStack the cinder CSI cloud config on the cluster itself.
//
// render.go renders them from the cluster.yaml and what is known of the
// cluster, without I/O; plugin.go reads them from Argo CD's cluster and
// the cluster itself (a server-side dry run finds drift), plans, applies
// (server-side apply) and tears them down, as a reconcile.Plugin. The
// commands do not run it yet (plan says so in a warning).
package argocd

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Namespace is where Argo CD keeps its objects.
const Namespace = "argocd"

// inCluster is the server Argo CD names itself by.
const inCluster = "https://kubernetes.default.svc"

// Cinder's cloud config on the cluster itself.
const (
	CinderNamespace = "cinder-csi"
	CinderSecret    = "cinder-csi-cloud-config"
)

// RancherAnnotation carries the Rancher cluster id on the cluster Secret.
const RancherAnnotation = "rancher.cattle.io/cluster-id"

// apps are the per-app sections of argocd, each enabled only when its
// enabled key is true.
var apps = []string{"metallb", "ingress", "sealedsecrets", "certmanager", "cinder", "nfs", "monitoring"}

// Settings is the argocd section as the plugin reads it.
type Settings struct {
	Name string
	// Admins and Users are argocd's members followed by rancher's, each
	// once, trimmed, empty ones left out.
	Admins, Users []string
	// GitURL and InfraURL are the repositories of the root and the
	// cluster Application; the Git credentials are set only when given.
	GitURL, InfraURL string
	GitUsername      *string
	GitToken         *string
	// Sync is the chart value sync; Automated turns on the Applications'
	// automated sync policy (the default).
	Sync, Automated bool
	// Apps holds the per-app sections, by name.
	Apps map[string]map[string]any
	// OpenStack is set for an OpenStack cluster.
	OpenStack *spec.OpenStack
}

// SettingsOf reads the plugin's settings from a loaded cluster. The
// section was validated when the cluster was loaded.
func SettingsOf(c *spec.Cluster) Settings {
	a := c.Plugins.ArgoCD
	s := Settings{Name: c.Name, Automated: true, Apps: map[string]map[string]any{}}
	s.Admins = members(a["admins"], c.Plugins.Rancher["admins"])
	s.Users = members(a["users"], c.Plugins.Rancher["users"])
	if g, ok := a["git"].(map[string]any); ok {
		s.GitURL, _ = g["url"].(string)
		if u, ok := g["username"].(string); ok {
			s.GitUsername = &u
		}
		if t, ok := g["token"].(string); ok {
			s.GitToken = &t
		}
	}
	if i, ok := a["infra"].(map[string]any); ok {
		s.InfraURL, _ = i["url"].(string)
	}
	if v, ok := a["sync"].(bool); ok {
		s.Sync = v
	}
	if v, ok := a["automated"].(bool); ok {
		s.Automated = v
	}
	for _, app := range apps {
		m, _ := a[app].(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		s.Apps[app] = m
	}
	if c.Provider == spec.ProviderOpenStack {
		s.OpenStack = c.OpenStack
	}
	return s
}

// members joins lists of names, each once, in order.
func members(lists ...any) []string {
	var out []string
	for _, l := range lists {
		items, _ := l.([]any)
		for _, it := range items {
			name, _ := it.(string)
			name = strings.TrimSpace(name)
			if name != "" && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

func (s Settings) enabled(app string) bool {
	v, _ := s.Apps[app]["enabled"].(bool)
	return v
}

func (s Settings) text(app, key string) string {
	v, _ := s.Apps[app][key].(string)
	return v
}

// Cluster is what the plugin knows of the cluster it registers.
type Cluster struct {
	// Server, CAData, CertData and KeyData come from the cluster's admin
	// kubeconfig (base64, as the kubeconfig holds them).
	Server, CAData, CertData, KeyData string
	// RancherID is the cluster's id in Rancher, "" when it has none.
	RancherID string
	// Ingress is where the cluster's ingress is reached.
	Ingress Ingress
	// OpenStackProject is the project of the OpenStack credential.
	OpenStackProject string
}

// Ingress is the cluster's ingress addresses: on Proxmox the ingress pool
// (a range), on OpenStack the ingress port's address and floating IP.
type Ingress struct {
	Pool            []string
	VIP, FloatingIP string
}

// ClusterOf reads the server and credentials of the cluster's admin
// kubeconfig: its first cluster, and its first user named admin… or
// holding credentials.
func ClusterOf(kubeconfig []byte) (Cluster, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return Cluster{}, fmt.Errorf("parsing the cluster's kubeconfig: %w", err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return Cluster{}, errors.New("the cluster's kubeconfig has no current context")
	}
	cl := cfg.Clusters[ctx.Cluster]
	if cl == nil {
		return Cluster{}, errors.New("the cluster's kubeconfig has no cluster entry")
	}
	out := Cluster{Server: cl.Server, CAData: b64(cl.CertificateAuthorityData)}
	if u := cfg.AuthInfos[ctx.AuthInfo]; u != nil {
		out.CertData, out.KeyData = b64(u.ClientCertificateData), b64(u.ClientKeyData)
	}
	return out, nil
}

func b64(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(data)
}

// Objects are what the plugin makes.
type Objects struct {
	// ArgoCD are the objects on the Argo CD side, in the order they are
	// applied: the cluster Secret, the AppProject, the repository Secret,
	// the root Application and the cluster's Application.
	ArgoCD []*unstructured.Unstructured
	// Cluster are the objects on the cluster itself (cinder's namespace
	// and cloud config), in the order they are applied.
	Cluster []*unstructured.Unstructured
}

// Render returns the objects of the cluster's registration. The repository
// Secret and the Applications need argocd.git.url; cinder's cloud config
// needs the OpenStack application credential.
func Render(s Settings, c Cluster) (Objects, error) {
	var out Objects
	out.ArgoCD = append(out.ArgoCD, clusterSecret(s, c), project(s, c))
	if s.GitURL == "" && s.GitUsername == nil && s.GitToken == nil {
		return out, nil
	}
	if s.GitURL == "" {
		return Objects{}, errors.New("argocd.git credentials are set but argocd.git.url is not")
	}
	out.ArgoCD = append(out.ArgoCD, repoSecret(s))
	if s.InfraURL == "" {
		return Objects{}, errors.New("argocd.infra.url is not set; the cluster's Application cannot be rendered")
	}
	values, err := clusterValues(s, c)
	if err != nil {
		return Objects{}, err
	}
	out.ArgoCD = append(out.ArgoCD,
		application(s, s.Name, map[string]any{"cluster": s.Name, "app": s.Name}, s.GitURL, "cluster: "+s.Name+"\n"),
		application(s, s.Name+"-cluster", map[string]any{"app": "infrastructure", "cluster": s.Name}, s.InfraURL, values))
	if s.enabled("cinder") {
		objs, err := cinder(s)
		if err != nil {
			return Objects{}, err
		}
		out.Cluster = objs
	}
	return out, nil
}

func obj(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }

func meta(name, namespace string, labels map[string]any) map[string]any {
	m := map[string]any{"name": name, "namespace": namespace}
	if labels != nil {
		m["labels"] = labels
	}
	return m
}

// clusterSecret is Argo CD's declarative cluster: the server and the
// client credentials of the cluster's admin kubeconfig.
func clusterSecret(s Settings, c Cluster) *unstructured.Unstructured {
	tls := []string{`"insecure": false`}
	for _, kv := range [][2]string{{"caData", c.CAData}, {"certData", c.CertData}, {"keyData", c.KeyData}} {
		if kv[1] != "" {
			v, _ := json.Marshal(kv[1])
			tls = append(tls, fmt.Sprintf("%q: %s", kv[0], v))
		}
	}
	m := meta("argocd-"+s.Name+"-secret", Namespace, map[string]any{"argocd.argoproj.io/secret-type": "cluster"})
	if c.RancherID != "" {
		m["annotations"] = map[string]any{RancherAnnotation: c.RancherID}
	}
	return obj(map[string]any{
		"apiVersion": "v1", "kind": "Secret", "metadata": m, "type": "Opaque",
		"stringData": map[string]any{
			"name": s.Name, "server": c.Server,
			"config": `{"tlsClientConfig": {` + strings.Join(tls, ", ") + "}}\n",
		},
	})
}

// project is the cluster's AppProject, with an admin and a read-only role.
func project(s Settings, c Cluster) *unstructured.Unstructured {
	role := func(name, description, verb string, groups []string) map[string]any {
		r := map[string]any{
			"name": name, "description": description + " privileges to " + s.Name,
			"policies": []any{fmt.Sprintf("p, proj:%s:%s, applications, %s, %s/*, allow", s.Name, name, verb, s.Name)},
		}
		if len(groups) > 0 {
			g := make([]any, len(groups))
			for i, x := range groups {
				g[i] = x
			}
			r["groups"] = g
		}
		return r
	}
	return obj(map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": meta(s.Name, Namespace, nil),
		"spec": map[string]any{
			"description": s.Name + " cluster",
			"sourceRepos": []any{"*"},
			"destinations": []any{
				map[string]any{"namespace": "*", "server": c.Server},
				map[string]any{"namespace": Namespace, "server": inCluster},
			},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
			"roles": []any{
				role("admin", "Admin", "*", s.Admins),
				role("user", "Read-only", "get", s.Users),
			},
		},
	})
}

// repoSecret is Argo CD's declarative repository for the root
// Application's Git repository.
func repoSecret(s Settings) *unstructured.Unstructured {
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return obj(map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": meta("repo-"+s.Name, Namespace, map[string]any{"argocd.argoproj.io/secret-type": "repository"}),
		"stringData": map[string]any{
			"name": s.Name + "-cluster", "password": deref(s.GitToken), "project": s.Name,
			"type": "git", "url": s.GitURL, "username": deref(s.GitUsername),
		},
	})
}

// application is an Application of the cluster's project: the chart at
// charts/apps of repo, released as the cluster's name with values.
func application(s Settings, name string, labels map[string]any, repo, values string) *unstructured.Unstructured {
	policy := map[string]any{"syncOptions": []any{"CreateNamespace=true"}}
	if s.Automated {
		policy["automated"] = map[string]any{"prune": true, "selfHeal": true, "allowEmpty": false}
	}
	return obj(map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta(name, Namespace, labels),
		"spec": map[string]any{
			"project":     s.Name,
			"destination": map[string]any{"server": inCluster, "namespace": Namespace},
			"syncPolicy":  policy,
			"source": map[string]any{
				"repoURL": repo, "path": "charts/apps", "targetRevision": "HEAD",
				"helm": map[string]any{"version": "v3", "releaseName": s.Name, "values": values},
			},
		},
	})
}

// clusterValues are the Helm values of the cluster's Application, as YAML
// with sorted keys. They hold no credential.
func clusterValues(s Settings, c Cluster) (string, error) {
	withVersion := func(m map[string]any, app string) map[string]any {
		if v := s.text(app, "version"); v != "" {
			m["version"] = v
		}
		return m
	}
	var project, authURL, region string
	region = "RegionOne"
	if s.OpenStack != nil {
		project, authURL = c.OpenStackProject, s.OpenStack.URL
		if s.OpenStack.Region != "" {
			region = s.OpenStack.Region
		}
	}
	class := s.text("ingress", "class")
	if class == "" {
		class = "traefik"
	}
	traefik := map[string]any{"storageClass": "", "ports": map[string]any{}}
	if t, ok := s.Apps["ingress"]["traefik"].(map[string]any); ok {
		if v, ok := t["version"].(string); ok && v != "" {
			traefik["version"] = v
		}
	}
	metallb := map[string]any{"enabled": s.enabled("metallb"), "addresses": []any{}}
	if s.enabled("metallb") {
		metallb["addresses"] = metallbAddresses(c.Ingress)
	}
	nfs := map[string]any{"enabled": s.enabled("nfs"), "type": "csi", "mountPermissions": "0777"}
	if servers, ok := s.Apps["nfs"]["servers"].(map[string]any); ok && s.enabled("nfs") && len(servers) > 0 {
		nfs["servers"] = servers
	}
	values := map[string]any{
		"cluster":       map[string]any{"name": s.Name, "url": c.Server, "rancher": map[string]any{"id": c.RancherID}},
		"openstack":     map[string]any{"project": project, "auth_url": authURL, "region": region},
		"notifications": map[string]any{},
		"sync":          s.Sync,
		"metallb":       withVersion(metallb, "metallb"),
		"certmanager": withVersion(map[string]any{"enabled": s.enabled("certmanager"), "email": s.text("certmanager", "email"),
			"class": class}, "certmanager"),
		"ingresscontroller": map[string]any{"enabled": s.enabled("ingress"), "class": class,
			"publicIP": c.Ingress.FloatingIP, "privateIP": c.Ingress.VIP, "traefik": traefik},
		"gateway_crd":   map[string]any{"enabled": true},
		"sealedsecrets": withVersion(map[string]any{"enabled": s.enabled("sealedsecrets")}, "sealedsecrets"),
		"monitoring":    map[string]any{"enabled": s.enabled("monitoring")},
		"healthmonitor": map[string]any{"enabled": false, "targetRevision": "HEAD", "nfs": false,
			"notifiers": map[string]any{"console": map[string]any{"report": "change", "threshold": 0}}},
		"nfs":      nfs,
		"longhorn": map[string]any{"enabled": false, "replicas": 3},
		"cinder":   withVersion(map[string]any{"enabled": s.enabled("cinder")}, "cinder"),
		"manila":   map[string]any{"enabled": false, "protocols": []any{}},
		"raw":      map[string]any{"enabled": true, "resources": []any{}, "templates": []any{}},
	}
	data, err := yaml.Marshal(values)
	if err != nil {
		return "", fmt.Errorf("rendering the cluster's Helm values: %w", err)
	}
	return string(data), nil
}

// metallbAddresses is MetalLB's address pool: the ingress pool verbatim
// (Proxmox), or the ingress VIP as a /32 (OpenStack). An entry that is a
// range or a prefix is kept as it is.
func metallbAddresses(in Ingress) []any {
	src := in.Pool
	if len(src) == 0 && in.VIP != "" {
		src = []string{in.VIP}
	}
	out := []any{}
	for _, a := range src {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case strings.ContainsAny(a, "-/"):
			out = append(out, a)
		default:
			out = append(out, a+"/32")
		}
	}
	return out
}

// cinder is the cinder CSI driver's cloud config on the cluster itself:
// its namespace, then the Secret with the OpenStack application
// credential.
func cinder(s Settings) ([]*unstructured.Unstructured, error) {
	o := s.OpenStack
	if o == nil || o.CredentialID == "" || o.CredentialSecret == "" {
		return nil, errors.New("argocd.cinder.enabled requires an OpenStack application credential; set openstack.credential_id and openstack.credential_secret in secrets.yaml")
	}
	region := o.Region
	if region == "" {
		region = "RegionOne"
	}
	conf := strings.Join([]string{
		"[Global]",
		"auth-url=" + o.URL,
		"region=" + region,
		"application-credential-id=" + o.CredentialID,
		"application-credential-secret=" + o.CredentialSecret,
	}, "\n")
	return []*unstructured.Unstructured{
		obj(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": CinderNamespace}}),
		obj(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta(CinderSecret, CinderNamespace, nil),
			"type": "Opaque", "stringData": map[string]any{"cloud.conf": conf}}),
	}, nil
}
