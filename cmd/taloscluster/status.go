package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/kube"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/reconcile/talos"
)

// clusterStatus is what status reports; its YAML and JSON forms are
// stable.
type clusterStatus struct {
	Cluster   string          `json:"cluster" yaml:"cluster"`
	Provider  string          `json:"provider" yaml:"provider"`
	Endpoints statusEndpoints `json:"endpoints" yaml:"endpoints"`
	Machines  []statusMachine `json:"machines" yaml:"machines"`
	Nodes     []statusNode    `json:"nodes" yaml:"nodes"`
	// Plugins are the configured plugins against cluster.yaml, as check
	// reports them.
	Plugins []statusPlugin `json:"plugins" yaml:"plugins"`
	// Problems are what could not be read; the rest is still reported.
	Problems []string `json:"problems" yaml:"problems"`
	// failed are the problems that make status exit 1: a read that
	// failed, as opposed to a part that does not exist yet.
	failed []string
}

// fail records a read that failed.
func (st *clusterStatus) fail(msg string) {
	st.Problems = append(st.Problems, msg)
	st.failed = append(st.failed, msg)
}

type statusEndpoints struct {
	KubernetesAPI string   `json:"kubernetes_api" yaml:"kubernetes_api"`
	Talos         []string `json:"talos" yaml:"talos"`
}

type statusMachine struct {
	Name      string   `json:"name" yaml:"name"`
	Role      string   `json:"role" yaml:"role"`
	Running   bool     `json:"running" yaml:"running"`
	Addresses []string `json:"addresses" yaml:"addresses"`
	// RestartPending lists the provider changes that wait for the
	// machine's restart (converge --reboot).
	RestartPending []string `json:"restart_pending,omitempty" yaml:"restart_pending,omitempty"`
}

type statusPlugin struct {
	Name string `json:"name" yaml:"name"`
	// State is in_sync, drift, deferred or unknown; Reason says why a
	// plugin is deferred or unknown.
	State  string   `json:"state" yaml:"state"`
	Reason string   `json:"reason,omitempty" yaml:"reason,omitempty"`
	Steps  []string `json:"steps,omitempty" yaml:"steps,omitempty"`
}

type statusNode struct {
	Name       string `json:"name" yaml:"name"`
	Ready      bool   `json:"ready" yaml:"ready"`
	Cordoned   bool   `json:"cordoned" yaml:"cordoned"`
	Kubernetes string `json:"kubernetes" yaml:"kubernetes"`
	Talos      string `json:"talos" yaml:"talos"`
}

func newStatus() *cobra.Command {
	var dir, output string
	cmd := &cobra.Command{
		Use:   "status [-C DIR] [-o text|yaml|json]",
		Short: "Show provider resources, endpoints and nodes",
		Long: "Status shows the provider's machines, the endpoints, the Kubernetes nodes and,\n" +
			"when plugins are configured, each plugin against cluster.yaml (as check does).\n" +
			"It prints what it could read and exits 1 when a part could not be read (the\n" +
			"provider API unreachable or refusing the credentials, the Kubernetes API not\n" +
			"answering), with the reason on stderr.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "yaml" && output != "json" {
				return &usageError{fmt.Errorf("unknown output format %q: use text, yaml or json", output)}
			}
			c, err := loadCluster(dir, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			e, err := engineFor(cmd, dir, c, nil)
			if err != nil {
				return err
			}
			st := gatherStatus(cmd.Context(), e, dir)
			gatherPlugins(cmd.Context(), e, &st)
			out := cmd.OutOrStdout()
			switch output {
			case "yaml":
				err = yaml.NewEncoder(out).Encode(st)
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(st)
			default:
				printStatus(cmd, st)
			}
			if err != nil {
				return err
			}
			if len(st.failed) > 0 {
				return &exitError{code: 1, msg: "reading the cluster: " + strings.Join(st.failed, "; ")}
			}
			return nil
		},
	}
	dirFlag(cmd, &dir)
	pluginsCAFlagOn(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, yaml or json")
	return cmd
}

