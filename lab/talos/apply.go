package talos

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// Talos 1.13 apply-config answers.
const (
	detailsLive   = "Applied configuration without a reboot"
	detailsReboot = "Applied configuration with a reboot"
	detailsStaged = "Staged configuration to be applied after the next reboot"
)

// validationMode is the runtime mode configs are validated for: a cloud
// platform (nocloud, OpenStack) that neither runs in a container nor needs
// install instructions.
type validationMode struct{}

func (validationMode) String() string        { return "cloud" }
func (validationMode) RequiresInstall() bool { return false }
func (validationMode) InContainer() bool     { return false }

// ApplyConfiguration replaces the node's machine config. In maintenance mode
// any client may apply; the node installs the config and reboots into it.
// Configured, a Talos 1.13 node applies the change live when it can, with a
// reboot otherwise (mode AUTO), refuses it when it cannot be applied live
// (NO_REBOOT, TRY), or keeps it for the next boot (STAGED). A Talos 1.14
// node applies every change live and has no REBOOT mode. Like machined, a
// node takes one apply at a time: another one arriving meanwhile (the call
// lasts ApplyDelay) is refused.
func (machineServer) ApplyConfiguration(ctx context.Context, req *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	c := callOf(ctx)
	if err := c.lock(); err != nil {
		return nil, err
	}

	w, n := c.w, c.node

	// machined: applyConfigMu.TryLock.
	if n.applying {
		c.unlock()

		return nil, status.Error(codes.FailedPrecondition, "another apply configuration is already in progress")
	}

	resp, err := w.applyConfiguration(c, n, req)

	if w.opts.ApplyDelay <= 0 {
		c.unlock()

		return resp, err
	}

	// The apply holds the node's apply lock until it answers.
	n.applying = true
	gen := n.gen

	c.unlock()

	time.Sleep(w.opts.ApplyDelay)

	w.mu.Lock()
	if n.gen == gen {
		n.applying = false
	}
	w.mu.Unlock()

	return resp, err
}

// applyConfiguration is ApplyConfiguration past machined's apply lock.
// Called with w.mu held.
func (w *World) applyConfiguration(c *call, n *node, req *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	v114 := n.talos114()

	// Talos 1.14 dropped the flag: no apply reboots a configured node.
	if !v114 && n.applyRebooting {
		return nil, status.Error(codes.FailedPrecondition, "configuration was already applied and node is rebooting, cannot apply more configuration changes until next reboot")
	}

	maintenance := n.mode == ModeMaintenance

	if !maintenance && !c.roles.Includes(role.Admin) {
		return nil, errNotAuthorized
	}

	cfg, err := configloader.NewFromBytes(req.GetData())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if !maintenance && cfg.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}

	mode := req.GetMode()

	if v114 && !maintenance && mode == machine.ApplyConfigurationRequest_REBOOT {
		return nil, status.Error(codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
	}

	warnings, err := cfg.Validate(validationMode{})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if maintenance && mode == machine.ApplyConfigurationRequest_REBOOT {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	var reason string

	// Talos 1.14 has no CanApplyImmediate: every change is applied live.
	if !maintenance && !v114 {
		if reason, err = rebootReason(n.cfg, cfg); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}

	details, suffix := detailsReboot, ""

	switch mode {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if reason != "" {
			return nil, status.Error(codes.InvalidArgument, reason)
		}

		details = detailsLive
	case machine.ApplyConfigurationRequest_STAGED:
		details = detailsStaged
	case machine.ApplyConfigurationRequest_AUTO:
		if reason != "" {
			mode = machine.ApplyConfigurationRequest_REBOOT
			suffix = ": " + reason
		} else {
			mode = machine.ApplyConfigurationRequest_NO_REBOOT
			details = detailsLive
		}
	case machine.ApplyConfigurationRequest_REBOOT:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "incorrect mode '%s' specified for the apply config call", mode)
	}

	if req.GetDryRun() {
		diff, err := configDiff(n.cfg, cfg)
		if err != nil {
			return nil, fmt.Errorf("failed to generate diff: %w", err)
		}

		return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
			Mode:        mode,
			ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\n%s", details, diff),
		}}}, nil
	}

	if mode != machine.ApplyConfigurationRequest_TRY {
		n.tryGen++
	}

	switch {
	case maintenance:
		// The node leaves maintenance mode: it installs the config and
		// boots into it.
		n.install(cfg)
		n.applyRebooting = true
		w.later(n, func() { w.reboot(n, w.opts.InstallDelay) })
	case mode == machine.ApplyConfigurationRequest_TRY:
		w.applyTry(n, cfg, req.GetTryModeTimeout().AsDuration())

		details += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", tryTimeout(req.GetTryModeTimeout().AsDuration()))
	case mode == machine.ApplyConfigurationRequest_NO_REBOOT:
		n.persisted = cfg
		n.persistentConfig = setConfig(n.persistentConfig, cfg)
		w.applyLive(n, cfg)
	case mode == machine.ApplyConfigurationRequest_STAGED:
		n.persisted = cfg
		n.persistentConfig = setConfig(n.persistentConfig, cfg)
	case mode == machine.ApplyConfigurationRequest_REBOOT:
		n.persisted = cfg
		n.persistentConfig = setConfig(n.persistentConfig, cfg)
		n.applyRebooting = true

		if n.faults.neverReboot {
			w.log.Info("apply reboot never happens", "node", n.addr)
		} else {
			w.later(n, func() { w.reboot(n, 0) })
		}
	}

	w.log.Info("config applied", "node", n.addr, "mode", mode.String(), "maintenance", maintenance)

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Mode:        mode,
		Warnings:    warnings,
		ModeDetails: details + suffix,
	}}}, nil
}

func tryTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return constants.ConfigTryTimeout
	}

	return d
}

// applyLive makes cfg the running config. Called with w.mu held.
func (w *World) applyLive(n *node, cfg config.Provider) {
	restart := kubeletChanged(n.cfg, cfg)

	n.cfg = cfg
	n.activeConfig = setConfig(n.activeConfig, cfg)

	if cl := w.clusterFor(cfg); cl != n.cluster {
		n.cluster = cl
	}

	if restart {
		w.restartKubelet(n)
	}

	w.settle(n.cluster)
}

// kubeletChanged reports whether moving from the running config cur to
// next changes .machine.kubelet, from which Talos renders the kubelet's
// spec (image, arguments, mounts, configuration).
func kubeletChanged(cur, next config.Provider) bool {
	if cur == nil || next == nil || cur.RawV1Alpha1() == nil || next.RawV1Alpha1() == nil {
		return false
	}

	a, b := cur.RawV1Alpha1().MachineConfig, next.RawV1Alpha1().MachineConfig
	if a == nil || b == nil {
		return a != b
	}

	return !reflect.DeepEqual(a.MachineKubelet, b.MachineKubelet)
}

// restartKubelet restarts n's kubelet after a change of its spec, as
// Talos's KubeletServiceController does
// (internal/app/machined/pkg/controllers/k8s/kubelet_service.go: when the
// KubeletSpec changes it stops the running kubelet service and starts it
// again). For KubeletRestartDelay the service is not running and the
// kubelet posts nothing; then it runs again and registers what the new
// config says (its version among it). A kubelet that a sequence stopped
// stays stopped. Called with w.mu held.
func (w *World) restartKubelet(n *node) {
	if n.kubeletStopped || !n.runningReady() {
		return
	}

	n.kubeletRestarts++
	n.kubeletRestarting = true
	restart, gen := n.kubeletRestarts, n.gen

	w.log.Info("kubelet restarting", "node", n.addr)

	time.AfterFunc(w.opts.KubeletRestartDelay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()

		if w.closed || n.gen != gen || n.kubeletRestarts != restart || w.nodes[n.addr] != n {
			return
		}

		n.kubeletRestarting = false
		w.settle(n.cluster)
	})
}

// applyTry runs cfg until the try timeout, then goes back to the persisted
// config unless another apply came first. Called with w.mu held.
func (w *World) applyTry(n *node, cfg config.Provider, timeout time.Duration) {
	n.tryGen++
	try, gen := n.tryGen, n.gen

	w.applyLive(n, cfg)

	time.AfterFunc(tryTimeout(timeout), func() {
		w.mu.Lock()
		defer w.mu.Unlock()

		if w.closed || n.gen != gen || n.tryGen != try || n.persisted == nil {
			return
		}

		w.log.Info("try config rolled back", "node", n.addr)
		w.applyLive(n, n.persisted)
	})
}

