package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/taloscluster/taloscluster/providers/openstack"
	"github.com/taloscluster/taloscluster/providers/proxmox"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/report"
)

func newPlan() *cobra.Command {
	var (
		dir     string
		offline bool
		output  string
	)
	cmd := &cobra.Command{
		Use:   "plan [-C DIR] [--offline] [-o text|json|markdown]",
		Short: "Show what converge would change",
		Long: "Plan shows every change converge would make, and changes nothing: it only\n" +
			"reads from the provider and the cluster.\n\n" +
			"With --offline it asks no one and plans the first build of a cluster that\n" +
			"does not exist yet, from cluster.yaml alone: the same planner, with an\n" +
			"observation that found nothing.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			render, err := renderer(output)
			if err != nil {
				return err
			}
			c, warnings, err := loadClusterQuiet(dir, cmd.ErrOrStderr(), output)
			if err != nil {
				return err
			}
			if !offline {
				e, err := engineFor(cmd, dir, c, warnings)
				if err != nil {
					return err
				}
				return printPlan(cmd, e, output)
			}
			infra, err := offlineInfra(c)
			if err != nil {
				return err
			}
			plugins, err := cliPlugins(cmd, dir)
			if err != nil {
				return err
			}
			p, err := reconcile.OfflinePlan(c, warnings, infra, plugins...)
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
		},
	}
	dirFlag(cmd, &dir)
	pluginsCAFlagOn(cmd)
	cmd.Flags().BoolVar(&offline, "offline", false, "plan the first build from cluster.yaml alone, without asking any provider")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, json or markdown")
	return cmd
}

func renderer(format string) (func(io.Writer, *plan.Plan) error, error) {
	switch format {
	case "text", "":
		return report.Text, nil
	case "json":
		return report.JSON, nil
	case "markdown", "md":
		return func(w io.Writer, p *plan.Plan) error {
			_, err := io.WriteString(w, report.Markdown(p))
			return err
		}, nil
	}
	return nil, &usageError{fmt.Errorf("unknown output format %q: use text, json or markdown", format)}
}

// offlineInfra returns the provider of a cluster for planning without
// asking it anything.
func offlineInfra(c *spec.Cluster) (reconcile.Infra, error) {
	switch c.Provider {
	case spec.ProviderProxmox:
		return proxmox.Offline(c)
	case spec.ProviderOpenStack:
		return openstack.Offline(c)
	}
	return nil, fmt.Errorf("no provider for %q", c.Provider)
}
