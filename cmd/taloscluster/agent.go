package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/taloscluster/taloscluster/agent"
	"github.com/taloscluster/taloscluster/agent/httpapi"
	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/gitsync"
	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/internal/noredirect"
	"github.com/taloscluster/taloscluster/plugins/argocd"
	"github.com/taloscluster/taloscluster/plugins/charts"
	"github.com/taloscluster/taloscluster/plugins/rancher"
	"github.com/taloscluster/taloscluster/providers/openstack"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/report"
	gh "github.com/taloscluster/taloscluster/report/github"
	"github.com/taloscluster/taloscluster/report/metrics"
)

func newAgent() *cobra.Command {
	var configFile string
	var once bool
	cmd := &cobra.Command{
		Use:   "agent --config agent.yaml",
		Short: "Run the GitOps agent: plan pull requests, converge merges",
		Long: "The agent polls the cluster repository, plans every pull request that changes a\n" +
			"cluster and posts the plan as one comment, converges every merge to the default\n" +
			"branch, and serves /metrics, /healthz, /readyz and a status page. Its own\n" +
			"configuration comes only from --config, never from the repository.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agent.LoadConfig(configFile)
			if err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			return runAgent(cmd.Context(), cfg, cmd.ErrOrStderr(), once)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "agent.yaml", "the agent's configuration file")
	cmd.Flags().BoolVar(&once, "once", false, "poll once, wait for the jobs it started, and exit")
	return cmd
}

