package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/labels"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func newValidate() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "validate [-C DIR]",
		Short: "Load and validate cluster.yaml offline",
		Long: "Validate reads cluster.yaml and its includes, checks every rule, then builds\n" +
			"the Talos machine config of every node and checks it as Talos would (node\n" +
			"labels from tags, config patches). It prints each warning and error. It\n" +
			"needs no network and no credentials, and writes nothing.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := loadClusterChecked(dir, cmd.ErrOrStderr()); err != nil {
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
// invalid, every error; the returned error then carries exit code 1. It
// does not build the machine configs (see loadClusterChecked), so that
// status and destroy work on a cluster whose patches have gone bad.
func loadCluster(dir string, stderr io.Writer) (*spec.Cluster, error) {
	c, warnings, err := spec.Load(dir, spec.Options{})
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	return c, problems(err, stderr)
}

// loadClusterChecked is loadCluster followed by checkMachineConfigs: what
// it accepts, converge can build machine configs for.
func loadClusterChecked(dir string, stderr io.Writer) (*spec.Cluster, error) {
	c, err := loadCluster(dir, stderr)
	if err != nil {
		return nil, err
	}
	if err := problems(checkClusterConfigs(c, localSecrets(dir)), stderr); err != nil {
		return nil, err
	}
	return c, nil
}

