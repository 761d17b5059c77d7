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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	bins, ok, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skipf("set %s, %s and %s to the kube-apiserver, kube-controller-manager and etcd binaries to run "+
			"this test against a real server (eval \"$(bash .ci/kube-binaries.sh)\" builds them; CI always does)",
			EnvAPIServer, EnvController, EnvEtcd)
	}
	return bins
}

// FromEnv returns the binaries the environment names; ok is false when a
// variable is unset, and a variable that names a missing file is an error.
func FromEnv() (bins map[string]string, ok bool, err error) {
	bins = map[string]string{}
	for _, env := range []string{EnvAPIServer, EnvController, EnvEtcd} {
		p := os.Getenv(env)
		if p == "" {
			return nil, false, nil
		}
		if _, err := os.Stat(p); err != nil {
			return nil, false, fmt.Errorf("%s: %w", env, err)
		}
		bins[env] = p
	}
	return bins, true, nil
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
	// adminCert and adminKey are Admin's client certificate.
	adminCert, adminKey []byte
	procs               []*process
	took                time.Duration // until the API server was ready
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

// start starts a control plane in a directory of the test's, stopped
// when the test ends (with the end of each log shown when it failed).
func start(t testing.TB, bins map[string]string, opts Options) *ControlPlane {
	t.Helper()
	cp, err := Launch(t.TempDir(), bins, opts)
	if cp != nil {
		t.Cleanup(func() {
			cp.Stop()
			if t.Failed() {
				t.Log(cp.Logs(40))
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd and kube-apiserver ready in %v", cp.took.Round(time.Millisecond))
	return cp
}

// Launch starts etcd, kube-apiserver and, when opts name controllers,
// kube-controller-manager from bins (by their variables' names) on
// 127.0.0.1 ports picked at random, with certificates from a fresh CA, their
// files and logs in dir, and waits until the API server is ready. Stop
// stops them. On an error it returns the control plane too when a process
// was started, so that it can be stopped and its logs read.
func Launch(dir string, bins map[string]string, opts Options) (*ControlPlane, error) {
	// The ports are picked free, but another process may take one before
	// etcd or kube-apiserver binds it: that launch is thrown away and
	// another made on fresh ports.
	for attempt := 1; ; attempt++ {
		d := dir
		if attempt > 1 {
			d = filepath.Join(dir, fmt.Sprintf("attempt-%d", attempt))
			if err := os.MkdirAll(d, 0o700); err != nil {
				return nil, err
			}
		}
		cp, err := launch(d, bins, opts)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return cp, err
		}
		if cp != nil {
			cp.Stop()
		}
	}
}

// launch is one try of Launch, in dir.
func launch(dir string, bins map[string]string, opts Options) (*ControlPlane, error) {
	caCert, caKey, err := kube.NewCA("kubernetes")
	if err != nil {
		return nil, err
	}
	serving, servingKey, err := kube.ServingCert(caCert, caKey, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default")
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saPriv, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	adminCert, adminKey, err := kube.ClientCert(caCert, caKey, "admin", "system:masters")
	if err != nil {
		return nil, err
	}
	kcmCert, kcmKey, err := kube.ClientCert(caCert, caKey, "system:kube-controller-manager", "system:masters")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"ca.crt": caCert, "apiserver.crt": serving, "apiserver.key": servingKey,
		"sa.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saPriv}),
		"sa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	apiURL := fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	kubeconfig := filepath.Join(dir, "kcm.kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigFile(apiURL, caCert, kcmCert, kcmKey), 0o600); err != nil {
		return nil, err
	}
	admin := &rest.Config{Host: apiURL, TLSClientConfig: rest.TLSClientConfig{CAData: caCert, CertData: adminCert, KeyData: adminKey}}
	cp := &ControlPlane{URL: apiURL, Admin: admin, CACert: caCert, CAKey: caKey, dir: dir, adminCert: adminCert, adminKey: adminKey}

	started := time.Now()
	if err := cp.startProcess("etcd", bins[EnvEtcd],
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdClient, "--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer, "--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=default="+etcdPeer, "--log-level=warn", "--unsafe-no-fsync"); err != nil {
		return cp, err
	}
	if err := cp.startProcess("kube-apiserver", bins[EnvAPIServer],
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
		"--cert-dir="+filepath.Join(dir, "certs")); err != nil {
		return cp, err
	}

	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return cp, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		cancel()
		if err == nil && string(body) == "ok" {
			break
		}
		if p := cp.exitedProcess(); p != nil {
			return cp, fmt.Errorf("waiting for kube-apiserver to be ready: %s exited (%v); its log ends:\n%s", p.name, p.err, cp.Logs(20))
		}
		if time.Now().After(deadline) {
			return cp, fmt.Errorf("waiting for kube-apiserver to be ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cp.took = time.Since(started)
	if len(opts.Controllers) > 0 {
		if err := cp.startProcess("kube-controller-manager", bins[EnvController],
			"--kubeconfig="+kubeconfig, "--controllers="+strings.Join(opts.Controllers, ","), "--leader-elect=false",
			"--secure-port=0", "--use-service-account-credentials=false"); err != nil {
			return cp, err
		}
	}
	return cp, nil
}

// process is one running binary of a control plane.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan error
	// done is closed once the process has exited, with err its end.
	done chan struct{}
	err  error
}

// exitedProcess returns a process of the control plane that has exited,
// nil while all run.
func (cp *ControlPlane) exitedProcess() *process {
	for _, p := range cp.procs {
		select {
		case <-p.done:
			return p
		default:
		}
	}
	return nil
}

// startProcess runs a binary with its output in dir/NAME.log.
func (cp *ControlPlane) startProcess(name, bin string, args ...string) error {
	logFile, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = cp.dir
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logFile, exited: make(chan error, 1), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.err = err
		close(p.done)
		p.exited <- err
	}()
	cp.procs = append(cp.procs, p)
	return nil
}

// Stop stops the control plane's processes, the last started first
// (SIGTERM, then SIGKILL after 10s).
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		_ = p.log.Close()
	}
	cp.procs = nil
}

// Logs returns the last n lines of each process's log.
func (cp *ControlPlane) Logs(n int) string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		data, err := os.ReadFile(filepath.Join(cp.dir, name+".log"))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "last lines of the %s log:\n%s\n", name, strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
	return b.String()
}

// AdminKubeconfig is a kubeconfig of the control plane's admin (in
// system:masters).
func (cp *ControlPlane) AdminKubeconfig() []byte {
	return kubeconfigFile(cp.URL, cp.CACert, cp.adminCert, cp.adminKey)
}

// freePorts returns n TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
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

// InstallArgoCD makes the control plane look like Argo CD's cluster
// (InstallArgoCDKinds), failing the test when it cannot.
func (cp *ControlPlane) InstallArgoCD(t testing.TB) {
	t.Helper()
	if err := InstallArgoCDKinds(context.Background(), cp.Admin); err != nil {
		t.Fatal(err)
	}
}

// InstallArgoCDKinds makes the API server of cfg look like Argo CD's
// cluster to a client: the argocd namespace, and Argo CD's Application and
// AppProject kinds (argoproj.io/v1alpha1, namespaced) with schemas that
// keep every field. It waits until the kinds are served.
func InstallArgoCDKinds(ctx context.Context, cfg *rest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// A lab started again on the same directory finds them there.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the argocd namespace: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
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
		if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the %s kind: %w", k.kind, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, k := range kinds {
		for !established(ctx, dyn, k.plural+".argoproj.io") {
			if time.Now().After(deadline) {
				return fmt.Errorf("the %s kind was not served within 30s", k.kind)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// established reports whether the CRD name is served.
func established(ctx context.Context, dyn dynamic.Interface, name string) bool {
	crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
	return err == nil && Established(crd)
}

// Established reports whether a CustomResourceDefinition read from the
// API server has its Established condition: its kind is served.
func Established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
