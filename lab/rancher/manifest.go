package rancher

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"text/template"
)

// AgentImage is the agent image the import manifest names.
const AgentImage = "rancher/rancher-agent:v2.12.1"

// serveImport answers /v3/import/<token>_<clusterId>.yaml with the
// cluster's import manifest: what Rancher's system template renders for
// an imported cluster, cut to the objects the agent's registration
// needs. The credentials Secret carries Rancher's URL, the registration
// token and the cluster id (its namespace field).
func (s *Server) serveImport(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	file := strings.TrimPrefix(r.URL.Path, "/v3/import/")
	token, clusterID, ok := strings.Cut(strings.TrimSuffix(file, ".yaml"), "_")
	if !ok || strings.Contains(file, "/") {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte("invalid filename format, expected {token}_{clusterId}.yaml"))
		return
	}
	url := s.opts.ServerURL
	if url == "" {
		url = origin(r)
	}
	url = strings.TrimRight(url, "/")
	sum := md5.Sum([]byte(url + token + clusterID))
	data := manifestData{
		TokenKey:  hex.EncodeToString(sum[:])[:7],
		URL:       base64.StdEncoding.EncodeToString([]byte(url)),
		Token:     base64.StdEncoding.EncodeToString([]byte(token)),
		Namespace: base64.StdEncoding.EncodeToString([]byte(clusterID)),
		URLPlain:  url,
		Image:     AgentImage,
	}
	if err := manifest.Execute(w, data); err != nil {
		w.WriteHeader(http.StatusInternalServerError)
	}
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