// gatherStatus reads what it can; each part that fails is a problem, not
// the end of the report.
func gatherStatus(ctx context.Context, e *reconcile.Engine, dir string) clusterStatus {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st := clusterStatus{Cluster: e.Cluster.Name, Provider: string(e.Cluster.Provider), Machines: []statusMachine{}, Nodes: []statusNode{}, Problems: []string{}}
	inv, err := e.Infra.Observe(ctx)
	invRead := err == nil
	if err != nil {
		st.fail(err.Error())
		st.Endpoints.KubernetesAPI = reconcile.ConfiguredAPI(e.Cluster).Kubeconfig()
		if e.Cluster.Provider == spec.ProviderOpenStack {
			st.Endpoints.KubernetesAPI = "unknown: the provider could not be read"
		}
	} else {
		api := reconcile.EndpointOf(e.Cluster, e.Infra, inv)
		st.Endpoints.KubernetesAPI = api.Kubeconfig()
		if api.Public != "" {
			st.Endpoints.KubernetesAPI += " (the VIP " + api.URL + " behind it)"
		}
		for _, m := range inv.Machines() {
			sm := statusMachine{Name: m.Hostname, Role: string(m.Role), Running: m.Running, Addresses: []string{}, RestartPending: m.RestartPending}
			for _, a := range m.Addresses {
				sm.Addresses = append(sm.Addresses, a.String())
			}
			st.Machines = append(st.Machines, sm)
			if m.Role == "controlplane" && len(m.Addresses) > 0 {
				st.Endpoints.Talos = append(st.Endpoints.Talos, m.Addresses[0].String())
			}
		}
	}
	versions := map[string]string{}
	tcData, err := boundedfile.Read(filepath.Join(dir, reconcile.TalosconfigFile), boundedfile.Small)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		st.fail(err.Error())
	}
	if err == nil {
		if tc, err := talos.New(ctx, tcData); err == nil {
			for _, m := range st.Machines {
				if len(m.Addresses) > 0 {
					if v, err := tc.Version(ctx, m.Addresses[0]); err == nil {
						versions[m.Name] = v
					}
				}
			}
			tc.Close()
		}
	}
	kcData, err := boundedfile.Read(filepath.Join(dir, reconcile.KubeconfigFile), boundedfile.Small)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		st.fail(err.Error())
		return st
	}
	if err != nil {
		kubeconfigMissing(ctx, e, &st, invRead, versions)
		return st
	}
	kc, err := kube.New(kcData)
	if err != nil {
		st.fail(err.Error())
		return st
	}
	nodes, err := kc.Nodes(ctx)
	if err != nil {
		st.fail(err.Error())
		return st
	}
	for _, n := range nodes {
		st.Nodes = append(st.Nodes, statusNode{Name: n.Name, Ready: n.Ready, Cordoned: n.Unschedulable, Kubernetes: n.KubeletVersion, Talos: versions[n.Name]})
	}
	return st
}

// gatherPlugins reads the configured plugins' standing, as check does,
// with a full observation of the cluster: only when a plugin is
// configured. A plugin whose objects could not be read is a read that
// failed.
func gatherPlugins(ctx context.Context, e *reconcile.Engine, st *clusterStatus) {
	st.Plugins = []statusPlugin{}
	if !slices.ContainsFunc(e.Plugins, func(pl reconcile.Plugin) bool { return pl.Configured(e.Cluster) }) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	e.Progress = io.Discard
	obs, err := e.Observe(ctx)
	if err != nil {
		st.fail("the plugins could not be read: " + err.Error())
		return
	}
	for _, pc := range e.PluginChecks(ctx, obs) {
		st.Plugins = append(st.Plugins, statusPlugin{Name: pc.Name, State: pc.State, Reason: pc.Reason, Steps: pc.Steps})
		if pc.State == reconcile.PluginUnknown {
			st.fail("the " + pc.Name + " plugin: " + pc.Reason)
		}
	}
}

