package kube_test

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

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/taloscluster/taloscluster/lab/kube"
)

// The binaries of the real control plane the conformance cases also run
// against; .ci/kube-binaries.sh builds them and prints these variables.
const (
	envAPIServer  = "TALOSLAB_KUBE_APISERVER"
	envController = "TALOSLAB_KUBE_CONTROLLER_MANAGER"
	envEtcd       = "TALOSLAB_ETCD"
)

// TestConformanceRealServer runs the conformance cases against etcd,
// kube-apiserver and kube-controller-manager (only its disruption
// controller, which computes the budgets' status; kube-apiserver does not).
// There is no kubelet and no scheduler: the fixtures create nodes and bound
// pods through the API and write their status as a kubelet would.
func TestConformanceRealServer(t *testing.T) {
	t.Parallel()
	bins := map[string]string{}
	for _, env := range []string{envAPIServer, envController, envEtcd} {
		p := os.Getenv(env)
		if p == "" {
			t.Skipf("set %s, %s and %s to the kube-apiserver, kube-controller-manager and etcd binaries to run "+
				"the conformance cases against a real server (eval \"$(bash .ci/kube-binaries.sh)\" builds them)",
				envAPIServer, envController, envEtcd)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		bins[env] = p
	}
	cp := startControlPlane(t, bins)
	runConformance(t, backend{name: "kube-apiserver", admin: cp.admin, caCert: cp.caCert, caKey: cp.caKey, version: conformanceVersion})
}

type controlPlane struct {
	admin         *rest.Config
	caCert, caKey []byte
}

// startControlPlane starts etcd, kube-apiserver and kube-controller-manager
// on 127.0.0.1 ports picked at random, with certificates from a fresh CA,
// and waits until the API server is ready. Everything stops with the test.
func startControlPlane(t *testing.T, bins map[string]string) controlPlane {
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
	startProcess(t, dir, "etcd", bins[envEtcd],
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdClient, "--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer, "--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=default="+etcdPeer, "--log-level=warn", "--unsafe-no-fsync")
	startProcess(t, dir, "kube-apiserver", bins[envAPIServer],
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
	err = poll(t.Context(), 2*time.Minute, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		t.Fatalf("waiting for kube-apiserver to be ready: %v", err)
	}
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	startProcess(t, dir, "kube-controller-manager", bins[envController],
		"--kubeconfig="+kubeconfig, "--controllers=disruption", "--leader-elect=false",
		"--secure-port=0", "--use-service-account-credentials=false")
	return controlPlane{admin: admin, caCert: caCert, caKey: caKey}
}

// startProcess runs a binary with its output in dir/NAME.log, stops it
// (SIGTERM, then SIGKILL after 10s) when the test ends, and shows the end
// of its log if the test failed.
func startProcess(t *testing.T, dir, name, bin string, args ...string) {
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
func freePorts(t *testing.T, n int) []int {
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
