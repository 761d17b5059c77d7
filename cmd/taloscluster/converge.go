package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// engineFor builds the engine of a cluster directory with its provider.
func engineFor(cmd *cobra.Command, dir string, c *spec.Cluster, warnings []spec.Problem) (*reconcile.Engine, error) {
	var infra reconcile.Infra
	switch c.Provider {
	case spec.ProviderProxmox:
		if probs := c.Credentials(); len(probs) > 0 {
			for _, p := range probs {
				fmt.Fprintf(cmd.ErrOrStderr(), "error: %s\n", p)
			}
			return nil, &exitError{code: 1}
		}
		p, err := proxmox.New(c, os.DirFS(dir), slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, err
		}
		infra = p
	default:
		return nil, &exitError{code: 1, msg: fmt.Sprintf("the %s provider is not implemented yet; plan --offline shows the first build", c.Provider)}
	}
	return &reconcile.Engine{Cluster: c, Warnings: warnings, State: state.Local{Dir: dir}, Key: dir, Infra: infra, Progress: cmd.OutOrStdout()}, nil
}

func newConverge() *cobra.Command {
	var (
		dir         string
		yes, dryRun bool
		output      string
	)
	cmd := &cobra.Command{
		Use:     "converge [-C DIR] [--yes] [--dry-run]",
		Aliases: []string{"sync", "apply"},
		Short:   "Make the cluster match cluster.yaml",
		Long: "Converge builds or changes the cluster phase by phase: validate, image, secrets,\n" +
			"network, machines, bootstrap, kubeconfig, health. Every refusal is found before\n" +
			"the first change. --dry-run is plan.",
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
			if dryRun {
				return printPlan(cmd, e, output)
			}
			_ = yes // nothing converge does yet deletes a machine; deletions will prompt without --yes
			if err := e.Converge(cmd.Context()); err != nil {
				if errors.Is(err, reconcile.ErrRefused) || errors.Is(err, reconcile.ErrUnreachable) {
					return &exitError{code: 1, msg: err.Error()}
				}
				return err
			}
			return nil
		},
	}
	dirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask before deleting machines")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the plan and change nothing")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "plan output format with --dry-run: text, json or markdown")
	return cmd
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
	if len(p.Refusals) > 0 {
		return &exitError{code: 1}
	}
	return nil
}