// runAgent wires the agent from its configuration and runs it.
func runAgent(ctx context.Context, cfg *agent.Config, stderr io.Writer, once bool) error {
	a, handler, err := buildAgent(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Fprintf(stderr, "agent serving /metrics, /healthz, /readyz and the status page on http://%s/\n", ln.Addr())
	if once {
		err := a.Poll(ctx)
		a.Wait()
		a.Close()
		return err
	}
	return a.Run(ctx)
}

// buildAgent wires the agent and its HTTP handler from its configuration.
// It first takes the lock on the data directory, which the agent's Close
// drops: a second agent on the same directory is refused, naming the
// first.
func buildAgent(ctx context.Context, cfg *agent.Config, stderr io.Writer) (_ *agent.Agent, _ http.Handler, err error) {
	release, err := state.LockDataDir(cfg.DataDir, "taloscluster agent")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	redact := &report.Redactor{}
	log := slog.New(redactingHandler{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}), redact})

	ghToken, err := readSecretFile(cfg.GitHub.TokenFile, "github.token_file")
	if err != nil {
		return nil, nil, err
	}
	redact.Add(ghToken)
	if err := addSecretsDir(redact, cfg.SecretsDir); err != nil {
		return nil, nil, err
	}
	if cfg.Repository.TokenFile != "" {
		t, err := readSecretFile(cfg.Repository.TokenFile, "repository.token_file")
		if err != nil {
			return nil, nil, err
		}
		redact.Add(t)
	}

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return nil, nil, err
	}
	repoHTTP, err := httpClient(cfg.Repository.CAFile)
	if err != nil {
		return nil, nil, err
	}
	repo, err := gitsync.Open(ctx, gitsync.Options{
		URL: cfg.Repository.URL, Dir: filepath.Join(cfg.DataDir, "repo"), DefaultBranch: cfg.Repository.DefaultBranch,
		Auth:       gitsync.Auth{TokenFile: cfg.Repository.TokenFile, SSHKeyFile: cfg.Repository.SSHKeyFile, KnownHostsFile: cfg.Repository.KnownHostsFile},
		HTTPClient: repoHTTP, Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	ghHTTP, err := httpClient(cfg.GitHub.CAFile)
	if err != nil {
		return nil, nil, err
	}
	forge, err := gh.New(gh.Options{
		APIURL: cfg.GitHub.APIURL, Repo: cfg.GitHub.Repo, Token: ghToken, HTTPClient: ghHTTP,
		Spacing: cfg.GitHub.MutationSpacing.D(), Redact: redact,
		Observe: func(req *http.Request, code, remaining int) {
			m.GitHubRequest(githubOp(req), code)
			if remaining >= 0 {
				m.RateLimitRemaining(remaining)
			}
		},
	})
	if err != nil {
		return nil, nil, err
	}
	store, err := agentStore(cfg)
	if err != nil {
		return nil, nil, err
	}
	var fleet *state.Fleet
	outboxName := ""
	if ks, ok := store.(*state.KubeStore); ok {
		// Replicas share the clusters; each keeps its own outbox, and
		// takes over those of replicas that are gone.
		if fleet, err = ks.NewFleet(replicaIdentity(), cfg.State.LeaseDuration.D(), log); err != nil {
			return nil, nil, err
		}
		outboxName = fleet.OutboxName()
		log.Info("replica of the agent", "identity", fleet.Identity())
	}
	reports, err := agent.OpenOutbox(ctx, cfg, store, outboxName, log)
	if err != nil {
		return nil, nil, err
	}
	// The releases check compares the pins with come from the GitHub the
	// agent reports to (its API URL, token and CA). One source serves
	// every check, so its ETags spare the rate limit.
	releases, err := check.NewGitHub(check.GitHubOptions{APIURL: cfg.GitHub.APIURL, Token: ghToken, HTTPClient: ghHTTP})
	if err != nil {
		return nil, nil, err
	}
	pluginRoots, err := caPool(cfg.Plugins.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("plugins.ca_file: %w", err)
	}
	runner := &agentRunner{store: store, log: log, releases: releases, redact: redact, drainTimeout: cfg.DrainTimeout.D(), secretsDir: cfg.SecretsDir,
		pluginRoots: pluginRoots, charts: charts.New(charts.Options{RootCAs: pluginRoots})}
	deps := agent.Deps{Repo: repo, Forge: forge, Runner: runner,
		Progress: store, Metrics: m, Redact: redact, Log: log, Outbox: reports, Release: release}
	if fleet != nil {
		deps.Fleet = fleet
	}
	a := agent.New(cfg, deps)
	handler := httpapi.New(httpapi.Options{Metrics: reg, Ready: a.Ready, Status: a.Status, Plan: a.Plan, Logger: log})
	log.Info("agent ready", "repository", cfg.GitHub.Repo)
	return a, handler, nil
}

// agentBackend is what the agent keeps in its state backend: the
// clusters' state and journal, and its own documents (the report outbox).
type agentBackend interface {
	state.Backend
	state.AgentDocs
}

// replicaIdentity names this process among the agent's replicas: the
// pod's name (POD_NAME, from the downward API) or the host name, and a
// random suffix.
func replicaIdentity() string {
	host := os.Getenv("POD_NAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	return state.ReplicaIdentity(host)
}

// agentStore opens the state backend.
func agentStore(cfg *agent.Config) (agentBackend, error) {
	if cfg.State.Backend == "kubernetes" {
		var rc *rest.Config
		var err error
		if cfg.State.Kubeconfig != "" {
			rc, err = clientcmd.BuildConfigFromFlags("", cfg.State.Kubeconfig)
			if err != nil {
				return nil, fmt.Errorf("state.kubeconfig %s: %w", cfg.State.Kubeconfig, err)
			}
		} else if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("state.backend kubernetes needs to run in a cluster or state.kubeconfig: %w", err)
		}
		rc.QPS, rc.Burst = state.ClientQPS, state.ClientBurst
		rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return noredirect.Transport(rt) }
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		return state.NewKubeStore(cs, state.KubeOptions{Namespace: cfg.State.Namespace, LeaseDuration: cfg.State.LeaseDuration.D()})
	}
	return state.NewDirStore(filepath.Join(cfg.DataDir, "state")), nil
}

