// Package agent is the GitOps loop: it polls the cluster repository, plans
// every pull request that changes a cluster and reports the plan on the pull
// request, converges every change merged to the default branch, and exports
// what it does as metrics and a status page. It knows nothing of Proxmox or
// Talos internals: it runs the engine through a Runner.
package agent

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile/retry"
)

// DestroyMarker is the file that asks the agent to destroy a cluster: a
// file of this name in the cluster's directory whose first line is the
// cluster's name. Merged to the default branch, the cluster is destroyed;
// in a pull request, the plan shows what would be deleted. Removing a
// cluster directory never destroys anything.
const DestroyMarker = "DESTROY"

// Config is the agent's configuration, read from its config file only:
// never from the repository it watches.
type Config struct {
	Repository Repository `yaml:"repository"`
	GitHub     GitHub     `yaml:"github"`
	// SecretsDir holds each cluster's credentials at
	// <secrets_dir>/<cluster path>/secrets.yaml (a mounted Secret).
	SecretsDir string `yaml:"secrets_dir"`
	// DataDir holds the clone and, with the dir backend, the state.
	DataDir string `yaml:"data_dir"`
	State   State  `yaml:"state"`
	// Concurrency bounds how many clusters converge at once.
	Concurrency int `yaml:"concurrency"`
	// MaxClustersPerPR bounds the clusters one pull request may change and
	// still be planned: one that changes more gets one comment saying so,
	// and no plan, status or report per cluster, so its volume cannot
	// crowd out the reports of others. Default DefaultMaxClustersPerPR.
	MaxClustersPerPR int `yaml:"max_clusters_per_pr"`
	// DriftInterval is how often the default branch is planned again.
	DriftInterval Duration `yaml:"drift_interval"`
	// DrainTimeout bounds the drain of a node that a converge removes:
	// still held up by PodDisruptionBudgets after it, the converge waits
	// (a pending status) and runs again later. Zero means the engine's
	// default, 330s.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// SelfHeal converges drift found by the drift check.
	SelfHeal bool `yaml:"self_heal"`
	// RequireReviewedPlan makes the converge of a merge run only the plan
	// people reviewed: the plan about to run must equal the last plan the
	// agent showed on the merged pull request for that cluster (on the
	// newest one when a run covers several merges), compared in every
	// attribute of every step, a new machine's config digest, node labels
	// and tags included. When it differs (a commit pushed after the plan
	// was shown, another merge or drift came in between), or no plan is
	// known (the commit was not merged through a pull request, the pull
	// request's plan was never shown; shown plans are kept in the
	// cluster's state when the backend allows, else in memory only), the
	// converge is refused before any change, with a failure status and a
	// comment listing the differences; a pull request whose plan is shown
	// and then merged converges it. A retry after a transient failure may
	// run what is left of the plan an earlier attempt was allowed to run.
	// Self-heal runs (self_heal) are not checked. Default false: the
	// converge goes ahead and its comment shows the plan that ran and the
	// differences since review.
	RequireReviewedPlan bool `yaml:"require_reviewed_plan"`
	// ReportRetry paces the tries of a report GitHub did not take; zero
	// means 10s doubling to 10m. It is set in code (tests shorten it),
	// never read from agent.yaml.
	ReportRetry retry.Policy `yaml:"-"`
	// RunRetry paces the tries of a converge or plan that failed with a
	// transient error; zero means RetryInitial doubling to RetryMax, at
	// most RetryAttempts tries. Set in code (tests shorten it), never read
	// from agent.yaml.
	RunRetry retry.Policy `yaml:"-"`
	// AllowedEndpoints are endpoints a pull request may point a cluster's
	// credentials or trust at (proxmox.url, proxmox.image_factory,
	// openstack.url) besides the default branch's value of the same key:
	// https URLs without user info, query or fragment. One allows its
	// exact scheme, host and port (443 when none is written), and its
	// path and everything below it on a path boundary.
	AllowedEndpoints []string `yaml:"allowed_endpoints"`
	// AllowTLSChanges lets a pull request turn off TLS verification
	// (proxmox.tls_verify: false) or change the CA bundle (its path or its
	// content) relative to the default branch. Default false: such a pull
	// request is not planned.
	AllowTLSChanges bool `yaml:"allow_tls_changes"`
	// Plugins configures the plugins' own clients.
	Plugins Plugins `yaml:"plugins"`
	// Listen is the address of /metrics, /healthz, /readyz and the status
	// page.
	Listen string `yaml:"listen"`
	// PublicURL is how people reach the status page; links to full plans
	// start with it.
	PublicURL string `yaml:"public_url"`
}

