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
	return c, problems(err, stderr)
}

// loadClusterQuiet loads a cluster directory for a command that carries the
// warnings in its own output (a plan); in text output they are printed there
// rather than on stderr.
func loadClusterQuiet(dir string, stderr io.Writer, _ string) (*spec.Cluster, []spec.Problem, error) {
	c, warnings, err := spec.Load(dir, spec.Options{})
	return c, warnings, problems(err, stderr)
}

// problems prints a load error's problems and turns it into exit code 1.
func problems(err error, stderr io.Writer) error {
	var se *spec.Error
	if errors.As(err, &se) {
		for _, p := range se.Problems {
			fmt.Fprintf(stderr, "error: %s\n", p)
		}
		return &exitError{code: 1}
	}
	return err
}

func displayDir(dir string) string {
	if dir == "." || dir == "" {
		return "cluster.yaml"
	}
	return dir + "/cluster.yaml"
}