// githubOp names a GitHub request from a fixed set, for metric labels.
func githubOp(req *http.Request) metrics.GitHubOp {
	p := req.URL.Path
	switch {
	case strings.Contains(p, "/statuses/"):
		return metrics.OpCreateStatus
	case strings.Contains(p, "/issues/comments/"):
		return metrics.OpEditComment
	case strings.HasSuffix(p, "/comments") && req.Method == http.MethodPost:
		return metrics.OpCreateComment
	case strings.HasSuffix(p, "/comments"):
		return metrics.OpListComments
	case strings.HasSuffix(p, "/pulls"):
		return metrics.OpListPulls
	case strings.Contains(p, "/pulls/"):
		return metrics.OpGetPull
	case strings.Contains(p, "/repos/"):
		return metrics.OpGetRepo
	}
	return metrics.OpOther
}

func readSecretFile(path, key string) (string, error) {
	data, err := boundedfile.Read(path, boundedfile.Small)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// addSecretsDir registers every value of every secrets.yaml under dir with
// the redactor, so no credential can reach a comment, status or log.
func addSecretsDir(r *report.Redactor, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fmt.Errorf("secrets_dir %s does not exist", dir)
			}
			return err
		}
		if d.IsDir() || filepath.Base(p) != spec.SecretsFile {
			return nil
		}
		data, err := boundedfile.Read(p, boundedfile.Small)
		if err != nil {
			return fmt.Errorf("the agent's secrets: %w", err)
		}
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("reading %s: not valid YAML", p)
		}
		r.Add(leaves(v)...)
		return nil
	})
}

func leaves(v any) []string {
	switch x := v.(type) {
	case map[string]any:
		var out []string
		for _, e := range x {
			out = append(out, leaves(e)...)
		}
		return out
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, leaves(e)...)
		}
		return out
	case string:
		return []string{x}
	}
	return nil
}

func httpClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return http.DefaultClient, nil
	}
	pool, err := caPool(caFile)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

// caPool is the system's roots and the certificates of the PEM bundle
// caFile; nil (the system's roots) when caFile is "".
func caPool(caFile string) (*x509.CertPool, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := boundedfile.Read(caFile, boundedfile.Small)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the CA bundle %s holds no PEM certificate", caFile)
	}
	return pool, nil
}

// agentRunner runs the engine for the agent, with state in the agent's
// store and credentials from the agent's secrets directory.
type agentRunner struct {
	store state.Store
	log   *slog.Logger
	// releases lists the upstream releases for Check; redact removes
	// the agent's secrets from its reports.
	releases check.Source
	redact   *report.Redactor
	// drainTimeout is agent.yaml's drain_timeout (zero: the engine's).
	drainTimeout time.Duration
	// secretsDir is agent.yaml's secrets_dir: a plugin's credentials
	// (argocd.kubeconfig) are read from the cluster's directory there,
	// never from the repository.
	secretsDir string
	// pluginRoots are the CAs the plugins' HTTPS clients trust (agent.yaml's
	// plugins.ca_file and the system's); nil for the system's alone.
	pluginRoots *x509.CertPool
	// charts is the charts plugin every cluster's engine shares, so what
	// it keeps between runs (the Gateway API's latest release and its
	// ETag) serves them all.
	charts *charts.Plugin
}

