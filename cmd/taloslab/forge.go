package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/forge"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// gitopsLab is the lab forge with a cluster repository and an agent
// configuration that runs against it.
type gitopsLab struct {
	forge       *forge.Forge
	srv         *http.Server
	apiURL      string
	gitURL      string
	repo        string
	userToken   string // alice: opens and merges pull requests
	agentConfig string
	agentURL    string
}

func (g *gitopsLab) close() {
	g.forge.Close() // releases hung requests
	_ = g.srv.Close()
}

func token(prefix string) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // the system's random source failed
	}
	return prefix + hex.EncodeToString(b)
}

// startForge serves the lab forge over HTTPS with the lab CA, creates
// org/clusters holding clusters/gitops (on Proxmox's vmbr1) and
// clusters/openstack (on the lab's OpenStack cloud, in the network nets
// reserved for it) and the upstream repositories
// siderolabs/talos and kubernetes/kubernetes with their release history
// (forge.SeedUpstreamReleases), and writes the agent's configuration,
// token and secrets under dir/agent.
func startForge(dir string, l *lab.Lab, nets *reservation, log *slog.Logger) (*gitopsLab, error) {
	botToken, userToken := token("ghp_bot"), token("ghp_alice")
	if err := os.MkdirAll(filepath.Join(dir, "forge"), 0o755); err != nil {
		return nil, fmt.Errorf("creating the forge directory: %w", err)
	}
	f, err := forge.New(forge.Options{Dir: filepath.Join(dir, "forge"), Logger: log, Users: []forge.User{
		{Login: "taloscluster-bot", Token: botToken, Name: "taloscluster", Email: "bot@taloslab.invalid"},
		{Login: "alice", Token: userToken, Name: "Alice", Email: "alice@taloslab.invalid"},
	}})
	if err != nil {
		return nil, err
	}
	repo, err := f.CreateRepo("org", "clusters", "main")
	if err != nil {
		return nil, err
	}
	repo.Grant("taloscluster-bot", forge.PermissionWrite)
	repo.Grant("alice", forge.PermissionAdmin)
	if err := f.SeedUpstreamReleases(); err != nil {
		return nil, err
	}
	cluster, err := l.ClusterYAML(lab.Cluster{Name: "gitops", Workers: 1, Bridge: "vmbr1"})
	if err != nil {
		return nil, err
	}
	cloud, err := l.OpenStackClusterYAML(lab.OpenStackCluster{Name: "gitops-cloud", Workers: 1, CIDR: nets.openstack["clusters/openstack"]})
	if err != nil {
		return nil, err
	}
	if _, err := repo.Commit("main", map[string]string{
		"README.md":                       "# clusters\n\nOne directory per cluster; the taloscluster agent plans pull requests and converges merges.\n",
		"clusters/gitops/cluster.yaml":    cluster,
		"clusters/gitops/ca.pem":          string(l.CA.PEM()),
		"clusters/openstack/cluster.yaml": cloud,
		"clusters/openstack/ca.pem":       string(l.CA.PEM()),
	}, "Add the gitops and openstack clusters"); err != nil {
		return nil, err
	}
	tlsCfg, err := l.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the forge: %w", err)
	}
	// ConnContext lets reset and lost-reply faults reset HTTP/2 connections.
	srv := &http.Server{Handler: f.Handler(), TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second, ConnContext: forge.ConnContext}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("forge stopped", "error", err)
		}
	}()
	base := "https://" + ln.Addr().String()
	agentPort, err := freePort()
	if err != nil {
		return nil, err
	}
	g := &gitopsLab{forge: f, srv: srv, apiURL: base + "/", gitURL: base + "/org/clusters.git", repo: "org/clusters",
		userToken: userToken, agentURL: fmt.Sprintf("http://127.0.0.1:%d", agentPort)}
	adir := filepath.Join(dir, "agent")
	files := map[string]string{
		"github-token":                         botToken,
		"ca.pem":                               string(l.CA.PEM()),
		"secrets/clusters/gitops/secrets.yaml": fmt.Sprintf("proxmox:\n  token_id: %q\n  token_secret: %q\n", l.TokenID, l.TokenSecret),
		"secrets/clusters/openstack/secrets.yaml": l.OpenStackSecretsYAML(),
	}
	for name, body := range files {
		p := filepath.Join(adir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		if err := state.WriteFile(p, []byte(body), 0o600); err != nil {
			return nil, err
		}
	}
	g.agentConfig = filepath.Join(dir, "agent.yaml")
	config := fmt.Sprintf(`# The taloscluster agent, configured against the lab forge.
repository:
  url: %s
  default_branch: main
  poll_interval: 2s
  token_file: %s
  ca_file: %s
  cluster_roots: [clusters]
github:
  api_url: %s
  repo: org/clusters
  token_file: %s
  ca_file: %s
  mutation_spacing: 100ms
plugins:
  ca_file: %s
secrets_dir: %s
data_dir: %s
state:
  backend: dir
concurrency: 4
drift_interval: 1h
self_heal: false
listen: 127.0.0.1:%d
public_url: %s
`, g.gitURL, filepath.Join(adir, "github-token"), filepath.Join(adir, "ca.pem"), g.apiURL,
		filepath.Join(adir, "github-token"), filepath.Join(adir, "ca.pem"), filepath.Join(adir, "ca.pem"),
		filepath.Join(adir, "secrets"), filepath.Join(adir, "data"), agentPort, g.agentURL)
	if err := state.WriteFile(g.agentConfig, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return g, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