// loadClusterQuiet loads a cluster directory for a command that carries the
// warnings in its own output (a plan); in text output they are printed there
// rather than on stderr. Like validate, it refuses a cluster whose machine
// configs Talos would refuse.
func loadClusterQuiet(dir string, stderr io.Writer, _ string) (*spec.Cluster, []spec.Problem, error) {
	c, warnings, err := spec.Load(dir, spec.Options{})
	if err != nil {
		return c, warnings, problems(err, stderr)
	}
	if err := problems(checkClusterConfigs(c, localSecrets(dir)), stderr); err != nil {
		return nil, warnings, err
	}
	return c, warnings, nil
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

// localSecrets returns the cluster's talossecrets.yaml when it exists and
// reads, else nil (checkMachineConfigs then uses a throwaway identity).
// Nothing is written.
func localSecrets(dir string) *secrets.Bundle {
	b, err := machineconfig.LoadSecrets(filepath.Join(dir, reconcile.TalosSecretsFile))
	if err != nil {
		return nil
	}
	return b
}

// checkClusterConfigs is checkMachineConfigs as an error: a *spec.Error
// holding every problem, or nil. Call it after spec.Load or spec.LoadFS
// succeeded; bundle may be nil.
func checkClusterConfigs(c *spec.Cluster, bundle *secrets.Bundle) error {
	ps, err := checkMachineConfigs(c, bundle)
	if err != nil {
		return err
	}
	if len(ps) > 0 {
		return &spec.Error{Problems: ps}
	}
	return nil
}

// checkMachineConfigs builds the machine config of every node the way
// converge does (and of a first node of each empty pool, whose patches would
// otherwise wait for the pool to grow) and validates each with the Talos
// machinery. It returns one problem per bad tag or config patch, at the
// file and line where it was written, keyed like tags.team,
// workers.gpu.tags.x, talos.config_patches[0] or
// workers.gpu.config_patches[1]. A problem no user setting explains is keyed
// by the machine. bundle is the cluster identity; nil means a throwaway one.
// No secret value is echoed.
func checkMachineConfigs(c *spec.Cluster, bundle *secrets.Bundle) ([]spec.Problem, error) {
	if bundle == nil {
		b, err := throwawaySecrets(c.Talos.Version)
		if err != nil {
			return nil, err
		}
		bundle = b
	}
	chk := &configCheck{cluster: c, secrets: secretStrings(c, bundle)}
	clean := chk.checkLabels()
	in := machineconfig.Input{Cluster: clean, Secrets: bundle}
	in.Endpoint, in.VIP = reconcile.Endpoint(clean)
	chk.checkPatches(clean)

	for _, m := range configMachines(clean) {
		chk.add(chk.machine(in, m)...)
	}
	order := map[string]int{}
	for i, f := range c.Files {
		order[f] = i + 1
	}
	slices.SortStableFunc(chk.out, func(a, b spec.Problem) int {
		return cmp.Or(cmp.Compare(order[a.File], order[b.File]), cmp.Compare(a.Line, b.Line))
	})
	return chk.out, nil
}

// throwaway holds the identities minted to check configs with, one per
// Talos version: minting one takes a second or more (an RSA key), and a
// process such as the agent checks many times. They are never written.
var throwaway struct {
	sync.Mutex
	bundles map[string]*secrets.Bundle
}

// throwawaySecrets returns a throwaway cluster identity for talosVersion.
func throwawaySecrets(talosVersion string) (*secrets.Bundle, error) {
	throwaway.Lock()
	defer throwaway.Unlock()
	if b := throwaway.bundles[talosVersion]; b != nil {
		return b, nil
	}
	b, err := machineconfig.NewSecrets(talosVersion)
	if err != nil {
		return nil, err
	}
	if throwaway.bundles == nil {
		throwaway.bundles = map[string]*secrets.Bundle{}
	}
	throwaway.bundles[talosVersion] = b
	return b, nil
}

// configCheck collects the problems of one checkMachineConfigs call.
type configCheck struct {
	cluster *spec.Cluster
	// secrets are the values no message may show.
	secrets []string
	// badPatches are the patches that do not load, by key.
	badPatches map[string]bool
	// diagnosed records the failures already traced to their patches, by
	// pool and reasons: the machines of a pool mostly fail alike.
	diagnosed map[string]bool
	out       []spec.Problem
	seen      map[string]bool
}

// add records problems, once each.
func (k *configCheck) add(ps ...spec.Problem) {
	if k.seen == nil {
		k.seen = map[string]bool{}
	}
	for _, p := range ps {
		p.Message = k.redact(p.Message)
		id := p.Key + "\x00" + p.Message
		if k.seen[id] {
			continue
		}
		k.seen[id] = true
		k.out = append(k.out, p)
	}
}

// checkLabels checks the node labels every pool's machines get (the
// ncsa/* labels, cluster tags, pool tags) as Talos does, blaming the tag
// that sets a bad label. It returns a copy of the cluster without the bad
// tags, so that the machine configs are judged on everything else.
func (k *configCheck) checkLabels() *spec.Cluster {
	c := k.cluster
	bad := map[string]bool{}
	for _, p := range c.Pools() {
		nl := machineconfig.NodeLabels(c, p)
		for _, name := range slices.Sorted(maps.Keys(nl)) {
			key := ""
			switch {
			case hasKey(p.Tags, name):
				key = poolKey(p) + ".tags." + name
			case hasKey(c.Tags, name):
				key = "tags." + name
			default:
				continue // an engine label (ncsa/role, ncsa/pool)
			}
			if err := labels.ValidateQualifiedName(name); err != nil {
				bad[key] = true
				k.add(c.ProblemAt(key, fmt.Sprintf("%q is not a valid node label name (%s): use up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, optionally after a DNS subdomain prefix and '/'", name, err)))
			}
			if err := labels.ValidateLabelValue(nl[name]); err != nil {
				bad[key] = true
				k.add(c.ProblemAt(key, fmt.Sprintf("the node label value %q (the tag as written, stringified, spaces turned into '_') is not valid: use up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or nothing", nl[name])))
			}
		}
	}
	if len(bad) == 0 {
		return c
	}
	clean := *c
	clean.Tags = withoutBad(c.Tags, "tags.", bad)
	clean.ControlPlane.Tags = withoutBad(c.ControlPlane.Tags, poolKey(c.ControlPlane)+".tags.", bad)
	clean.Workers = slices.Clone(c.Workers)
	for i, p := range clean.Workers {
		clean.Workers[i].Tags = withoutBad(p.Tags, poolKey(p)+".tags.", bad)
	}
	return &clean
}

func withoutBad(tags map[string]string, prefix string, bad map[string]bool) map[string]string {
	out := make(map[string]string, len(tags))
	for name, v := range tags {
		if !bad[prefix+name] {
			out[name] = v
		}
	}
	return out
}

// checkPatches loads every config patch on its own, as Generate does, and
// records those that do not load: they are left out when the machine
// configs are diagnosed.
func (k *configCheck) checkPatches(c *spec.Cluster) {
	k.badPatches = map[string]bool{}
	for _, p := range c.Pools() {
		for _, ref := range userPatchRefs(c, p) {
			if _, done := k.badPatches[ref.key]; done {
				continue
			}
			_, err := configpatcher.LoadPatch([]byte(ref.text))
			k.badPatches[ref.key] = err != nil
			if err != nil {
				k.add(k.cluster.ProblemAt(ref.key, "the config patch does not load: "+patchLoadReason(err)))
			}
		}
	}
}

// patchRef is one user config patch: its key and text.
type patchRef struct {
	key, text string
	pool      bool
}

// userPatchRefs lists the patches a machine of pool p gets, in the order
// Generate applies them: talos.config_patches, then the pool's.
func userPatchRefs(c *spec.Cluster, p spec.Pool) []patchRef {
	var refs []patchRef
	for i, t := range c.Talos.ConfigPatches {
		refs = append(refs, patchRef{key: fmt.Sprintf("talos.config_patches[%d]", i), text: t})
	}
	for i, t := range p.ConfigPatches {
		refs = append(refs, patchRef{key: fmt.Sprintf("%s.config_patches[%d]", poolKey(p), i), text: t, pool: true})
	}
	return refs
}

func poolKey(p spec.Pool) string {
	if p.Role == spec.RoleControlPlane {
		return "controlplane"
	}
	return "workers." + p.Name
}

// configMachines lists the machines converge builds configs for, plus the
// first machine of each pool whose count is zero.
func configMachines(c *spec.Cluster) []machineconfig.Machine {
	machines := machineconfig.Machines(c)
	for _, p := range c.Pools() {
		if p.Count > 0 {
			continue
		}
		one := *c
		one.ControlPlane.Count = 0
		one.Workers = nil
		if p.Role == spec.RoleControlPlane {
			one.ControlPlane.Count = 1
		} else {
			p.Count = 1
			one.Workers = []spec.Pool{p}
		}
		machines = append(machines, machineconfig.Machines(&one)...)
	}
	return machines
}

// genResult is the outcome of one Generate call: ok, refused by
// validation (the lines of its reasons), or failed before validation.
type genResult struct {
	invalid []string
	failed  string
}

func (r genResult) ok() bool { return r.invalid == nil && r.failed == "" }

// generate builds m's config with the given user patches.
func generate(in machineconfig.Input, m machineconfig.Machine, refs []patchRef) genResult {
	c := *in.Cluster
	c.Talos.ConfigPatches = nil
	m.Pool.ConfigPatches = nil
	for _, r := range refs {
		if r.pool {
			m.Pool.ConfigPatches = append(m.Pool.ConfigPatches, r.text)
		} else {
			c.Talos.ConfigPatches = append(c.Talos.ConfigPatches, r.text)
		}
	}
	in.Cluster = &c
	_, err := machineconfig.Generate(in, m)
	if err == nil {
		return genResult{}
	}
	var lines []string
	for _, l := range errorLeaves(err, "") {
		lines = append(lines, stripGenerateContext(l))
	}
	if len(lines) > 0 && strings.HasPrefix(lines[0], validatingPrefix) {
		for i := range lines {
			lines[i] = strings.TrimPrefix(lines[i], validatingPrefix)
		}
		return genResult{invalid: lines}
	}
	return genResult{failed: strings.Join(lines, "; ")}
}

const validatingPrefix = "validating config: "

var (
	generatingRE = regexp.MustCompile(`^generating config for "[^"]*": `)
	applyingRE   = regexp.MustCompile(`^(applying|loading) [^ :]+: `)
)

// stripGenerateContext drops what Generate wraps around a reason: the
// hostname and the patch name (the check names the patch by its key).
func stripGenerateContext(s string) string {
	s = generatingRE.ReplaceAllString(s, "")
	return applyingRE.ReplaceAllString(s, "")
}

// machine checks the config of one machine. When it does not build, the
// user patches are added one at a time to find the one each reason first
// appears with; a reason present without any user patch is the machine's.
func (k *configCheck) machine(in machineconfig.Input, m machineconfig.Machine) []spec.Problem {
	var refs []patchRef
	for _, r := range userPatchRefs(in.Cluster, m.Pool) {
		if !k.badPatches[r.key] {
			refs = append(refs, r)
		}
	}
	full := generate(in, m, refs)
	if full.ok() {
		return nil
	}
	sig := m.Pool.Name + "\x00" + full.failed + "\x00" + strings.Join(full.invalid, "\x00")
	if k.diagnosed[sig] {
		return nil
	}
	if k.diagnosed == nil {
		k.diagnosed = map[string]bool{}
	}
	k.diagnosed[sig] = true
	var out []spec.Problem
	blame := func(key, reason string) {
		if key == "" {
			out = append(out, spec.Problem{File: spec.ClusterFile, Key: m.Hostname,
				Message: "the machine config does not build, whatever the config patches: " + reason})
			return
		}
		out = append(out, k.cluster.ProblemAt(key, reason))
	}
	base := generate(in, m, nil)
	if base.failed != "" {
		blame("", base.failed)
		return out
	}
	// steps[i] holds the reasons with the first i accepted patches.
	steps := [][]string{base.invalid}
	var accepted []patchRef
	for _, r := range refs {
		res := generate(in, m, append(slices.Clone(accepted), r))
		if res.failed != "" {
			blame(r.key, "the config patch does not apply: "+res.failed)
			continue
		}
		accepted = append(accepted, r)
		steps = append(steps, res.invalid)
	}
	for _, reason := range steps[len(steps)-1] {
		i := len(steps) - 1
		for i > 0 && slices.Contains(steps[i-1], reason) {
			i--
		}
		if i == 0 {
			blame("", "Talos refuses it: "+reason)
		} else {
			blame(accepted[i-1].key, "with this config patch Talos refuses the machine config: "+reason)
		}
	}
	return out
}

// errorLeaves flattens an error that holds several (a multierror, as the
// Talos machinery returns, or errors.Join) into one line per reason, each
// with the context its wrappers added.
func errorLeaves(err error, prefix string) []string {
	if many, ok := err.(interface{ WrappedErrors() []error }); ok {
		var out []string
		for _, e := range many.WrappedErrors() {
			out = append(out, errorLeaves(e, prefix)...)
		}
		return out
	}
	if many, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range many.Unwrap() {
			out = append(out, errorLeaves(e, prefix)...)
		}
		return out
	}
	text := err.Error()
	if inner := errors.Unwrap(err); inner != nil && holdsMany(inner) && strings.HasSuffix(text, inner.Error()) {
		return errorLeaves(inner, prefix+strings.TrimSuffix(text, inner.Error()))
	}
	return []string{oneLine(prefix + text)}
}

