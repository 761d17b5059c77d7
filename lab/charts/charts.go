// Package charts is the lab's chart repository: an HTTP handler serving
// a Helm chart repository (index.yaml and .tgz chart archives) of small
// test charts named like the ones the charts plugin knows, the Gateway
// API's standard-install.yaml per release, GitHub's releases/latest
// answer for it, and manifests tests publish. Everything is generated in
// memory at start; tests publish new versions and inject faults at run
// time.
//
// The repository format is Helm's (lab/FIDELITY.md cites where):
// index.yaml is Helm's repo.IndexFile, written by Helm's own package; the
// archives are gzipped tars of <chart>/Chart.yaml, values.yaml,
// templates/ and crds/, which Helm's loader reads.
package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// Paths the repository serves.
const (
	IndexPath = "/index.yaml"
	// ArchivePrefix is where the chart archives are, as
	// <name>-<version>.tgz.
	ArchivePrefix = "/charts/"
	// GatewayLatestPath is GitHub's API for the Gateway API's latest
	// release.
	GatewayLatestPath = "/repos/kubernetes-sigs/gateway-api/releases/latest"
	// GatewayManifest is where each Gateway API release's
	// standard-install.yaml is, {version} its tag.
	GatewayManifest = "/kubernetes-sigs/gateway-api/releases/download/{version}/standard-install.yaml"
	// ManifestPrefix is where the manifests tests publish are, by name.
	ManifestPrefix = "/manifests/"
)

// Custom is the lab's chart the plugin does not know.
const Custom = "lab-app"

// Versions are the versions each chart starts with, oldest first.
var Versions = map[string][]string{
	"metallb":         {"0.14.8", "0.14.9", "0.15.2"},
	"traefik":         {"37.0.0", "37.1.0", "37.1.1"},
	"sealed-secrets":  {"2.17.0", "2.17.2", "2.17.3"},
	"cert-manager":    {"v1.18.0", "v1.18.2", "v1.19.0"},
	"csi-driver-nfs":  {"4.10.0", "4.11.0", "4.12.0"},
	"ceph-csi-rbd":    {"3.13.0", "3.14.0", "3.14.1"},
	"ceph-csi-cephfs": {"3.13.0", "3.14.0", "3.14.1"},
	Custom:            {"0.1.0", "0.2.0"},
}

// GatewayVersions are the Gateway API releases the lab starts with; the
// last is the latest.
var GatewayVersions = []string{"v1.2.1", "v1.3.0"}

// Fault is what a path answers instead of its content.
type Fault int

const (
	// NoFault serves the content.
	NoFault Fault = iota
	// Fail500 answers 500 Internal Server Error.
	Fail500
	// Hang answers nothing until the request is given up.
	Hang
)

// Repo is the chart repository, an http.Handler.
type Repo struct {
	mu       sync.Mutex
	index    *repo.IndexFile
	archives map[string][]byte
	gateway  map[string][]byte
	latest   string
	// manifests are the published manifests, by path.
	manifests map[string][]byte
	faults    map[string]Fault
	hits      map[string]int
}

// New returns the repository with every chart in Versions and the
// Gateway API releases in GatewayVersions.
func New() (*Repo, error) {
	r := &Repo{index: repo.NewIndexFile(), archives: map[string][]byte{}, gateway: map[string][]byte{}, manifests: map[string][]byte{},
		faults: map[string]Fault{}, hits: map[string]int{}}
	names := make([]string, 0, len(Versions))
	for n := range Versions {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, v := range Versions[n] {
			if err := r.Publish(n, v); err != nil {
				return nil, err
			}
		}
	}
	for _, v := range GatewayVersions {
		r.PublishGateway(v)
	}
	return r, nil
}

// Publish adds a version of a chart (its templates are the lab's for that
// name) to the index and its archive.
func (r *Repo) Publish(name, version string) error {
	data, md, err := Archive(name, version)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	file := fmt.Sprintf("%s-%s.tgz", name, version)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.index.Has(name, version) {
		return fmt.Errorf("%s %s is published already", name, version)
	}
	// The URL is relative to the repository, as Helm resolves it.
	if err := r.index.MustAdd(md, strings.TrimPrefix(ArchivePrefix, "/")+file, "", hex.EncodeToString(sum[:])); err != nil {
		return err
	}
	r.index.SortEntries()
	r.archives[ArchivePrefix+file] = data
	return nil
}

// PublishGateway adds a Gateway API release and makes it the latest.
func (r *Repo) PublishGateway(version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gateway[version] = gatewayManifest(version)
	r.latest = version
}

// PublishManifest serves data, a manifest, at ManifestPrefix+name.
func (r *Repo) PublishManifest(name string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.manifests[ManifestPrefix+name] = data
}

// SetFault makes path (as the request names it, e.g. "/index.yaml")
// answer with f; NoFault serves it again.
func (r *Repo) SetFault(path string, f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f == NoFault {
		delete(r.faults, path)
		return
	}
	r.faults[path] = f
}

// Hits is how many requests named path.
func (r *Repo) Hits(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[path]
}