func (r *agentRunner) engine(cluster string, files fs.FS, progress io.Writer) (*reconcile.Engine, error) {
	c, warnings, err := spec.LoadFS(files, cluster, spec.Options{})
	if err != nil {
		return nil, err
	}
	// What validate refuses, the agent refuses before planning too.
	if err := checkClusterConfigs(c, nil); err != nil {
		return nil, err
	}
	if probs := c.Credentials(); len(probs) > 0 {
		return nil, fmt.Errorf("credentials of %s in the agent's secrets directory: %s", cluster, probs[0])
	}
	// The files are a commit's tree: a path in cluster.yaml is never a
	// file of the agent's host.
	var infra reconcile.Infra
	switch c.Provider {
	case spec.ProviderProxmox:
		p, err := proxmox.New(c, files, r.log, proxmox.NoHostFiles())
		if err != nil {
			return nil, err
		}
		infra = p
	case spec.ProviderOpenStack:
		p, err := openstack.New(c, files, r.log, openstack.NoHostFiles())
		if err != nil {
			return nil, err
		}
		infra = p
	default:
		return nil, fmt.Errorf("no provider for %q", c.Provider)
	}
	var plugins []reconcile.Plugin
	if r.secretsDir != "" {
		// The file argocd.kubeconfig names, and so the Argo CD the
		// cluster is registered with, is the operator's: a pull request
		// can only name a file of the cluster's own secrets directory.
		plugins = append(plugins, argocd.New(os.DirFS(filepath.Join(r.secretsDir, filepath.FromSlash(cluster)))))
	}
	chartsPlugin := r.charts
	if chartsPlugin == nil {
		chartsPlugin = charts.New(charts.Options{RootCAs: r.pluginRoots})
	}
	plugins = append(plugins, rancher.New(rancher.Options{RootCAs: r.pluginRoots}), chartsPlugin)
	return &reconcile.Engine{Cluster: c, Warnings: warnings, State: r.store, Key: cluster, Infra: infra, Progress: progress, Log: r.log,
		DrainTimeout: r.drainTimeout, Plugins: plugins}, nil
}

func (r *agentRunner) Plan(ctx context.Context, cluster string, files fs.FS) (*plan.Plan, error) {
	e, err := r.engine(cluster, files, nil)
	if err != nil {
		return nil, err
	}
	if err := r.nameOwner(ctx, e.Cluster.Name, cluster); err != nil {
		return nil, err
	}
	if destroy, err := destroyRequested(files, e.Cluster.Name); err != nil {
		return nil, err
	} else if destroy {
		return e.PlanDestroy(ctx)
	}
	return e.Plan(ctx)
}

// destroyRequested reads the destroy marker of a cluster directory: it
// must name the cluster, so a copied directory cannot destroy another.
func destroyRequested(files fs.FS, name string) (bool, error) {
	data, err := boundedfile.ReadFS(files, agent.DestroyMarker, boundedfile.Small)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("the destroy marker: %w", err)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if strings.TrimSpace(first) != name {
		return false, fmt.Errorf("the %s marker must hold the cluster's name %q on its first line; nothing is destroyed", agent.DestroyMarker, name)
	}
	return true, nil
}

func (r *agentRunner) Converge(ctx context.Context, cluster, commit string, files fs.FS, h agent.ConvergeHooks) error {
	e, err := r.engine(cluster, files, lineWriter(h.Log))
	if err != nil {
		return err
	}
	e.Approve, e.Steps = h.Approve, h.Step
	if h.Loaded != nil {
		h.Loaded(e.Cluster)
	}
	if h.Remediated != nil {
		e.Remediated = func(_, pool, hostname string) { h.Remediated(pool, hostname) }
	}
	if j, ok := r.store.(reconcile.Journal); ok {
		e.Journal, e.Commit = j, commit
	}
	destroy, err := destroyRequested(files, e.Cluster.Name)
	if err != nil {
		return err
	}
	release, err := r.claimName(ctx, e.Cluster.Name, cluster)
	if err != nil {
		return err
	}
	if destroy {
		err = e.Destroy(ctx)
	} else {
		err = e.Converge(ctx)
	}
	release(destroy && err == nil)
	return err
}

// nameKey is the state key under which the directory that owns a cluster
// name is recorded: the name's claim, create-only like the identity, so
// two directories can never converge (or mint an identity for) one
// cluster. The state keeps each directory's own files by its path.
func nameKey(name string) string { return "_cluster-names/" + name }

const nameOwnerFile = "directory"

// nameOwner refuses a cluster name another directory owns; it changes
// nothing.
func (r *agentRunner) nameOwner(ctx context.Context, name, cluster string) error {
	owner, err := r.store.Get(ctx, nameKey(name), nameOwnerFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("reading which directory owns cluster name %q: %w", name, err)
	case string(owner) != cluster:
		return retry.Terminal(fmt.Errorf("cluster name %q belongs to the directory %s, which converged it; %s uses the same name and is not converged: give it another name", name, owner, cluster))
	}
	return nil
}

