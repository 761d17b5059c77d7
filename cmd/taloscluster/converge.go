package main

import (
	"bufio"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/taloscluster/taloscluster/plugins/argocd"
	"github.com/taloscluster/taloscluster/plugins/charts"
	"github.com/taloscluster/taloscluster/plugins/rancher"
	"github.com/taloscluster/taloscluster/providers/openstack"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
	"github.com/taloscluster/taloscluster/report"
)

// engineFor builds the engine of a cluster directory with its provider.
func engineFor(cmd *cobra.Command, dir string, c *spec.Cluster, warnings []spec.Problem) (*reconcile.Engine, error) {
	if probs := c.Credentials(); len(probs) > 0 {
		for _, p := range probs {
			fmt.Fprintf(cmd.ErrOrStderr(), "error: %s\n", p)
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "note: plan --offline shows the first build from cluster.yaml alone, without credentials")
		return nil, &exitError{code: 1}
	}
	var infra reconcile.Infra
	switch c.Provider {
	case spec.ProviderProxmox:
		p, err := proxmox.New(c, os.DirFS(dir), slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, err
		}
		infra = p
	case spec.ProviderOpenStack:
		p, err := openstack.New(c, os.DirFS(dir), slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, err
		}
		infra = p
	default:
		return nil, &exitError{code: 1, msg: fmt.Sprintf("no provider for %q", c.Provider)}
	}
	plugins, err := cliPlugins(cmd, dir)
	if err != nil {
		return nil, err
	}
	local := state.Local{Dir: dir}
	return &reconcile.Engine{Cluster: c, Warnings: warnings, State: local, Journal: local, Key: dir, Infra: infra, Progress: cmd.OutOrStdout(),
		Plugins: plugins}, nil
}

// cliPlugins are the plugins the commands run for a cluster directory;
// argocd.kubeconfig is a path relative to it (or absolute) on this host,
// as the Python tool reads it. (The agent reads that file from the
// cluster's secrets directory only: a pull request's files are anyone's
// to write.)
func cliPlugins(cmd *cobra.Command, dir string) ([]reconcile.Plugin, error) {
	// Rancher's and the chart repositories' certificates are checked
	// against the system's roots ($SSL_CERT_FILE and $SSL_CERT_DIR replace
	// them, as Go reads them) and --plugins-ca-file. A latest gateway is
	// asked of the GitHub API check reads the releases from.
	var roots *x509.CertPool
	if f := cmd.Flag(pluginsCAFlag); f != nil && f.Value.String() != "" {
		var err error
		if roots, err = caPool(f.Value.String()); err != nil {
			return nil, &exitError{code: 1, msg: "--" + pluginsCAFlag + ": " + err.Error()}
		}
	}
	return []reconcile.Plugin{argocd.NewOnHost(dir), rancher.New(rancher.Options{RootCAs: roots}),
		charts.New(charts.Options{RootCAs: roots, GitHubAPI: os.Getenv(envGitHubAPI)})}, nil
}

func newConverge() *cobra.Command {
	var (
		dir               string
		yes, dryRun, wait bool
		reboot            bool
		output            string
		drainTimeout      time.Duration
	)
	cmd := &cobra.Command{
		Use:     "converge [-C DIR] [--yes] [--dry-run] [--wait]",
		Aliases: []string{"sync", "apply"},
		Short:   "Make the cluster match cluster.yaml",
		Long: "Converge observes the cluster, plans, and runs exactly the steps of that plan,\n" +
			"in order: the plan `taloscluster plan` shows. A plan with refusals changes\n" +
			"nothing. Before the first step that deletes a machine it asks on a terminal;\n" +
			"without a terminal it refuses such a plan unless --yes is given. --dry-run is plan.\n" +
			"One converge or destroy of a cluster runs at a time: another one fails at once\n" +
			"naming the run that holds the cluster, or waits for it with --wait.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, warnings, err := loadClusterQuiet(dir, cmd.ErrOrStderr(), output)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			e, err := engineFor(cmd, dir, c, nil)
			if err != nil {
				return err
			}
			e.Reboot = reboot
			if dryRun {
				return printPlan(cmd, e, output)
			}
			if !yes {
				e.Approve = func(p *plan.Plan) error { return approveDestructive(cmd, p) }
			}
			e.Holder, e.WaitLock, e.DrainTimeout = "taloscluster converge", wait, drainTimeout
			if err := e.Converge(cmd.Context()); err != nil {
				if s := reconcile.Settle(err); s.Outcome == reconcile.Waiting {
					// Not a failure: something that changes on its own
					// stopped the run; running converge again goes on.
					return &exitError{code: 3, msg: err.Error() + "\nrun converge again later; it resumes where this run stopped"}
				}
				if errors.Is(err, reconcile.ErrRefused) || errors.Is(err, reconcile.ErrUnreachable) || errors.Is(err, reconcile.ErrIncomplete) {
					return &exitError{code: 1, msg: err.Error()}
				}
				return err
			}
			return nil
		},
	}
	dirFlag(cmd, &dir)
	pluginsCAFlagOn(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "run a plan that deletes machines without asking")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the plan and change nothing")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for a converge or destroy of the cluster that is running to finish instead of failing")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "plan output format with --dry-run: text, json or markdown")
	cmd.Flags().DurationVar(&drainTimeout, "drain-timeout", kube.DrainTimeout, "how long the drain of a node that is removed or restarted may be held up by PodDisruptionBudgets before converge stops and exits 3 (waiting)")
	cmd.Flags().BoolVar(&reboot, "reboot", false, "restart the machines whose resize waits for a restart (restart pending): control planes one at a time through the health gate, then workers in batches of rollout.max_unavailable")
	return cmd
}

// approveDestructive lets a plan run when it deletes no machine; otherwise
// it shows the plan and asks on a terminal, and refuses without one.
func approveDestructive(cmd *cobra.Command, p *plan.Plan) error {
	var doomed []string
	for _, ch := range p.Changes {
		if ch.Destructive() {
			doomed = append(doomed, ch.Resource.Name)
		}
	}
	for _, r := range plan.Removals(p) {
		if !slices.Contains(doomed, r) {
			doomed = append(doomed, r)
		}
	}
	if len(doomed) == 0 {
		return nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		return &exitError{code: 1, msg: fmt.Sprintf("the plan deletes %s and there is no terminal to ask: nothing was changed (use --yes to allow it)", strings.Join(doomed, ", "))}
	}
	if err := report.Text(cmd.ErrOrStderr(), p); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "This deletes %s. Type yes to go on: ", strings.Join(doomed, ", "))
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return &exitError{code: 130, msg: "no answer: nothing was changed"}
	}
	if strings.TrimSpace(line) != "yes" {
		return &exitError{code: 1, msg: "not confirmed: nothing was changed"}
	}
	return nil
}

// printPlan renders an engine's plan; refusals make the exit code 1.
func printPlan(cmd *cobra.Command, e *reconcile.Engine, output string) error {
	render, err := renderer(output)
	if err != nil {
		return err
	}
	p, err := e.Plan(cmd.Context())
	if err != nil {
		return err
	}
	if err := render(cmd.OutOrStdout(), p); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	if len(p.Refusals) > 0 || p.Incomplete {
		return &exitError{code: 1}
	}
	return nil
}