func holdsMany(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		switch err.(type) {
		case interface{ WrappedErrors() []error }, interface{ Unwrap() []error }:
			return true
		}
	}
	return false
}

// oneLine folds a reason onto one line.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

var (
	unknownKeysRE = regexp.MustCompile(`(?s)unknown keys found during decoding:\s*\n(.*)$`)
	patchLineRE   = regexp.MustCompile(`\bline (\d+)\b`)
	quotedValueRE = regexp.MustCompile("`[^`]*`")
)

// patchLoadReason words a patch loading error without the values the
// machinery quotes: unknown keys are named by their path only, and values
// in type errors are left out. Line numbers count from the patch's first
// line.
func patchLoadReason(err error) string {
	s := err.Error()
	if m := unknownKeysRE.FindStringSubmatchIndex(s); m != nil {
		paths := unknownKeyPaths(s[m[2]:m[3]])
		s = s[:m[0]] + "unknown key(s): " + strings.Join(paths, ", ")
	}
	s = quotedValueRE.ReplaceAllString(s, "(value not shown)")
	s = patchLineRE.ReplaceAllString(s, "line $1 of the patch")
	return oneLine(strings.TrimPrefix(s, "yaml: "))
}

// unknownKeyPaths lists the dotted paths of the leaves of the YAML summary
// the machinery prints for unknown keys.
func unknownKeyPaths(summary string) []string {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(summary), &doc); err != nil || len(doc.Content) == 0 {
		return []string{"(unreadable summary)"}
	}
	var out []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, it := range n.Content {
				walk(it, fmt.Sprintf("%s[%d]", path, i))
			}
		default:
			out = append(out, path)
		}
	}
	walk(doc.Content[0], "")
	slices.Sort(out)
	return slices.Compact(out)
}

