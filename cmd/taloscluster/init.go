package main

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

//go:embed scaffold/*.yaml
var scaffold embed.FS

// ignored are the files init keeps out of Git: credentials, the cluster
// identity and the derived client configs.
var ignored = []string{"secrets.yaml", "talossecrets.yaml", "talosconfig", "kubeconfig", ".metal/", ".taloscluster.lock", ".taloscluster-journal.json"}

var clusterNameRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$`)

func newInit() *cobra.Command {
	var (
		dir                       string
		proxmox, openstack, metal bool
	)
	cmd := &cobra.Command{
		Use:   "init [--proxmox|--openstack] [--metal] [-C DIR] [NAME]",
		Short: "Scaffold cluster.yaml, secrets.yaml and .gitignore",
		Long: "Init writes a commented cluster.yaml, a secrets.yaml with CHANGE-ME\n" +
			"placeholders (mode 0600) and a .gitignore for the secret and derived\n" +
			"files. It never overwrites an existing file. NAME defaults to mycluster.",
		Args: argsUsage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if proxmox && openstack {
				return &usageError{errors.New("--proxmox and --openstack cannot be combined")}
			}
			if metal && !proxmox && !openstack {
				return &usageError{errors.New("--metal needs a VM provider flag: --proxmox or --openstack")}
			}
			name := "mycluster"
			if len(args) == 1 {
				name = args[0]
			}
			if !clusterNameRE.MatchString(name) {
				return &usageError{fmt.Errorf("cluster name %q must be lowercase letters, digits and '-'", name)}
			}
			provider := "openstack"
			if proxmox {
				provider = "proxmox"
			}
			return scaffoldDir(cmd, dir, name, provider, metal)
		},
	}
	dirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&proxmox, "proxmox", false, "scaffold a Proxmox cluster")
	cmd.Flags().BoolVar(&openstack, "openstack", false, "scaffold an OpenStack cluster (the default)")
	cmd.Flags().BoolVar(&metal, "metal", false, "add an example bare-metal group")
	return cmd
}

func scaffoldDir(cmd *cobra.Command, dir, name, provider string, metal bool) error {
	out := cmd.OutOrStdout()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	body := template("scaffold/"+provider+".yaml", name)
	if metal {
		body = strings.Replace(body, "  version: v1.13.8\n", "  version: v1.13.8\n  kubespan: true         # metal machines may sit on another L2\n", 1)
		body += template("scaffold/metal.yaml", name)
	}
	body += template("scaffold/plugins.yaml", name)
	files := []struct {
		name string
		body string
		mode os.FileMode
	}{
		{"cluster.yaml", body, 0o644},
		{"secrets.yaml", template("scaffold/secrets-"+provider+".yaml", name), 0o600},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		created, err := writeNew(path, []byte(f.body), f.mode)
		if err != nil {
			return err
		}
		if created {
			fmt.Fprintf(out, "wrote %s\n", path)
		} else {
			fmt.Fprintf(out, "kept existing %s\n", path)
		}
	}
	added, err := ensureIgnored(filepath.Join(dir, ".gitignore"))
	if err != nil {
		return err
	}
	if len(added) > 0 {
		fmt.Fprintf(out, "added to %s: %s\n", filepath.Join(dir, ".gitignore"), strings.Join(added, " "))
	}
	fmt.Fprintf(out, "next: fill in secrets.yaml and review cluster.yaml, then run taloscluster validate -C %s\n", dir)
	return nil
}

func template(path, name string) string {
	data, err := fs.ReadFile(scaffold, path)
	if err != nil {
		panic(err) // embedded at build time
	}
	return strings.ReplaceAll(string(data), "{{NAME}}", name)
}

// writeNew creates path with data unless it exists; it reports whether it
// wrote the file. The write is atomic, so a failure never leaves a
// half-written file behind.
func writeNew(path string, data []byte, mode os.FileMode) (bool, error) {
	err := state.CreateFile(path, data, mode)
	switch {
	case errors.Is(err, fs.ErrExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// ensureIgnored appends the missing ignore entries to a .gitignore.
func ensureIgnored(path string) ([]string, error) {
	data, err := boundedfile.Read(path, boundedfile.Small)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	have := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		have[strings.TrimSpace(line)] = true
	}
	var missing []string
	for _, e := range ignored {
		if !have[e] && !have["/"+e] {
			missing = append(missing, e)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("updating %s: %w", path, err)
	}
	prefix := ""
	if len(data) > 0 && !strings.HasSuffix(string(data), "\n") {
		prefix = "\n"
	}
	if len(data) == 0 {
		prefix = "# taloscluster: credentials, the cluster identity and derived client files\n"
	}
	if _, err := f.WriteString(prefix + strings.Join(missing, "\n") + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("updating %s: %w", path, err)
	}
	return missing, f.Close()
}