// kubeconfigMissing says what a missing kubeconfig means. Where nothing
// of the cluster exists yet, converge has not built it. On an existing
// cluster (its machines and identity exist and it was bootstrapped) the
// file was lost: status says how converge recovers it and reads the nodes
// with the kubeconfig a control plane serves (kept in memory, as plan
// does). What could not be read is never taken for a cluster that was not
// bootstrapped.
func kubeconfigMissing(ctx context.Context, e *reconcile.Engine, st *clusterStatus, invRead bool, versions map[string]string) {
	switch {
	case !invRead:
		st.Problems = append(st.Problems, "no kubeconfig, and whether the cluster exists could not be read (see the provider's error)")
		return
	case len(st.Machines) == 0:
		st.Problems = append(st.Problems, "no kubeconfig: the cluster has not been bootstrapped by converge yet")
		return
	}
	obs, err := e.Observe(ctx)
	if err != nil {
		st.fail("no kubeconfig, and the cluster could not be read to tell why: " + err.Error())
		return
	}
	if !obs.State.Secrets {
		st.Problems = append(st.Problems, fmt.Sprintf("no kubeconfig, and %s is missing although %d of the cluster's machines exist: restore %s from backup; converge refuses the cluster until then",
			reconcile.TalosSecretsFile, len(st.Machines), reconcile.TalosSecretsFile))
		return
	}
	running, known := obs.Running()
	switch {
	case !known:
		st.fail("no kubeconfig, and whether the cluster was bootstrapped could not be read: " + firstUnknown(obs))
		return
	case !running:
		st.Problems = append(st.Problems, "no kubeconfig: the machines exist but no control plane's etcd was bootstrapped yet; converge bootstraps etcd and then writes the kubeconfig")
		return
	}
	st.Problems = append(st.Problems, fmt.Sprintf("the kubeconfig is missing from the cluster's state, but the cluster exists (its machines and identity exist and it was bootstrapped): converge recovers it (plan shows \"recover kubeconfig\"): a control plane serves the admin kubeconfig to the cluster identity (%s) and converge writes it back with mode 0600",
		reconcile.TalosSecretsFile))
	if obs.Kube.Unknown != "" {
		st.fail(obs.Kube.Unknown)
		return
	}
	for _, n := range obs.Kube.Nodes {
		v := versions[n.Name]
		if v == "" {
			v = obs.Nodes[n.Name].Version
		}
		st.Nodes = append(st.Nodes, statusNode{Name: n.Name, Ready: n.Ready, Cordoned: n.Unschedulable, Kubernetes: n.KubeletVersion, Talos: v})
	}
}

// firstUnknown says why etcd, the Kubernetes API or the nodes could not be
// read.
func firstUnknown(obs *reconcile.Observation) string {
	for _, r := range []string{obs.Etcd.Unknown, obs.Kube.Unknown, obs.TalosUnknown} {
		if r != "" {
			return r
		}
	}
	return "unknown"
}

func printStatus(cmd *cobra.Command, st clusterStatus) {
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Cluster %s (%s)\n", st.Cluster, st.Provider)
	fmt.Fprintf(out, "  Kubernetes API: %s\n", st.Endpoints.KubernetesAPI)
	fmt.Fprintf(out, "  Talos API:      %s\n\n", strings.Join(st.Endpoints.Talos, ", "))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tROLE\tPOWER\tADDRESS")
	for _, m := range st.Machines {
		power := "stopped"
		if m.Running {
			power = "running"
		}
		if len(m.RestartPending) > 0 {
			power += ", restart pending (" + strings.Join(m.RestartPending, ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, m.Role, power, strings.Join(m.Addresses, ","))
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tKUBERNETES\tTALOS")
	for _, n := range st.Nodes {
		status := "NotReady"
		if n.Ready {
			status = "Ready"
		}
		if n.Cordoned {
			status += ",SchedulingDisabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, status, n.Kubernetes, n.Talos)
	}
	tw.Flush()
	if len(st.Plugins) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PLUGIN\tSTATE")
		for _, p := range st.Plugins {
			state := strings.ReplaceAll(p.State, "_", " ")
			switch {
			case p.State == reconcile.PluginDrift:
				state += fmt.Sprintf(" (%d to make: converge or plan shows them)", len(p.Steps))
			case p.Reason != "":
				state += ": " + p.Reason
			}
			fmt.Fprintf(tw, "%s\t%s\n", p.Name, state)
		}
		tw.Flush()
	}
	for _, p := range st.Problems {
		if !slices.Contains(st.failed, p) {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", p)
		}
	}
}
