// Command taloslab runs the simulated datacenter the demo and the
// end-to-end tests use: a Proxmox VE API whose VMs boot into simulated
// Talos nodes, an Image Factory, and a Kubernetes API per cluster, all on
// loopback addresses.
//
//	taloslab up --dir DIR
//
// writes DIR/ca.pem, DIR/lab.env (shell exports of every endpoint and
// credential) and DIR/examples/<name>/ cluster directories that point at
// the lab, then serves until interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "error: %s\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "demo-gitops" {
		return demoGitOps(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "up" {
		fmt.Fprintln(stderr, "usage: taloslab up --dir DIR [flags]\n       taloslab demo-gitops --dir DIR")
		return errors.New("unknown command; commands: up, demo-gitops")
	}
	fs := flag.NewFlagSet("taloslab up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for ca.pem, lab.env and examples/ (required)")
	boot := fs.Duration("boot-delay", 300*time.Millisecond, "time from VM start until the node's Talos API answers")
	install := fs.Duration("install-delay", 700*time.Millisecond, "extra time of a first boot that installs Talos")
	reboot := fs.Duration("reboot-delay", 500*time.Millisecond, "time a rebooting node is down")
	ready := fs.Duration("ready-delay", 500*time.Millisecond, "time a registered Kubernetes node stays NotReady")
	verbose := fs.Bool("v", false, "log every lab event to stderr")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := lab.Start(ctx, lab.Options{TaskDuration: -1, BootDelay: *boot, InstallDelay: *install, RebootDelay: *reboot, ReadyDelay: *ready, Logger: log})
	if err != nil {
		return err
	}
	defer l.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening for the control API: %w", err)
	}
	control := &http.Server{Handler: l.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = control.Serve(ln) }()
	defer control.Close()
	controlURL := "http://" + ln.Addr().String()

	gitops, err := startForge(*dir, l, log)
	if err != nil {
		return err
	}
	defer gitops.close()
	if err := writeLabFiles(*dir, l, controlURL, gitops); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "taloslab is up: Proxmox %s, Image Factory %s, control API %s/lab/v1/\n", l.PVEURL, l.FactoryURL, controlURL)
	fmt.Fprintf(stdout, "source %s for the endpoints; cluster directories are in %s\n", filepath.Join(*dir, "lab.env"), filepath.Join(*dir, "examples"))
	<-ctx.Done()
	fmt.Fprintln(stdout, "taloslab is shutting down")
	return nil
}

// writeLabFiles writes the CA, the example clusters and, last, lab.env, so
// a script can wait for lab.env to know the lab is ready.
func writeLabFiles(dir string, l *lab.Lab, controlURL string, g *gitopsLab) error {
	if err := os.MkdirAll(filepath.Join(dir, "examples"), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := state.WriteFile(ca, l.CA.PEM(), 0o644); err != nil {
		return err
	}
	if err := l.WriteCluster(filepath.Join(dir, "examples", "proxmox"), lab.Cluster{Name: "demo", Workers: 2, Bridge: "vmbr0"}); err != nil {
		return err
	}
	env := fmt.Sprintf(`# taloslab endpoints and credentials (loopback only)
export PROXMOX_URL=%q
export PROXMOX_TOKEN_ID=%q
export PROXMOX_TOKEN_SECRET=%q
export TALOSLAB_FACTORY_URL=%q
export TALOSLAB_CONTROL_URL=%q
export TALOSLAB_CA=%q
export TALOSLAB_EXAMPLES=%q
export TALOSLAB_GITHUB_API=%q
export TALOSLAB_GITHUB_TOKEN=%q
export TALOSLAB_REPO=%q
export TALOSLAB_GIT_URL=%q
export TALOSLAB_AGENT_CONFIG=%q
export TALOSLAB_AGENT_URL=%q
`, l.PVEURL, l.TokenID, l.TokenSecret, l.FactoryURL, controlURL, ca, filepath.Join(dir, "examples"),
		g.apiURL, g.userToken, g.repo, g.gitURL, g.agentConfig, g.agentURL)
	return state.WriteFile(filepath.Join(dir, "lab.env"), []byte(env), 0o600)
}