// claimName records that cluster (a directory) owns its cluster name, or
// refuses when another directory does. release is called once the run is
// over: a destroyed cluster frees its name, and so does a run that claimed
// the name but left the directory without an identity (it failed before
// minting one), so a directory that never built anything holds no name.
func (r *agentRunner) claimName(ctx context.Context, name, cluster string) (release func(destroyed bool), err error) {
	if err := r.nameOwner(ctx, name, cluster); err != nil {
		return nil, err
	}
	err = r.store.Create(ctx, nameKey(name), nameOwnerFile, []byte(cluster))
	claimed := err == nil
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("recording that %s owns cluster name %q: %w", cluster, name, err)
	}
	if !claimed {
		// Claimed meanwhile, or by this directory before: ask again.
		if err := r.nameOwner(ctx, name, cluster); err != nil {
			return nil, err
		}
	}
	return func(destroyed bool) {
		_, idErr := r.store.Get(ctx, cluster, state.IdentityFile)
		if destroyed || (claimed && errors.Is(idErr, fs.ErrNotExist)) {
			if err := r.store.Delete(context.WithoutCancel(ctx), nameKey(name), nameOwnerFile); err != nil {
				r.log.Warn("releasing a cluster name", "name", name, "cluster", cluster, "error", err)
			}
		}
	}, nil
}

// Describe reads a cluster's name and the files it read.
func (r *agentRunner) Describe(cluster string, files fs.FS) (agent.ClusterInfo, error) {
	name, read, err := spec.Identify(files, cluster)
	if err != nil {
		return agent.ClusterInfo{}, err
	}
	return agent.ClusterInfo{Name: name, Files: read}, nil
}

