package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/check"
	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
	"github.com/taloscluster/taloscluster/report"
)

// Environment of the check command.
const (
	envGitHubAPI   = "TALOSCLUSTER_GITHUB_API"
	envGitHubToken = "GITHUB_TOKEN"
)

// checkTimeout bounds a whole check: the release listings (each page
// bounded by check.DefaultCallTimeout) and the observation of the cluster.
const checkTimeout = 5 * time.Minute

func newCheck() *cobra.Command {
	var dir, output, api, caFile string
	cmd := &cobra.Command{
		Use:   "check [-C DIR] [-o text|json] [--github-api URL] [--ca-file FILE]",
		Short: "Compare the pins with upstream releases and the running cluster",
		Long: "Check compares talos.version and kubernetes.version with the GitHub releases of\n" +
			"siderolabs/talos and kubernetes/kubernetes (the newest patch of the pinned minor,\n" +
			"the newest release the other pin allows, the newest overall), and with the running\n" +
			"cluster: each node's Talos version, kubelet version and installer image, and\n" +
			"cordoned nodes. It lists the config warnings. It only reads. Before the cluster\n" +
			"exists it checks the versions and warnings, and says so.\n\n" +
			"Exit 1 when something needs attention: an update to take (a newer patch of the\n" +
			"pinned minor, or a newer minor the pinned Talos runs), drift, a cordon, or a part\n" +
			"that could not be read (incomplete, with the reason). Exit 0 otherwise.\n\n" +
			"The API URL comes from --github-api, else $" + envGitHubAPI + ", else\n" +
			check.DefaultGitHubAPI + "; $" + envGitHubToken + ", when set, authenticates the requests.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return &usageError{fmt.Errorf("unknown output format %q: use text or json", output)}
			}
			if !cmd.Flags().Changed("github-api") {
				if env := os.Getenv(envGitHubAPI); env != "" {
					api = env
				}
			}
			c, warnings, err := spec.Load(dir, spec.Options{TolerateMissingIncludes: true})
			if err != nil {
				return problems(err, cmd.ErrOrStderr())
			}
			token := strings.TrimSpace(os.Getenv(envGitHubToken))
			redact := checkRedactor(dir, c, token)
			hc, err := httpClient(caFile)
			if err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			src, err := check.NewGitHub(check.GitHubOptions{APIURL: api, Token: token, HTTPClient: hc})
			if err != nil {
				return &usageError{err}
			}
			opts := check.Options{Cluster: c, Warnings: warnings, Releases: src, Redact: redact.String}
			if err := checkObserver(cmd, dir, c, &opts); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), checkTimeout)
			defer cancel()
			r, err := check.Run(ctx, opts)
			if err != nil {
				return err
			}
			if cmd.Context().Err() != nil {
				return cmd.Context().Err()
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				err = check.WriteJSON(out, r)
			} else {
				err = check.WriteText(out, r)
			}
			if err != nil {
				return fmt.Errorf("writing the report: %w", err)
			}
			switch {
			case r.Incomplete:
				return &exitError{code: 1, msg: "the check is incomplete: " + strings.Join(r.IncompleteReasons, "; ")}
			case r.NeedsAttention:
				return &exitError{code: 1}
			}
			return nil
		},
	}
	dirFlag(cmd, &dir)
	pluginsCAFlagOn(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringVar(&api, "github-api", check.DefaultGitHubAPI, "GitHub REST API URL the releases are read from (default $"+envGitHubAPI+" when set)")
	cmd.Flags().StringVar(&caFile, "ca-file", "", "extra CA bundle (PEM) to trust for the GitHub API")
	return cmd
}

// checkObserver decides how check reads the running cluster: with the
// engine's read-only observation, or not at all when the cluster cannot
// exist yet (no identity and no credentials to ask the provider with).
func checkObserver(cmd *cobra.Command, dir string, c *spec.Cluster, opts *check.Options) error {
	_, err := os.Stat(filepath.Join(dir, reconcile.TalosSecretsFile))
	identity := err == nil
	if probs := c.Credentials(); len(probs) > 0 {
		var msgs []string
		for _, p := range probs {
			msgs = append(msgs, p.String())
		}
		reason := "no usable provider credentials: " + strings.Join(msgs, "; ")
		if !identity {
			opts.NotObserved = "the cluster does not exist yet (no " + reconcile.TalosSecretsFile + "), and there are " + reason + ": only versions and warnings were checked"
			return nil
		}
		opts.Observe = func(context.Context) (*reconcile.Observation, error) { return nil, errors.New(reason) }
		return nil
	}
	e, err := engineFor(cmd, dir, c, nil)
	if err != nil {
		return err
	}
	e.Progress = io.Discard
	opts.Observe = e.Observe
	opts.Plugins = e.PluginChecks
	return nil
}

// checkRedactor knows the secrets check could meet: the GitHub token and
// the values of the cluster's secrets.yaml.
func checkRedactor(dir string, c *spec.Cluster, token string) *report.Redactor {
	r := &report.Redactor{}
	r.Add(token)
	if c.Proxmox != nil {
		r.Add(c.Proxmox.TokenSecret)
	}
	if c.OpenStack != nil {
		r.Add(c.OpenStack.CredentialSecret)
	}
	if c.Tailscale != nil {
		r.Add(c.Tailscale.AuthKey)
	}
	if data, err := boundedfile.Read(filepath.Join(dir, spec.SecretsFile), boundedfile.Small); err == nil {
		var v any
		if yaml.Unmarshal(data, &v) == nil {
			r.Add(leaves(v)...)
		}
	}
	return r
}
