package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/spf13/cobra"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func newConfig() *cobra.Command {
	var (
		dir         string
		showSecrets bool
	)
	cmd := &cobra.Command{
		Use:   "config [-C DIR] [--show-secrets] [NODE...]",
		Short: "Print the Talos machine config each node would get",
		Long: "Config prints, as YAML documents, the machine config each named node (default:\n" +
			"every node) would get from cluster.yaml: its firewall, VIP, tailscale and patches.\n" +
			"Keys, tokens and certificates are redacted unless --show-secrets is given.\n" +
			"Without a talossecrets.yaml it uses a throwaway identity and says so.",
		Args: argsUsage(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, names []string) error {
			stderr := cmd.ErrOrStderr()
			c, err := loadCluster(dir, stderr)
			if err != nil {
				return err
			}
			bundle, throwaway, err := clusterSecrets(dir, c)
			if err != nil {
				return err
			}
			if throwaway {
				fmt.Fprintf(stderr, "note: no %s in %s yet; using a throwaway identity, so keys, tokens and certificates differ from the real cluster's\n", reconcile.TalosSecretsFile, dir)
			}
			machines, err := selectMachines(machineconfig.Machines(c), names)
			if err != nil {
				return err
			}
			in := machineconfig.Input{Cluster: c, Secrets: bundle}
			in.Endpoint, in.VIP = reconcile.Endpoint(c)
			if c.Provider == spec.ProviderOpenStack {
				fmt.Fprintf(stderr, "note: on OpenStack the API endpoint %s is a placeholder: the configs name the fixed address of the %s-kubeapi port, which the network phase allocates\n", in.Endpoint, c.Name)
			}
			out := cmd.OutOrStdout()
			for i, m := range machines {
				cfg, err := machineconfig.Generate(in, m)
				if err != nil {
					return err
				}
				if !showSecrets {
					cfg = machineconfig.Redacted(cfg)
				}
				data, err := machineconfig.Encode(cfg)
				if err != nil {
					return fmt.Errorf("encoding the config of %s: %w", m.Hostname, err)
				}
				if i > 0 {
					fmt.Fprintln(out, "---")
				}
				fmt.Fprintf(out, "# %s (%s, pool %s)\n", m.Hostname, m.Role(), m.Pool.Name)
				if _, err := out.Write(data); err != nil {
					return fmt.Errorf("writing the config of %s: %w", m.Hostname, err)
				}
			}
			return nil
		},
	}
	dirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&showSecrets, "show-secrets", false, "print keys, tokens and certificates instead of redacting them")
	return cmd
}

// clusterSecrets loads talossecrets.yaml, or mints a throwaway bundle when
// the cluster has none yet (reported by the second result). Nothing is
// written.
func clusterSecrets(dir string, c *spec.Cluster) (*secrets.Bundle, bool, error) {
	b, err := machineconfig.LoadSecrets(filepath.Join(dir, reconcile.TalosSecretsFile))
	if err == nil {
		return b, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	b, err = machineconfig.NewSecrets(c.Talos.Version)
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}

func selectMachines(all []machineconfig.Machine, names []string) ([]machineconfig.Machine, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []machineconfig.Machine
	var unknown []string
	for _, n := range names {
		i := slices.IndexFunc(all, func(m machineconfig.Machine) bool { return m.Hostname == n })
		if i < 0 {
			unknown = append(unknown, n)
			continue
		}
		out = append(out, all[i])
	}
	if len(unknown) > 0 {
		known := make([]string, len(all))
		for i, m := range all {
			known[i] = m.Hostname
		}
		return nil, &exitError{code: 1, msg: fmt.Sprintf("no node named %s in this cluster; nodes are: %s", strings.Join(unknown, ", "), strings.Join(known, ", "))}
	}
	return out, nil
}