// Check checks a cluster as taloscluster check does: the pins against the
// upstream releases, and the running cluster (the engine's read-only
// observation) against cluster.yaml. A cluster the engine cannot observe
// (no credentials, a provider not implemented) is checked on its versions
// only, and the report says why it is incomplete. The whole check is
// bounded by checkTimeout.
func (r *agentRunner) Check(ctx context.Context, cluster string, files fs.FS) (*agent.CheckResult, error) {
	c, warnings, err := spec.LoadFS(files, cluster, spec.Options{})
	if err != nil {
		return nil, err
	}
	opts := check.Options{Cluster: c, Warnings: warnings, Releases: r.releases}
	if r.redact != nil {
		opts.Redact = r.redact.String
	}
	var obs *reconcile.Observation
	if e, err := r.engine(cluster, files, nil); err != nil {
		opts.Observe = func(context.Context) (*reconcile.Observation, error) { return nil, err }
	} else {
		opts.Observe = func(ctx context.Context) (*reconcile.Observation, error) {
			o, err := e.Observe(ctx)
			obs = o
			return o, err
		}
		opts.Plugins = e.PluginChecks
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	rep, err := check.Run(ctx, opts)
	if err != nil {
		return nil, err
	}
	res := &agent.CheckResult{Report: rep}
	if obs != nil && !obs.Offline && obs.Kube.Unknown == "" && len(obs.Inventory.Machines()) > 0 {
		res.Kube = map[string]agent.KubeNode{}
		for _, n := range obs.Kube.Nodes {
			res.Kube[n.Name] = agent.KubeNode{Ready: n.Ready, Cordoned: n.Unschedulable}
		}
	}
	return res, nil
}

// Endpoints returns what the pull-request endpoint policy checks of a
// cluster: the Proxmox API URL as the client will use it and the Image
// Factory the ISOs come from (both reached with proxmox.tls_verify), the
// OpenStack Keystone URL and the Image Factory of the boot image (reached
// with openstack.tls_verify). It reads the CA bundle only to identify its
// content, and makes no request.
func (r *agentRunner) Endpoints(cluster string, files fs.FS) (agent.Endpoints, error) {
	c, _, err := spec.LoadFS(files, cluster, spec.Options{})
	if err != nil {
		return agent.Endpoints{}, err
	}
	var out agent.Endpoints
	if px := c.Proxmox; px != nil {
		out.URLs = append(out.URLs,
			agent.Endpoint{Key: "proxmox.url", URL: px.APIURL()},
			agent.Endpoint{Key: "proxmox.image_factory", URL: px.ImageFactory})
		out.TLS = append(out.TLS, agent.TLSTrust{Key: "proxmox.tls_verify", Verify: px.TLSVerify.Verify,
			CAFile: px.TLSVerify.CAFile, CADigest: caDigest(files, px.TLSVerify.CAFile)})
	}
	if os := c.OpenStack; os != nil {
		out.URLs = append(out.URLs,
			agent.Endpoint{Key: "openstack.url", URL: os.URL},
			agent.Endpoint{Key: "openstack.image_factory", URL: os.ImageFactory})
		out.TLS = append(out.TLS, agent.TLSTrust{Key: "openstack.tls_verify", Verify: os.TLSVerify.Verify,
			CAFile: os.TLSVerify.CAFile, CADigest: caDigest(files, os.TLSVerify.CAFile)})
	}
	out.URLs = append(out.URLs, pluginEndpoints(c.Plugins)...)
	return out, nil
}

// pluginEndpoints are the URLs of the plugin sections a credential goes
// to or the agent fetches from: rancher.url (the Rancher token),
// argocd.git.url (Argo CD sends the repository token there), and each
// charts entry's repo and manifest URLs (read while planning). A known
// chart's default repository is the project's, not the pull request's.
func pluginEndpoints(p spec.Plugins) []agent.Endpoint {
	var out []agent.Endpoint
	text := func(m map[string]any, key string) string {
		s, _ := m[key].(string)
		return s
	}
	if u := text(p.Rancher, "url"); u != "" {
		out = append(out, agent.Endpoint{Key: "rancher.url", URL: u})
	}
	if git, ok := p.ArgoCD["git"].(map[string]any); ok && text(git, "url") != "" {
		out = append(out, agent.Endpoint{Key: "argocd.git.url", URL: text(git, "url")})
	}
	for _, name := range slices.Sorted(maps.Keys(p.Charts)) {
		entry, _ := p.Charts[name].(map[string]any)
		if u := text(entry, "repo"); u != "" {
			out = append(out, agent.Endpoint{Key: "charts." + name + ".repo", URL: u})
		}
		switch m := entry["manifest"].(type) {
		case string:
			out = append(out, agent.Endpoint{Key: "charts." + name + ".manifest", URL: m})
		case []any:
			for _, u := range m {
				if s, ok := u.(string); ok {
					out = append(out, agent.Endpoint{Key: "charts." + name + ".manifest", URL: s})
				}
			}
		}
	}
	return out
}

// caDigest identifies the content of a tls_verify CA bundle, read the way
// the agent's Proxmox provider reads it, from the cluster's directory in
// the commit's tree only: "" without a bundle, "unreadable" when it cannot
// be read (the plan then fails on it). A path outside the directory is
// never read (the endpoint policy refuses it).
func caDigest(files fs.FS, caFile string) string {
	if caFile == "" {
		return ""
	}
	name, err := spec.DirPath(caFile)
	if err != nil {
		return "outside the cluster's directory"
	}
	data, err := boundedfile.ReadFS(files, name, boundedfile.Small)
	if err != nil {
		return "unreadable"
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// lineWriter turns writes into calls of f.
type lineWriter func(string)

func (f lineWriter) Write(p []byte) (int, error) {
	f(string(p))
	return len(p), nil
}

// redactingHandler removes secrets from every log record.
type redactingHandler struct {
	slog.Handler
	r *report.Redactor
}

func (h redactingHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(slog.String(a.Key, h.r.String(a.Value.String())))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h redactingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = slog.String(a.Key, h.r.String(a.Value.String()))
	}
	return redactingHandler{h.Handler.WithAttrs(clean), h.r}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{h.Handler.WithGroup(name), h.r}
}