// rebootReason returns why moving from the running config cur to next needs
// a reboot, or "" when it applies live, as Talos 1.13's CanApplyImmediate
// decides: only the v1alpha1 documents are compared, after copying the parts
// that apply immediately (.debug, .cluster and most of .machine, including
// .machine.install, which the next upgrade uses) from the running config.
func rebootReason(cur, next config.Provider) (string, error) {
	if cur == nil || cur.RawV1Alpha1() == nil || next.RawV1Alpha1() == nil {
		return "", nil
	}

	old := cur.RawV1Alpha1()
	probe := next.RawV1Alpha1().DeepCopy()

	keepLiveParts(probe, old)

	if reflect.DeepEqual(old, probe) {
		return "", nil
	}

	diff, err := diffConfigs(container.NewV1Alpha1(old), container.NewV1Alpha1(probe))
	if err != nil {
		return "", fmt.Errorf("error calculating diff: %w", err)
	}

	return fmt.Sprintf("this config change can't be applied in immediate mode\ndiff:\n%s", diff), nil
}

// keepLiveParts copies the parts of src that can change live into dst, so
// that what still differs afterwards needs a reboot.
func keepLiveParts(dst, src *v1alpha1.Config) {
	dst.ConfigDebug = src.ConfigDebug
	dst.ClusterConfig = src.ClusterConfig

	d, s := dst.MachineConfig, src.MachineConfig
	if d == nil || s == nil {
		return
	}

	d.MachineCA = s.MachineCA
	d.MachineAcceptedCAs = s.MachineAcceptedCAs
	//lint:ignore SA1019 the deprecated field is still part of the v1alpha1 document
	d.MachineTime = s.MachineTime
	d.MachineCertSANs = s.MachineCertSANs
	d.MachineInstall = s.MachineInstall
	//lint:ignore SA1019 the deprecated field is still part of the v1alpha1 document
	d.MachineNetwork = s.MachineNetwork
	d.MachineSysfs = s.MachineSysfs
	d.MachineSysctls = s.MachineSysctls
	d.MachineLogging = s.MachineLogging
	d.MachineControlPlane = s.MachineControlPlane
	d.MachineKubelet = s.MachineKubelet
	d.MachineKernel = s.MachineKernel
	//lint:ignore SA1019 the deprecated field is still part of the v1alpha1 document
	d.MachineRegistries = s.MachineRegistries
	d.MachinePods = s.MachinePods
	d.MachineSeccompProfiles = s.MachineSeccompProfiles
	d.MachineNodeAnnotations = s.MachineNodeAnnotations
	d.MachineNodeLabels = s.MachineNodeLabels
	d.MachineNodeTaints = s.MachineNodeTaints

	if d.MachineFeatures != nil && s.MachineFeatures != nil {
		d.MachineFeatures.KubernetesTalosAPIAccessConfig = s.MachineFeatures.KubernetesTalosAPIAccessConfig
		d.MachineFeatures.KubePrismSupport = s.MachineFeatures.KubePrismSupport
		d.MachineFeatures.HostDNSSupport = s.MachineFeatures.HostDNSSupport
		d.MachineFeatures.ImageCacheSupport = s.MachineFeatures.ImageCacheSupport
		d.MachineFeatures.FeatureNodeAddressSortAlgorithm = s.MachineFeatures.FeatureNodeAddressSortAlgorithm
	}
}

// configDiff is the dry-run diff from the running config (none in
// maintenance mode) to next.
func configDiff(cur, next config.Provider) (string, error) {
	var old config.Encoder = cur
	if cur == nil {
		empty, err := container.New()
		if err != nil {
			return "", err
		}

		old = empty
	}

	diff, err := diffConfigs(old, next)
	if err != nil {
		return "", err
	}

	if diff == "" {
		diff = "No changes."
	}

	return "Config diff:\n\n" + diff, nil
}

// diffConfigs is a unified diff of two configs' YAML without comments.
func diffConfigs(a, b config.Encoder) (string, error) {
	at, err := a.EncodeString(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return "", fmt.Errorf("encoding a config: %w", err)
	}

	bt, err := b.EncodeString(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return "", fmt.Errorf("encoding a config: %w", err)
	}

	if at == bt {
		return "", nil
	}

	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:        difflib.SplitLines(at),
		B:        difflib.SplitLines(bt),
		FromFile: "a",
		ToFile:   "b",
		Context:  3,
	})
}
