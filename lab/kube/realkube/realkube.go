// Package realkube starts a real Kubernetes control plane (etcd,
// kube-apiserver and, on request, kube-controller-manager) on loopback
// addresses for tests: the lab's conformance cases, the kubernetes state
// backend, and the deploy manifests' server-side dry run. The binaries are
// built by .ci/kube-binaries.sh and found through the environment.
package realkube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/taloscluster/taloscluster/lab/kube"
)

// The variables that name the binaries; .ci/kube-binaries.sh prints them.
const (
	EnvAPIServer  = "TALOSLAB_KUBE_APISERVER"
	EnvController = "TALOSLAB_KUBE_CONTROLLER_MANAGER"
	EnvEtcd       = "TALOSLAB_ETCD"
)

// Binaries returns the binaries named by the environment, or skips the
// test, saying how to get them, when a variable is unset. A variable that
// names a missing file fails the test.
func Binaries(t testing.TB) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for _, env := range []string{EnvAPIServer, EnvController, EnvEtcd} {
		p := os.Getenv(env)
		if p == "" {
			t.Skipf("set %s, %s and %s to the kube-apiserver, kube-controller-manager and etcd binaries to run "+
				"this test against a real server (eval \"$(bash .ci/kube-binaries.sh)\" builds them; CI always does)",
				EnvAPIServer, EnvController, EnvEtcd)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		bins[env] = p
	}
	return bins
}

// Options shape the control plane.
type Options struct {
	// Controllers lists the kube-controller-manager controllers to run
	// (for example "disruption"); none starts no controller manager.
	Controllers []string
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// URL is the API server's address.
	URL string
	// Admin is a client config in system:masters.
	Admin *rest.Config
	// CACert and CAKey are the cluster CA, which signs client
	// certificates.
	CACert, CAKey []byte
	dir           string
}

// Start starts a control plane from Binaries(t), ready to serve; it
// stops when the test ends.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	return start(t, Binaries(t), opts)
}

// Kubeconfig writes a kubeconfig file for a client certificate of user in
// groups and returns its path.
func (cp *ControlPlane) Kubeconfig(t testing.TB, user string, groups ...string) string {
	t.Helper()
	cert, key, err := kube.ClientCert(cp.CACert, cp.CAKey, user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := os.WriteFile(path, kubeconfigFile(cp.URL, cp.CACert, cert, key), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Client is a clientset for cfg.
func Client(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start starts etcd, kube-apiserver and the controller manager on
// 127.0.0.1 ports picked at random, with certificates from a fresh CA, and
// waits until the API server is ready. Everything stops with the test.
func start(t testing.TB, bins map[string]string, opts Options) *ControlPlane {
	t.Helper()
	dir := t.TempDir()
	caCert, caKey, err := kube.NewCA("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	serving, servingKey, err := kube.ServingCert(caCert, caKey, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default")
	if err != nil {
		t.Fatal(err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	saPriv, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		t.Fatal(err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	adminCert, adminKey, err := kube.ClientCert(caCert, caKey, "admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	kcmCert, kcmKey, err := kube.ClientCert(caCert, caKey, "system:kube-controller-manager", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"ca.crt": caCert, "apiserver.crt": serving, "apiserver.key": servingKey,
		"sa.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saPriv}),
		"sa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 3)
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	apiURL := fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	kubeconfig := filepath.Join(dir, "kcm.kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigFile(apiURL, caCert, kcmCert, kcmKey), 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	startProcess(t, dir, "etcd", bins[EnvEtcd],
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdClient, "--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer, "--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=default="+etcdPeer, "--log-level=warn", "--unsafe-no-fsync")
	startProcess(t, dir, "kube-apiserver", bins[EnvAPIServer],
		"--etcd-servers="+etcdClient,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		// The kubernetes service's endpoints cannot point at a loopback address.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+filepath.Join(dir, "apiserver.crt"), "--tls-private-key-file="+filepath.Join(dir, "apiserver.key"),
		"--client-ca-file="+filepath.Join(dir, "ca.crt"),
		"--anonymous-auth=false", "--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		// No controller creates the default service account of a namespace.
		"--disable-admission-plugins=ServiceAccount",
		"--cert-dir="+filepath.Join(dir, "certs"))

	admin := &rest.Config{Host: apiURL, TLSClientConfig: rest.TLSClientConfig{CAData: caCert, CertData: adminCert, KeyData: adminKey}}
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		cancel()
		if err == nil && string(body) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for kube-apiserver to be ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	if len(opts.Controllers) > 0 {
		startProcess(t, dir, "kube-controller-manager", bins[EnvController],
			"--kubeconfig="+kubeconfig, "--controllers="+strings.Join(opts.Controllers, ","), "--leader-elect=false",
			"--secure-port=0", "--use-service-account-credentials=false")
	}
	return &ControlPlane{URL: apiURL, Admin: admin, CACert: caCert, CAKey: caKey, dir: dir}
}

// startProcess runs a binary with its output in dir/NAME.log, stops it
// (SIGTERM, then SIGKILL after 10s) when the test ends, and shows the end
// of its log if the test failed.
func startProcess(t testing.TB, dir, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("last lines of the %s log:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
}

// freePorts returns n TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}

// kubeconfigFile is a kubeconfig for one server and one client certificate.
func kubeconfigFile(server string, ca, cert, key []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: lab
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: lab
  context:
    cluster: lab
    user: lab
current-context: lab
`, server, b64(ca), b64(cert), b64(key))
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallArgoCD makes the control plane look like Argo CD's cluster to
// a client: the argocd namespace, and Argo CD's Application and
// AppProject kinds (argoproj.io/v1alpha1, namespaced) with schemas that
// keep every field. It waits until the kinds are served.
func (cp *ControlPlane) InstallArgoCD(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if _, err := Client(t, cp.Admin).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []struct{ kind, plural string }{{"Application", "applications"}, {"AppProject", "appprojects"}}
	for _, k := range kinds {
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": k.plural + ".argoproj.io"},
			"spec": map[string]any{
				"group": "argoproj.io", "scope": "Namespaced",
				"names": map[string]any{"kind": k.kind, "plural": k.plural, "singular": strings.ToLower(k.kind), "listKind": k.kind + "List"},
				"versions": []any{map[string]any{"name": "v1alpha1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			},
		}}
		if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, k := range kinds {
		for !established(ctx, dyn, k.plural+".argoproj.io") {
			if time.Now().After(deadline) {
				t.Fatalf("the %s kind was not served within 30s", k.kind)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// established reports whether the CRD name is served.
func established(ctx context.Context, dyn dynamic.Interface, name string) bool {
	crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