// secretStrings gathers the values no message may show: the identity's
// keys, tokens and certificates and the credentials of the cluster files.
func secretStrings(c *spec.Cluster, bundle *secrets.Bundle) []string {
	var out []string
	addText := func(s string) {
		if len(strings.TrimSpace(s)) >= 4 {
			out = append(out, s)
		}
	}
	if data, err := yaml.Marshal(bundle); err == nil {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil {
			var walk func(n *yaml.Node)
			walk = func(n *yaml.Node) {
				if n.Kind == yaml.ScalarNode {
					if len(n.Value) >= 8 {
						addText(n.Value)
					}
					return
				}
				for i, ch := range n.Content {
					if n.Kind == yaml.MappingNode && i%2 == 0 {
						continue
					}
					walk(ch)
				}
			}
			walk(&doc)
		}
	}
	if ts := c.Tailscale; ts != nil {
		addText(ts.AuthKey)
	}
	if o := c.OpenStack; o != nil {
		addText(o.CredentialID)
		addText(o.CredentialSecret)
	}
	if p := c.Proxmox; p != nil {
		addText(p.TokenSecret)
	}
	for _, g := range c.Metal {
		for _, s := range g.Servers {
			addText(s.BMC.Password)
		}
	}
	// Plugin sections are free-form: hide the values of the keys that name
	// a credential (token, password, secret, userKey, ...).
	var walkAny func(v any, secret bool)
	walkAny = func(v any, secret bool) {
		switch v := v.(type) {
		case string:
			if secret {
				addText(v)
			}
		case map[string]any:
			for key, x := range v {
				k := strings.ToLower(key)
				walkAny(x, secret || strings.Contains(k, "token") || strings.Contains(k, "password") ||
					strings.Contains(k, "secret") || strings.Contains(k, "key"))
			}
		case []any:
			for _, x := range v {
				walkAny(x, secret)
			}
		}
	}
	walkAny(c.Plugins.ArgoCD, false)
	walkAny(c.Plugins.Rancher, false)
	walkAny(c.Plugins.Charts, false)
	// Longest first, so that a secret holding another is hidden whole.
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return slices.Compact(out)
}

// redact hides every known secret value in s.
func (k *configCheck) redact(s string) string {
	for _, sec := range k.secrets {
		s = strings.ReplaceAll(s, sec, "(secret not shown)")
	}
	return s
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