// Plugins configures what the plugins (rancher, charts) reach over
// HTTPS.
type Plugins struct {
	// CAFile is a PEM bundle trusted besides the system's roots by the
	// plugins' HTTPS clients: Rancher's API and the chart repositories.
	CAFile string `yaml:"ca_file"`
}

// Repository says where the cluster repository is and how to reach it.
type Repository struct {
	URL           string   `yaml:"url"`
	DefaultBranch string   `yaml:"default_branch"`
	PollInterval  Duration `yaml:"poll_interval"`
	// ClusterRoots are the directories searched for cluster.yaml files;
	// default: the whole repository.
	ClusterRoots []string `yaml:"cluster_roots"`
	// TokenFile holds an HTTPS token; SSHKeyFile and KnownHostsFile an
	// SSH key. At most one of the two.
	TokenFile      string `yaml:"token_file"`
	SSHKeyFile     string `yaml:"ssh_key_file"`
	KnownHostsFile string `yaml:"known_hosts_file"`
	// CAFile is an extra CA bundle for HTTPS (GitHub Enterprise, the lab).
	CAFile string `yaml:"ca_file"`
}

// GitHub says where pull requests, comments and statuses live.
type GitHub struct {
	APIURL    string `yaml:"api_url"`
	Repo      string `yaml:"repo"`
	TokenFile string `yaml:"token_file"`
	// AllowedAuthors may have their pull requests planned; empty means
	// authors with write permission on the repository.
	AllowedAuthors []string `yaml:"allowed_authors"`
	// MutationSpacing is the least time between two mutating requests.
	MutationSpacing Duration `yaml:"mutation_spacing"`
	CAFile          string   `yaml:"ca_file"`
}

// State selects where cluster state lives.
type State struct {
	Backend   string `yaml:"backend"` // dir or kubernetes
	Namespace string `yaml:"namespace"`
	// Kubeconfig, with the kubernetes backend, is a kubeconfig file to
	// reach the API server with, for an agent that runs outside the
	// cluster; empty means the in-cluster service account.
	Kubeconfig string `yaml:"kubeconfig"`
	// LeaseDuration, with the kubernetes backend, is how long a Lease
	// (a cluster's owner, a replica's membership, a run's mutation lock)
	// stays valid without renewal: the time another replica waits before
	// taking over the clusters of one that died. Default 30s.
	LeaseDuration Duration `yaml:"lease_duration"`
}

// Duration is a time.Duration written like "30s" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: a duration like 30s or 1h", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("line %d: %q is not a positive duration like 30s or 1h", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Least values of the agent configuration: a shorter poll interval or drift
// interval only loads GitHub, the git server and the providers. The mutation
// spacing must be positive (any duration is); GitHub asks for at least a
// second, the default.
const (
	MinPollInterval  = 2 * time.Second
	MinDriftInterval = time.Minute
)

// MaxConfigSize bounds the size of the agent's configuration file.
const MaxConfigSize = 1 << 20

// Defaults of the agent configuration.
const (
	DefaultPollInterval     = 30 * time.Second
	DefaultDriftInterval    = time.Hour
	DefaultConcurrency      = 4
	DefaultMaxClustersPerPR = 200
	DefaultMutationSpacing  = time.Second
	DefaultListen           = "127.0.0.1:8080"
	DefaultGitHubAPI        = "https://api.github.com/"
)

// Retries of a converge or a plan that failed with a transient error
// (retry.IsTransient): the job is requeued after a jittered wait that
// starts at RetryInitial and doubles up to RetryMax, for at most
// RetryAttempts tries in all. A terminal error is not retried.
const (
	RetryInitial  = 30 * time.Second
	RetryMax      = 10 * time.Minute
	RetryAttempts = 5
)

// Waits of a converge that stopped on something that will change on its
// own (reconcile.Waiting: a PodDisruptionBudget that blocks a drain, a
// node still booting): the job runs again after the wait the engine
// names (at least WaitInitial), or else after a jittered wait that starts
// at WaitInitial and doubles up to WaitMax, and these runs count no
// attempt. A job that still waits WaitLimit after its first wait fails.
const (
	WaitInitial = 30 * time.Second
	WaitMax     = 5 * time.Minute
	WaitLimit   = time.Hour
)

// waitPolicy paces the runs of a job that waits: the backoff between them
// when the engine names no wait, and how long it may wait in all.
type waitPolicy struct {
	backoff retry.Policy
	limit   time.Duration
}

// LoadConfig reads and checks an agent configuration file. Unknown keys are
// refused, and every problem is reported at once.
func LoadConfig(file string) (*Config, error) {
	data, err := readConfig(file)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	c.Defaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &c, nil
}