// ServeHTTP serves the index, the archives, the Gateway API manifests and
// GitHub's latest release.
func (r *Repo) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	path := req.URL.Path
	r.mu.Lock()
	r.hits[path]++
	fault := r.faults[path]
	r.mu.Unlock()
	switch fault {
	case Fail500:
		http.Error(w, "lab fault", http.StatusInternalServerError)
		return
	case Hang:
		<-req.Context().Done()
		return
	}
	body, kind, ok := r.content(path)
	if !ok {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", kind)
	_, _ = w.Write(body)
}

func (r *Repo) content(path string) ([]byte, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case path == IndexPath:
		r.index.Generated = time.Now()
		data, err := yaml.Marshal(r.index)
		return data, "application/x-yaml", err == nil
	case strings.HasPrefix(path, ArchivePrefix):
		data, ok := r.archives[path]
		return data, "application/gzip", ok
	case strings.HasPrefix(path, ManifestPrefix):
		data, ok := r.manifests[path]
		return data, "application/x-yaml", ok
	case path == GatewayLatestPath:
		data, _ := json.Marshal(map[string]string{"tag_name": r.latest, "name": r.latest})
		return data, "application/json", true
	}
	prefix, suffix, _ := strings.Cut(GatewayManifest, "{version}")
	if strings.HasPrefix(path, prefix) && strings.HasSuffix(path, suffix) {
		data, ok := r.gateway[strings.TrimSuffix(strings.TrimPrefix(path, prefix), suffix)]
		return data, "application/x-yaml", ok
	}
	return nil, "", false
}

// Archive is a chart's .tgz and its metadata: Chart.yaml, values.yaml,
// a ConfigMap recording the values it was installed with, and what the
// chart of that name carries besides (MetalLB's and cert-manager's CRDs
// and Deployments).
func Archive(name, version string) ([]byte, *chart.Metadata, error) {
	md := &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version, AppVersion: version, Type: "application",
		Description: "the lab's " + name + " chart"}
	if err := md.Validate(); err != nil {
		return nil, nil, err
	}
	chartYAML, err := yaml.Marshal(md)
	if err != nil {
		return nil, nil, err
	}
	files := []file{
		{"Chart.yaml", chartYAML},
		{"values.yaml", []byte("lab: {replicas: 1}\n")},
		{"templates/configmap.yaml", []byte(configMapTemplate)},
	}
	switch name {
	case "metallb":
		files = append(files, file{"crds/metallb.yaml", []byte(crd("metallb.io", "IPAddressPool", "ipaddresspools", "Namespaced", "v1beta1") +
			"---\n" + crd("metallb.io", "L2Advertisement", "l2advertisements", "Namespaced", "v1beta1"))},
			file{"templates/controller.yaml", []byte(deployment("metallb-controller"))})
	case "cert-manager":
		files = append(files, file{"crds/cert-manager.yaml", []byte(crd("cert-manager.io", "ClusterIssuer", "clusterissuers", "Cluster", "v1"))},
			file{"templates/webhook.yaml", []byte(deployment("{{ .Release.Name }}-webhook"))})
	}
	data, err := tgz(name, files)
	return data, md, err
}

type file struct {
	name string
	data []byte
}

func tgz(dir string, files []file) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		hdr := &tar.Header{Name: dir + "/" + f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// configMapTemplate records the chart and the values a release renders.
const configMapTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-lab
  namespace: {{ .Release.Namespace }}
data:
  chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
  values: {{ toJson .Values | quote }}
`

func deployment(name string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ` + name + `
  namespace: {{ .Release.Namespace }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: lab}
  template:
    metadata:
      labels: {app: lab}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: main
          image: lab.invalid/{{ .Chart.Name }}:{{ .Chart.AppVersion }}
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`
}

// crd is a CustomResourceDefinition that keeps any spec.
func crd(group, kind, plural, scope, version string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[3]s.%[1]s
spec:
  group: %[1]s
  names: {kind: %[2]s, listKind: %[2]sList, plural: %[3]s, singular: %[4]s}
  scope: %[5]s
  versions:
    - name: %[6]s
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`, group, kind, plural, strings.ToLower(kind), scope, version)
}

// gatewayManifest is a Gateway API release's standard-install.yaml: its
// GatewayClass and Gateway CRDs, marked with the release.
func gatewayManifest(version string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Gateway API standard channel, %s (the lab's)\n", version)
	for i, k := range [][2]string{{"GatewayClass", "gatewayclasses"}, {"Gateway", "gateways"}} {
		if i > 0 {
			b.WriteString("---\n")
		}
		scope := "Namespaced"
		if k[0] == "GatewayClass" {
			scope = "Cluster"
		}
		doc := crd("gateway.networking.k8s.io", k[0], k[1], scope, "v1")
		doc = strings.Replace(doc, "metadata:\n", "metadata:\n  annotations:\n    api-approved.kubernetes.io: https://github.com/kubernetes-sigs/gateway-api/pull/3328\n    gateway.networking.k8s.io/bundle-version: "+version+"\n    gateway.networking.k8s.io/channel: standard\n", 1)
		b.WriteString(doc)
	}
	return []byte(b.String())
}
