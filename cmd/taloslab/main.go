// Command taloslab runs the simulated datacenter the demo and the
// end-to-end tests use: a Proxmox VE API and an OpenStack cloud whose VMs
// and servers boot into simulated Talos nodes, an Image Factory, a
// Kubernetes API per cluster and a GitHub emulator (the forge), all on
// loopback addresses.
//
//	taloslab up --dir DIR [--subnet 127.N.0.0/24[,127.M.0.0/24]] [flags]
//
// writes DIR/ca.pem, DIR/lab.env (shell exports of every endpoint and
// credential), DIR/agent.yaml and DIR/examples/<name>/ cluster directories
// that point at the lab, then serves until interrupted.
//
// lab.env exports two Proxmox API tokens. PROXMOX_TOKEN_ID and
// PROXMOX_TOKEN_SECRET (root@pam!taloslab, what the examples use) hold
// every privilege. PROXMOX_RESTRICTED_TOKEN_ID and
// PROXMOX_RESTRICTED_TOKEN_SECRET are taloslab@pve!restricted, a
// privilege-separated token whose user holds PVEAdmin on / and which itself
// holds PVEAuditor on / and PVEVMUser on /vms (all propagated): on every
// path it holds Sys.Audit, Datastore.Audit, Pool.Audit, SDN.Audit,
// Mapping.Audit, VM.Audit and VM.GuestAgent.Audit, so plan works with it;
// on /vms and below also VM.PowerMgmt, VM.Console, VM.Backup,
// VM.Config.CDROM, VM.Config.Cloudinit and VM.GuestAgent.FileRead/
// FileWrite/FileSystemMgmt. It lacks, on every path, VM.Allocate, VM.Clone,
// VM.Config.Disk/CPU/Memory/Network/HWType/Options, VM.Migrate,
// VM.Snapshot, Datastore.Allocate/AllocateSpace/AllocateTemplate,
// Pool.Allocate, SDN.Use and every Sys.* privilege but Sys.Audit: a
// converge that creates anything, or a destroy, is refused with it before
// the first change, naming what is missing. Use it in a cluster's
// secrets.yaml (proxmox.token_id, proxmox.token_secret).
//
// The lab's three Proxmox bridges, vmbr0 (examples/proxmox), vmbr1 (the
// GitOps cluster in the forge) and vmbr2 (examples/proxmox-legacy), each
// get a /24 network inside 127.0.0.0/8: nodes lease hosts .100 and up (Talos API on port 50000), a cluster's API
// VIP is host .5 (Kubernetes API on 6443). Without --subnet, taloslab up
// takes the first free blocks among 127.42.0.0/24, 127.43.0.0/24, then
// 127.100.0.0/24 and up: a block is free when no other taloslab holds its
// lock (an flock on $TMPDIR/taloslab-127.N.0.0-24.lock, held while the lab
// runs) and every one of those addresses can be listened on. Several labs
// can so run on one machine. --subnet names the networks instead (one to
// three, for vmbr0, vmbr1 then vmbr2); a named network that is not free is an
// error. lab.env exports the networks as TALOSLAB_SUBNETS (comma-separated,
// in bridge order, as --subnet takes them), TALOSLAB_VMBR0_NET,
// TALOSLAB_VMBR1_NET and TALOSLAB_VMBR2_NET.
//
// The OpenStack cloud (Keystone v3, Nova, Neutron, Glance under one HTTPS
// origin, TLS from ca.pem) is exported with the standard OpenStack client
// variables, so the openstack CLI, gophercloud and Terraform work after
// sourcing lab.env: OS_AUTH_URL (Keystone v3, https://127.0.0.1:PORT/
// identity/v3), OS_AUTH_TYPE=v3applicationcredential,
// OS_APPLICATION_CREDENTIAL_ID, OS_APPLICATION_CREDENTIAL_SECRET,
// OS_REGION_NAME (RegionOne), OS_INTERFACE=public,
// OS_IDENTITY_API_VERSION=3 and OS_CACERT (DIR/ca.pem). Its servers boot
// into Talos nodes at their first fixed address, configured from their
// user data. TALOSLAB_OPENSTACK_EXTERNAL_NET (ext-net) is its external
// network, on TALOSLAB_OPENSTACK_EXTERNAL_CIDR: a floating IP associated
// with a server forwards ports 6443, 50000, 80 and 443 to the server's
// fixed address (real Neutron forwards every port; see lab/FIDELITY.md).
// examples/openstack (cluster "cloud": three gp.medium control planes,
// two gp.large workers, zone nova, floating IPs from ext-net) has its
// cluster network on TALOSLAB_OPENSTACK_EXAMPLE_NET, and the forge's
// clusters/openstack ("gitops-cloud", its secret in the agent's secrets
// directory) on TALOSLAB_OPENSTACK_GITOPS_NET; the provider creates those
// subnets. These three /24 blocks are reserved like the bridges' (the
// first free among 127.44.0.0/24, 127.45.0.0/24, 127.46.0.0/24, then
// 127.21 to 127.49, then the bridges' candidates).
//
// When the environment names the real kube-apiserver, kube-controller-
// manager and etcd (TALOSLAB_KUBE_APISERVER, TALOSLAB_KUBE_CONTROLLER_MANAGER,
// TALOSLAB_ETCD, as .ci/kube-binaries.sh prints them), up also starts the
// Argo CD side: a real kube-apiserver on 127.0.0.1 with Argo CD's argocd
// namespace and its Application and AppProject kinds (served with schemas
// that keep every field, not Argo CD's controllers: nothing syncs), its
// admin kubeconfig in DIR/argocd.kubeconfig, exported as
// TALOSLAB_ARGOCD_KUBECONFIG (empty without the binaries).
//
// up also serves the lab's Rancher: an emulator of Rancher's v3 API (the
// calls of the rancher plugin) over TLS from the lab's CA, exported as
// TALOSLAB_RANCHER_URL with an API token in TALOSLAB_RANCHER_TOKEN; its
// OpenLDAP users are alice, bob, carol and dave. lab.env exports
// SSL_CERT_FILE as the lab's CA, so Go programs (the CLI's plugins) trust
// it. The control API's rancher-fail and rancher-hang faults act on one
// "METHOD /v3/path" of it.
//
// up also serves the lab's chart repository (Helm's repository format, over
// TLS from the lab's CA) at TALOSLAB_CHARTS_URL: small charts named like
// those the charts plugin knows, in several versions each, and the Gateway
// API's standard-install.yaml per release. The control API's charts-fail,
// charts-hang and charts-ok faults act on one path of it.
//
// examples/proxmox-legacy is a cluster already running in the lab exactly
// as the Python taloscluster would have left it (lab.WriteLegacyCluster):
// its VMs, firewalls and boot ISO on Proxmox, its nodes bootstrapped, and
// talossecrets.yaml, talosconfig and kubeconfig beside its cluster.yaml.
// `taloscluster plan` there shows only the differences docs/migration.md
// lists.
//
// A node whose kubelet stops without Talos shutting it down (a VM powered
// off or deleted) turns NotReady after --node-monitor-grace-period,
// kube-controller-manager's default of 50 s unless set; a cluster's
// Kubernetes API refuses connections while no control plane holds its VIP.
//
// taloslab up exits 1 with a message naming the address when an address
// the lab needs cannot be listened on: before it starts, or later when a
// node's Talos API or a cluster's Kubernetes API cannot bind.
//
// The control API (TALOSLAB_CONTROL_URL/lab/v1/) injects faults with POST
// /lab/v1/faults and a JSON {kind, op, n, status, warnings, millis, addr,
// cluster}. Beside the lab's kinds (proxmox-fail, proxmox-task-warnings,
// proxmox-latency, proxmox-hang, proxmox-reset, proxmox-lost-reply,
// talos-never-boot, talos-reset-fails, talos-stuck-member, talos-fail,
// talos-hang, talos-reset, talos-lost-reply, kube-fail, kube-hang, kube-reset, kube-lost-reply,
// openstack-fail, openstack-latency, openstack-hang; see lab.Fault) it
// takes the forge's. The OpenStack ones take op as an operation of the
// emulator (compute.server.create, network.port.create,
// image.image.upload, identity.token.create), a service meaning every
// operation of it (compute, or network.*), or *:
//
//	{"kind":"openstack-fail","op":"compute.server.create","n":1,"status":503}
//	{"kind":"openstack-latency","op":"network.*","millis":2000}
//	{"kind":"openstack-hang","op":"image","n":1}
//
// The forge's:
//
//	{"kind":"github-fail","op":"comments.create","n":2,"status":502}
//	{"kind":"github-fail","op":"releases.list","status":502}
//	{"kind":"github-secondary-limit","op":"statuses.create","n":1,"millis":3000}
//	{"kind":"github-rate-limit","millis":60000}
//	{"kind":"github-latency","op":"pulls.*","millis":2000}
//	{"kind":"github-hang","op":"pulls.get","n":1}
//	{"kind":"github-reset","op":"git.upload-pack","n":1}
//	{"kind":"github-lost-reply","op":"comments.create","n":1}
//
// github-fail: the next n requests whose operation matches op answer
// status (default 500) without effect; github-secondary-limit: the next n
// API requests matching op (default "*") answer 403 with Retry-After of
// millis (default 1000) rounded up to seconds, as GitHub's secondary rate
// limit does; github-rate-limit: every user's primary rate limit is used
// up for millis (default 60000); github-latency: requests matching op take
// millis longer (0 removes it); github-hang: the next n requests matching
// op are held without an answer until the client gives up; github-reset:
// the next n requests matching op get their connection reset (TCP RST)
// without effect; github-lost-reply: the next n requests matching op take
// effect and then get their connection reset instead of an answer. op is
// a forge operation (pulls.get, comments.create, statuses.create,
// releases.list, git.upload-pack, ...; GET /lab/v1/ lists them as
// github_operations) or a path.Match pattern of them.
// GET /lab/v1/log includes the forge's requests (source "github").
//
// Beside org/clusters the forge holds the upstream repositories
// siderolabs/talos and kubernetes/kubernetes, whose releases (GET
// /repos/{owner}/{repo}/releases, .../releases/latest and
// .../releases/tags/{tag}, operations releases.list, releases.latest and
// releases.get) are the fixed history of forge.SeedUpstreamReleases:
// Talos v1.11.0 to v1.13.8 and the prerelease v1.14.0-beta.0, Kubernetes
// v1.34.0 to v1.37.2 and the prerelease v1.38.0-alpha.1, every patch of
// each minor line. Any lab token (TALOSLAB_GITHUB_TOKEN) reads them;
// lab.env names them in a comment.
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
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	"github.com/taloscluster/taloscluster/lab/forge"
	"github.com/taloscluster/taloscluster/lab/kube"
	"github.com/taloscluster/taloscluster/lab/kube/realkube"
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
		fmt.Fprintln(stderr, "usage: taloslab up --dir DIR [--subnet 127.N.0.0/24[,127.M.0.0/24]] [flags]\n       taloslab demo-gitops --dir DIR")
		return errors.New("unknown command; commands: up, demo-gitops")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return up(ctx, args[1:], stdout, stderr)
}

