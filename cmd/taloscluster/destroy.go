package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newDestroy() *cobra.Command {
	var (
		dir               string
		yes, dryRun, wait bool
		output            string
	)
	cmd := &cobra.Command{
		Use:   "destroy [-C DIR] [--yes] [--dry-run] [--wait]",
		Short: "Delete the cluster's machines, resources and local state",
		Long: "Destroy deletes every machine of the cluster with its disks, its config ISOs and\n" +
			"its resource pool, then kubeconfig, talosconfig and talossecrets.yaml. The shared\n" +
			"boot ISO is kept. It asks for the cluster's name unless --yes is given; without\n" +
			"a terminal to ask on and without --yes it stops (exit 130). While a converge or\n" +
			"destroy of the cluster runs, it fails at once naming that run, or waits with --wait.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCluster(dir, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			e, err := engineFor(cmd, dir, c, nil)
			if err != nil {
				return err
			}
			if dryRun {
				render, err := renderer(output)
				if err != nil {
					return err
				}
				p, err := e.PlanDestroy(cmd.Context())
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), p)
			}
			if !yes {
				if err := confirm(cmd, c.Name); err != nil {
					return err
				}
			}
			e.Holder, e.WaitLock = "taloscluster destroy", wait
			return e.Destroy(cmd.Context())
		},
	}
	dirFlag(cmd, &dir)
	pluginsCAFlagOn(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for the cluster's name")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be deleted and change nothing")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for a converge or destroy of the cluster that is running to finish instead of failing")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format with --dry-run: text, json or markdown")
	return cmd
}

// confirm asks for the cluster's name on a terminal.
func confirm(cmd *cobra.Command, name string) error {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		return &exitError{code: 130, msg: "destroy asks for the cluster's name on a terminal; there is none, so nothing was deleted (use --yes to skip the question)"}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "This deletes every machine of cluster %s and its identity. Type the cluster's name to go on: ", name)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return &exitError{code: 130, msg: "no answer: nothing was deleted"}
	}
	if strings.TrimSpace(line) != name {
		return &exitError{code: 1, msg: "the name does not match: nothing was deleted"}
	}
	return nil
}
