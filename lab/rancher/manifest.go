package rancher

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"text/template"
)

// AgentImage is the agent image the import manifest names.
const AgentImage = "rancher/rancher-agent:v2.12.1"

// serveImport answers /v3/import/<token>_<clusterId>.yaml with the
// cluster's import manifest: what Rancher's system template renders for
// an imported cluster, cut to the objects the agent's registration
// needs. As Rancher's import handler does, it renders the template with
// an empty namespace: the credentials Secret carries Rancher's URL and
// the registration token of the manifest's name, and no cluster id. The
// id reaches the cluster only when Rancher redeploys the agent after it
// connected (ForCluster).
func (s *Server) serveImport(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	file := strings.TrimPrefix(r.URL.Path, "/v3/import/")
	token, _, ok := strings.Cut(strings.TrimSuffix(file, ".yaml"), "_")
	if !ok || strings.Contains(file, "/") {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte("invalid filename format, expected {token}_{clusterId}.yaml"))
		return
	}
	url := s.opts.ServerURL
	if url == "" {
		url = origin(r)
	}
	var buf bytes.Buffer
	if err := render(&buf, url, token, ""); err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(buf.Bytes())
}

// ForCluster is the manifest Rancher deploys to the cluster of id once
// its agent connected (Rancher's systemtemplate.ForCluster, run by its
// cluster deploy controller): the same objects, its credentials Secret
// carrying the cluster id as its namespace and the cluster's default
// registration token (else its first by name). serverURL is the URL the
// agent reaches Rancher at when Options.ServerURL is empty. False when
// there is no such cluster, or it has no registration token.
func (s *Server) ForCluster(id, serverURL string) ([]byte, bool) {
	s.mu.Lock()
	var token, name string
	for _, t := range s.tokens {
		if t.clusterID != id {
			continue
		}
		if n := t.id[strings.Index(t.id, ":")+1:]; token == "" || n == "default-token" || name != "default-token" && n < name {
			token, name = t.token, n
		}
	}
	url := s.opts.ServerURL
	s.mu.Unlock()
	if token == "" {
		return nil, false
	}
	if url == "" {
		url = serverURL
	}
	var buf bytes.Buffer
	if err := render(&buf, url, token, id); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// render writes the system template for url, token and namespace: the
// credentials Secret's name ends in the first 7 hex digits of the md5 of
// url+token+namespace, and its values are base64, as Rancher's
// SystemTemplate makes them.
func render(w io.Writer, url, token, namespace string) error {
	url = strings.TrimRight(url, "/")
	sum := md5.Sum([]byte(url + token + namespace))
	return manifest.Execute(w, manifestData{
		TokenKey:  hex.EncodeToString(sum[:])[:7],
		URL:       base64.StdEncoding.EncodeToString([]byte(url)),
		Token:     base64.StdEncoding.EncodeToString([]byte(token)),
		Namespace: base64.StdEncoding.EncodeToString([]byte(namespace)),
		URLPlain:  url,
		Image:     AgentImage,
	})
}

type manifestData struct {
	TokenKey, URL, Token, Namespace, URLPlain, Image string
}

var manifest = template.Must(template.New("import").Parse(`---
apiVersion: v1
kind: Namespace
metadata:
  name: cattle-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cattle
  namespace: cattle-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: cattle-admin
  labels:
    cattle.io/creator: "norman"
rules:
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["*"]
- nonResourceURLs: ["*"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cattle-admin-binding
  labels:
    cattle.io/creator: "norman"
subjects:
- kind: ServiceAccount
  name: cattle
  namespace: cattle-system
roleRef:
  kind: ClusterRole
  name: cattle-admin
  apiGroup: rbac.authorization.k8s.io
---
apiVersion: v1
kind: Secret
metadata:
  name: cattle-credentials-{{.TokenKey}}
  namespace: cattle-system
type: Opaque
data:
  url: "{{.URL}}"
  token: "{{.Token}}"
  namespace: "{{.Namespace}}"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cattle-cluster-agent
  namespace: cattle-system
spec:
  selector:
    matchLabels:
      app: cattle-cluster-agent
  template:
    metadata:
      labels:
        app: cattle-cluster-agent
    spec:
      serviceAccountName: cattle
      containers:
      - name: cluster-register
        imagePullPolicy: IfNotPresent
        image: {{.Image}}
        env:
        - name: CATTLE_SERVER
          value: "{{.URLPlain}}"
        - name: CATTLE_CA_CHECKSUM
          value: ""
        - name: CATTLE_CLUSTER
          value: "true"
        - name: CATTLE_K8S_MANAGED
          value: "true"
        volumeMounts:
        - name: cattle-credentials
          mountPath: /cattle-credentials
          readOnly: true
      volumes:
      - name: cattle-credentials
        secret:
          secretName: cattle-credentials-{{.TokenKey}}
          defaultMode: 320
---
apiVersion: v1
kind: Service
metadata:
  name: cattle-cluster-agent
  namespace: cattle-system
spec:
  ports:
  - port: 80
    targetPort: 80
    protocol: TCP
    name: http
  - port: 443
    targetPort: 444
    protocol: TCP
    name: https-internal
  selector:
    app: cattle-cluster-agent
`))