// up runs the lab until ctx ends, or until an address the lab needs cannot
// be listened on, which is an error.
func up(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("taloslab up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for ca.pem, lab.env, agent.yaml and examples/ (required)")
	var subnets subnetList
	fs.Var(&subnets, "subnet", "the /24 network of vmbr0, then of vmbr1 and vmbr2 (repeat the flag or separate with commas); default: the first free 127.N.0.0/24 blocks")
	boot := fs.Duration("boot-delay", 300*time.Millisecond, "time from VM start until the node's Talos API answers")
	install := fs.Duration("install-delay", 700*time.Millisecond, "extra time of a first boot that installs Talos")
	reboot := fs.Duration("reboot-delay", 500*time.Millisecond, "time a rebooting node is down")
	ready := fs.Duration("ready-delay", 500*time.Millisecond, "time a registered Kubernetes node stays NotReady")
	grace := fs.Duration("node-monitor-grace-period", kube.DefaultNodeMonitorGracePeriod,
		"time after a node's kubelet stopped until its Kubernetes node turns NotReady (Unknown), as kube-controller-manager's flag of that name")
	verbose := fs.Bool("v", false, "log every lab event to stderr")
	withArgo := fs.Bool("argocd", true, "start the Argo CD side when the environment names the real kube-apiserver and etcd")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	nets, err := reserve(subnets, candidateBlocks(), log)
	if err != nil {
		return err
	}
	defer nets.release()
	if err := nets.reserveOpenStack(openstackCandidates(), log); err != nil {
		return err
	}
	l, err := lab.Start(ctx, lab.Options{Bridges: nets.nets, OpenStackExternalCIDR: nets.openstack["ext-net"], TaskDuration: -1, BootDelay: *boot, InstallDelay: *install,
		RebootDelay: *reboot, ReadyDelay: *ready, NodeMonitorGracePeriod: *grace, Logger: log, OnFatal: func(err error) { cancel(err) }})
	if err != nil {
		return err
	}
	defer l.Close()

	gitops, err := startForge(*dir, l, nets, log)
	if err != nil {
		return err
	}
	defer gitops.close()

	ranch, err := startRancher(l)
	if err != nil {
		return err
	}
	defer ranch.close()
	charts, err := startCharts(l)
	if err != nil {
		return err
	}
	defer charts.close()

	var argo *realkube.ControlPlane
	if *withArgo {
		if argo, err = startArgoCD(ctx, *dir, log); err != nil {
			return err
		}
	}
	if argo != nil {
		defer argo.Stop()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening for the control API: %w", err)
	}
	control := &http.Server{Handler: newControlAPI(l, gitops.forge, ranch, charts), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = control.Serve(ln) }()
	defer control.Close()
	controlURL := "http://" + ln.Addr().String()

	if err := writeLabFiles(ctx, *dir, l, controlURL, gitops, nets, argo != nil, ranch, charts); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "taloslab is up: Proxmox %s, OpenStack %s, Image Factory %s, control API %s/lab/v1/\n", l.PVEURL, l.OpenStackURL, l.FactoryURL, controlURL)
	fmt.Fprintf(stdout, "networks: %s\n", describeNets(nets))
	fmt.Fprintf(stdout, "source %s for the endpoints; cluster directories are in %s\n", filepath.Join(*dir, "lab.env"), filepath.Join(*dir, "examples"))
	<-ctx.Done()
	var lerr *lab.ListenError
	if errors.As(context.Cause(ctx), &lerr) {
		return &listenError{addr: lerr.Addr.String(), what: lerr.What, err: lerr.Err.Error()}
	}
	fmt.Fprintln(stdout, "taloslab is shutting down")
	return nil
}

