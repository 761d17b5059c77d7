package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func newValidate() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "validate [-C DIR]",
		Short: "Load and validate cluster.yaml offline",
		Long: "Validate reads cluster.yaml and its includes, checks every rule and prints\n" +
			"each warning and error. It needs no network and no credentials.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := loadCluster(dir, cmd.ErrOrStderr()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is valid\n", displayDir(dir))
			return nil
		},
	}
	dirFlag(cmd, &dir)
	return cmd
}

// loadCluster loads a cluster directory, printing warnings and, when it is
// invalid, every error; the returned error then carries exit code 1.
func loadCluster(dir string, stderr io.Writer) (*spec.Cluster, error) {
	c, warnings, err := spec.Load(dir, spec.Options{})
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	var se *spec.Error
	if errors.As(err, &se) {
		for _, p := range se.Problems {
			fmt.Fprintf(stderr, "error: %s\n", p)
		}
		return nil, &exitError{code: 1}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

func displayDir(dir string) string {
	if dir == "." || dir == "" {
		return "cluster.yaml"
	}
	return dir + "/cluster.yaml"
}