// readConfig reads the configuration file, at most MaxConfigSize bytes of
// it: a larger file, a named pipe or a device is refused before it is
// read.
func readConfig(file string) ([]byte, error) {
	data, err := boundedfile.Read(file, MaxConfigSize)
	if errors.Is(err, boundedfile.ErrTooLarge) {
		return nil, fmt.Errorf("%s: the agent config is larger than %d KiB (1 MiB), the most it may be", file, MaxConfigSize>>10)
	}
	if err != nil {
		return nil, fmt.Errorf("the agent config: %w", err)
	}
	return data, nil
}

// MinLeaseDuration is the shortest state.lease_duration.
const MinLeaseDuration = 3 * time.Second

// Defaults fills in the default of every key left unset.
func (c *Config) Defaults() {
	if c.Repository.PollInterval == 0 {
		c.Repository.PollInterval = Duration(DefaultPollInterval)
	}
	if c.DriftInterval == 0 {
		c.DriftInterval = Duration(DefaultDriftInterval)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxClustersPerPR == 0 {
		c.MaxClustersPerPR = DefaultMaxClustersPerPR
	}
	if c.GitHub.MutationSpacing == 0 {
		c.GitHub.MutationSpacing = Duration(DefaultMutationSpacing)
	}
	if c.GitHub.APIURL == "" {
		c.GitHub.APIURL = DefaultGitHubAPI
	}
	if !strings.HasSuffix(c.GitHub.APIURL, "/") {
		c.GitHub.APIURL += "/"
	}
	if len(c.Repository.ClusterRoots) == 0 {
		c.Repository.ClusterRoots = []string{"."}
	}
	if c.State.Backend == "" {
		c.State.Backend = "dir"
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
}

func (c *Config) validate() error {
	var errs []error
	need := func(key, v string) {
		if strings.TrimSpace(v) == "" {
			errs = append(errs, fmt.Errorf("%s is required", key))
		}
	}
	need("repository.url", c.Repository.URL)
	need("github.repo", c.GitHub.Repo)
	need("github.token_file", c.GitHub.TokenFile)
	need("secrets_dir", c.SecretsDir)
	need("data_dir", c.DataDir)
	if c.GitHub.Repo != "" && strings.Count(c.GitHub.Repo, "/") != 1 {
		errs = append(errs, errors.New("github.repo must be owner/name"))
	}
	if u, err := url.Parse(c.GitHub.APIURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		errs = append(errs, errors.New("github.api_url must be an http(s) URL"))
	}
	if c.Repository.TokenFile != "" && c.Repository.SSHKeyFile != "" {
		errs = append(errs, errors.New("repository.token_file and repository.ssh_key_file cannot both be set"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("concurrency must be 1 or more"))
	}
	if c.MaxClustersPerPR < 1 {
		errs = append(errs, errors.New("max_clusters_per_pr must be 1 or more"))
	}
	least := func(key string, d Duration, least time.Duration, why string) {
		if d.D() < least {
			errs = append(errs, fmt.Errorf("%s %s is below the minimum of %s (%s)", key, d.D(), least, why))
		}
	}
	if c.DrainTimeout != 0 {
		least("drain_timeout", c.DrainTimeout, time.Second, "a drain needs time for evictions to be retried")
	}
	least("repository.poll_interval", c.Repository.PollInterval, MinPollInterval,
		"every poll fetches the repository and lists the pull requests")
	least("drift_interval", c.DriftInterval, MinDriftInterval, "every drift check plans every cluster against its provider")
	if c.GitHub.MutationSpacing < 0 {
		errs = append(errs, errors.New("github.mutation_spacing must not be negative"))
	}
	if _, err := parseAllowed(c.AllowedEndpoints); err != nil {
		errs = append(errs, err)
	}
	switch c.State.Backend {
	case "dir":
		if c.State.Kubeconfig != "" {
			errs = append(errs, errors.New("state.kubeconfig is only for state.backend kubernetes"))
		}
	case "kubernetes":
		need("state.namespace", c.State.Namespace)
		if d := c.State.LeaseDuration.D(); d != 0 && d < MinLeaseDuration {
			errs = append(errs, fmt.Errorf("state.lease_duration %s is below the minimum of %s (Leases count whole seconds and are renewed every third)", d, MinLeaseDuration))
		}
	default:
		errs = append(errs, fmt.Errorf("state.backend must be dir or kubernetes, not %q", c.State.Backend))
	}
	for i, r := range c.Repository.ClusterRoots {
		if r == "" || path.IsAbs(r) || strings.HasPrefix(path.Clean(r), "..") {
			errs = append(errs, fmt.Errorf("repository.cluster_roots[%d] must be a relative path inside the repository", i))
		}
	}
	return errors.Join(errs...)
}