// writeLabFiles writes the CA, the example clusters (building the legacy
// one in the lab) and, last, lab.env, so
// a script can wait for lab.env to know the lab is ready.
func writeLabFiles(ctx context.Context, dir string, l *lab.Lab, controlURL string, g *gitopsLab, nets *reservation, argo bool, ranch *rancherLab, charts *chartsLab) error {
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
	if err := l.WriteLegacyCluster(ctx, filepath.Join(dir, "examples", "proxmox-legacy"), lab.Cluster{Name: "legacy", Workers: 1, Bridge: "vmbr2"}); err != nil {
		return err
	}
	if err := l.WriteOpenStackCluster(filepath.Join(dir, "examples", "openstack"),
		lab.OpenStackCluster{Name: "cloud", Workers: 2, CIDR: nets.openstack["examples/openstack"]}); err != nil {
		return err
	}
	env := fmt.Sprintf(`# taloslab endpoints and credentials (loopback only)
export PROXMOX_URL=%q
export PROXMOX_TOKEN_ID=%q
export PROXMOX_TOKEN_SECRET=%q
# A restricted token: it reads everything a plan reads and powers VMs, but
# lacks every allocation and configuration privilege (VM.Allocate,
# VM.Config.Disk/CPU/Memory/Network/HWType/Options, Datastore.Allocate/
# AllocateSpace/AllocateTemplate, Pool.Allocate, SDN.Use, Sys.Modify) on
# every path, so converge and destroy with it are refused before any change.
export PROXMOX_RESTRICTED_TOKEN_ID=%q
export PROXMOX_RESTRICTED_TOKEN_SECRET=%q
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
export TALOSLAB_SUBNETS=%q
export TALOSLAB_VMBR0_NET=%q
export TALOSLAB_VMBR1_NET=%q
export TALOSLAB_VMBR2_NET=%q
# The forge at TALOSLAB_GITHUB_API also serves the releases of %s
# (latest %s) and %s (latest %s), as GitHub's releases API.
# The OpenStack cloud, for the openstack CLI, gophercloud and Terraform:
# Keystone v3 with an application credential, TLS from the lab's CA.
export OS_AUTH_URL=%q
export OS_AUTH_TYPE=v3applicationcredential
export OS_APPLICATION_CREDENTIAL_ID=%q
export OS_APPLICATION_CREDENTIAL_SECRET=%q
export OS_REGION_NAME=%q
export OS_INTERFACE=public
export OS_IDENTITY_API_VERSION=3
export OS_CACERT=%q
# Its external network (floating IPs forward ports 6443, 50000, 80 and
# 443), and the cluster networks of examples/openstack and of the forge's
# clusters/openstack.
export TALOSLAB_OPENSTACK_EXTERNAL_NET=%q
export TALOSLAB_OPENSTACK_EXTERNAL_CIDR=%q
export TALOSLAB_OPENSTACK_EXAMPLE_NET=%q
export TALOSLAB_OPENSTACK_GITOPS_NET=%q
%s%s%s`, l.PVEURL, l.TokenID, l.TokenSecret, l.RestrictedTokenID, l.RestrictedTokenSecret, l.FactoryURL, controlURL, ca, filepath.Join(dir, "examples"),
		g.apiURL, g.userToken, g.repo, g.gitURL, g.agentConfig, g.agentURL,
		joinNets(nets.list()), nets.nets["vmbr0"].String(), nets.nets["vmbr1"].String(), nets.nets["vmbr2"].String(),
		forge.TalosRepo, forge.TalosLatest, forge.KubernetesRepo, forge.KubernetesLatest,
		l.OpenStackURL, l.OpenStackCredential.ID, l.OpenStackCredential.Secret, l.OpenStackRegion, ca,
		l.OpenStackExternalNet, l.OpenStackExternalCIDR.String(), nets.openstack["examples/openstack"].String(), nets.openstack["clusters/openstack"].String(),
		argoCDEnv(dir, argo), rancherEnv(ranch, ca), chartsEnv(charts))
	return state.WriteFile(filepath.Join(dir, "lab.env"), []byte(env), 0o600)
}

