// Command taloscluster plans and converges Talos Linux Kubernetes clusters
// on OpenStack and Proxmox from a cluster directory (cluster.yaml).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries an exit code; its message has already been printed
// when msg is empty.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// usageError marks bad command-line arguments (exit 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the CLI and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "error: %s\n", ee.msg)
		}
		return ee.code
	}
	var ue *usageError
	if errors.As(err, &ue) || isFlagError(err) {
		fmt.Fprintf(stderr, "error: %s\n", err)
		return 2
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "error: interrupted\n")
		return 130
	}
	fmt.Fprintf(stderr, "error: %s\n", err)
	return 1
}

// flagError is how cobra's flag parsing failures reach run.
type flagError struct{ error }

func isFlagError(err error) bool {
	var fe flagError
	return errors.As(err, &fe)
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "taloscluster",
		Short:         "Plan and converge Talos Linux Kubernetes clusters from cluster.yaml",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return flagError{err} })
	root.AddCommand(
		newValidate(),
		newInit(),
		newConfig(),
		newPlan(),
		newConverge(),
		newStatus(),
		newCheck(),
		newAgent(),
		newDestroy(),
	)
	return root
}

// pluginsCAFlag names the flag of an extra CA bundle for the plugins.
const pluginsCAFlag = "plugins-ca-file"

// pluginsCAFlagOn adds --plugins-ca-file to a command that runs the
// plugins.
func pluginsCAFlagOn(cmd *cobra.Command) {
	cmd.Flags().String(pluginsCAFlag, "", "extra CA bundle (PEM) the plugins trust for Rancher and the chart repositories, besides the system's roots")
}

// dirFlag adds the -C/--dir flag every cluster command takes.
func dirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVarP(dir, "dir", "C", ".", "cluster directory")
}

// exactArgs wraps cobra's argument checks as usage errors.
func argsUsage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &usageError{err}
		}
		return nil
	}
}