func joinNets(ps []netip.Prefix) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

// argoCDKubeconfig is the file, in the lab's directory, of the admin
// kubeconfig of the Argo CD side.
const argoCDKubeconfig = "argocd.kubeconfig"

// startArgoCD starts the Argo CD side of the lab when the environment
// names the real kube-apiserver and etcd (.ci/kube-binaries.sh): a control
// plane with Argo CD's namespace and kinds, its admin kubeconfig in
// DIR/argocd.kubeconfig. Without them it starts nothing and says so.
func startArgoCD(ctx context.Context, dir string, log *slog.Logger) (*realkube.ControlPlane, error) {
	bins, ok, err := realkube.FromEnv()
	if err != nil {
		return nil, err
	}
	if !ok {
		log.Warn("the Argo CD side is not started: set " + realkube.EnvAPIServer + ", " + realkube.EnvController + " and " + realkube.EnvEtcd +
			` (eval "$(bash .ci/kube-binaries.sh)")`)
		return nil, nil
	}
	cpDir := filepath.Join(dir, "argocd")
	if err := os.MkdirAll(cpDir, 0o700); err != nil {
		return nil, err
	}
	cp, err := realkube.Launch(cpDir, bins, realkube.Options{})
	if err != nil {
		if cp != nil {
			cp.Stop()
			return nil, fmt.Errorf("starting the Argo CD side: %w\n%s", err, cp.Logs(20))
		}
		return nil, fmt.Errorf("starting the Argo CD side: %w", err)
	}
	if err := realkube.InstallArgoCDKinds(ctx, cp.Admin); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("installing Argo CD's kinds: %w", err)
	}
	if err := state.WriteFile(filepath.Join(dir, argoCDKubeconfig), cp.AdminKubeconfig(), 0o600); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// argoCDEnv is lab.env's part on the Argo CD side.
func argoCDEnv(dir string, started bool) string {
	if !started {
		return "# No Argo CD side: the real kube-apiserver and etcd were not named (.ci/kube-binaries.sh).\nexport TALOSLAB_ARGOCD_KUBECONFIG=\"\"\n"
	}
	return fmt.Sprintf("# The Argo CD side: a real kube-apiserver with Argo CD's namespace and kinds\n# (Application, AppProject); its admin kubeconfig.\nexport TALOSLAB_ARGOCD_KUBECONFIG=%q\n",
		filepath.Join(dir, argoCDKubeconfig))
}
