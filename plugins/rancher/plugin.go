// Package rancher is the rancher plugin: it registers the cluster with an
// existing Rancher as an imported cluster, installs Rancher's agent on it
// and keeps the cluster's member bindings those of rancher.admins
// (cluster-owner) and rancher.users (cluster-member), as the Python
// taloscluster's rancher plugin does.
//
// client.go and api.go are a small client of Rancher's v3 API;
// downstream.go reads the cluster's Rancher identity and applies Rancher's
// import manifest to it; decide.go holds the decisions without I/O; this
// file is the reconcile.Plugin.
package rancher

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/plan"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Resource kinds of the plugin's steps.
const (
	KindCluster plan.ResourceKind = "rancher-cluster"
	KindAgent   plan.ResourceKind = "rancher-agent"
	KindMember  plan.ResourceKind = "rancher-member"
	KindBinding plan.ResourceKind = "rancher-binding"
)

// Options configure the plugin.
type Options struct {
	// RootCAs are the CAs Rancher's certificate must chain to; nil for
	// the system's. TLS is always verified.
	RootCAs *x509.CertPool
	// HTTPClient, when set, is the client of Rancher's API: its
	// transport (and so its TLS settings) is used instead of one trusting
	// RootCAs; redirects are always limited to Rancher's own origin.
	HTTPClient *http.Client
	// NamespaceTimeout bounds the wait for Rancher to make a new
	// cluster's namespace (120 s when zero); NamespacePoll is how often
	// it is read (2 s when zero).
	NamespaceTimeout, NamespacePoll time.Duration
}

// Plugin is the rancher plugin (reconcile.Plugin).
type Plugin struct {
	opts Options
}

// New returns the plugin.
func New(opts Options) *Plugin {
	if opts.NamespaceTimeout <= 0 {
		opts.NamespaceTimeout = 120 * time.Second
	}
	if opts.NamespacePoll <= 0 {
		opts.NamespacePoll = 2 * time.Second
	}
	return &Plugin{opts: opts}
}

// Name is the plugin's section.
func (*Plugin) Name() string { return "rancher" }

// After: none; argocd runs after it and reads its cluster id.
func (*Plugin) After() []string { return nil }

// Configured: the section is there with url and token (merged from
// secrets.yaml).
func (*Plugin) Configured(c *spec.Cluster) bool {
	r := c.Plugins.Rancher
	u, _ := r["url"].(string)
	t, _ := r["token"].(string)
	return r != nil && u != "" && t != ""
}

// Preflight refuses, before converge changes anything, a rancher.url the
// plugin would not send the token to (not https, not a URL).
func (p *Plugin) Preflight(c *spec.Cluster) error {
	_, err := p.client(c)
	return err
}

// client returns the client of the cluster's Rancher.
func (p *Plugin) client(c *spec.Cluster) (*v3, error) {
	u, _ := c.Plugins.Rancher["url"].(string)
	t, _ := c.Plugins.Rancher["token"].(string)
	if u == "" || t == "" {
		return nil, errors.New("rancher.url and rancher.token must both be set")
	}
	return newV3(u, t, p.opts.RootCAs, p.opts.HTTPClient)
}

// state is what Observe read.
type state struct {
	name string
	// cluster is the Rancher cluster of the cluster's name, nil for none.
	cluster *rcluster
	// kubeconfig is set when the cluster has one (it was built).
	kubeconfig bool
	// agentID is the id the cluster's Rancher agent is registered as, ""
	// without an agent or when nothing shows which (agentIdentity).
	agentID string
	// agentUnknown says why the agent's id could not be read, for a
	// teardown (the cluster's API is down, or its machines are gone);
	// machines is how many of its machines the provider still has.
	agentUnknown string
	machines     int
	// members are the configured members, each resolved to a principal;
	// bindings are the cluster's member bindings (none without a
	// cluster). Neither is read for a teardown.
	members  []member
	bindings []binding
}

// Observe reads the Rancher cluster of the cluster's name, the id the
// cluster's Rancher agent is registered as (the cluster id its
// credentials name, or, when they name none as the import manifest makes
// them, that Rancher cluster's id when one of its registration tokens is
// the agent's), and, unless tearing down, the
// cluster's member bindings and every configured member's principal. A
// member that does not resolve, or resolves to the same principal as a
// member of the other tier, is an error: nothing is planned. For a
// teardown, an agent id that cannot be read is kept in the state, not an
// error: PlanTeardown decides what it means.
func (p *Plugin) Observe(ctx context.Context, env reconcile.PluginEnv) (reconcile.PluginState, error) {
	c := env.Cluster
	api, err := p.client(c)
	if err != nil {
		return nil, err
	}
	st := &state{name: c.Name, machines: env.Machines}
	if st.cluster, err = api.findCluster(ctx, c.Name); err != nil {
		return nil, fmt.Errorf("finding the Rancher cluster: %w", err)
	}
	if env.Kubeconfig != nil {
		st.kubeconfig = true
		creds, err := readCredentials(ctx, env.Kubeconfig)
		switch {
		case err != nil && env.Teardown:
			st.agentUnknown = err.Error()
		case err != nil:
			return nil, err
		}
		if st.agentID, err = identify(ctx, api, creds, st.cluster); err != nil {
			return nil, err
		}
	}
	if env.Teardown {
		return st, nil
	}
	if st.members, err = resolveMembers(ctx, api, membersOf(c.Plugins.Rancher)); err != nil {
		return nil, err
	}
	if st.cluster != nil {
		if st.bindings, err = api.listBindings(ctx, st.cluster.ID); err != nil {
			return nil, fmt.Errorf("reading the members of Rancher cluster %s: %w", st.cluster.ID, err)
		}
	}
	return st, nil
}

// readCredentials reads the credentials of the Rancher agent of the
// cluster the kubeconfig names.
func readCredentials(ctx context.Context, kubeconfig []byte) (agentCreds, error) {
	d, err := newDownstream(kubeconfig)
	if err != nil {
		return agentCreds{}, err
	}
	return d.agentCredentials(ctx)
}

// identify returns the id the cluster's Rancher agent is registered as
// (agentIdentity): when its credentials name no cluster id but carry
// registration tokens, the registration tokens of cl, the Rancher
// cluster of the cluster's name (nil for none), are read to compare.
func identify(ctx context.Context, api *v3, creds agentCreds, cl *rcluster) (string, error) {
	if creds.id != "" || len(creds.tokens) == 0 || cl == nil {
		return agentIdentity(creds, "", nil), nil
	}
	reg, err := api.registrationTokens(ctx, cl.ID)
	if err != nil {
		return "", err
	}
	return agentIdentity(creds, cl.ID, reg), nil
}

// agentID reads the id the cluster's Rancher agent is registered as,
// with cl the Rancher cluster of the cluster's name (nil for none).
func (d *downstream) agentID(ctx context.Context, api *v3, cl *rcluster) (string, error) {
	creds, err := d.agentCredentials(ctx)
	if err != nil {
		return "", err
	}
	return identify(ctx, api, creds, cl)
}

// resolveMembers resolves every member to its principal (a search, which
// changes nothing), admins first, and refuses what checkMembers refuses.
func resolveMembers(ctx context.Context, api *v3, ms []member) ([]member, error) {
	for i := range ms {
		pid, ok, err := api.resolvePrincipal(ctx, ms[i].Name)
		if err != nil {
			return nil, fmt.Errorf("resolving the Rancher principal of %s: %w", ms[i].Name, err)
		}
		if ok {
			ms[i].Principal = pid
		}
	}
	if err := checkMembers(ms); err != nil {
		return nil, err
	}
	return ms, nil
}

// Plugin operations.
type (
	registerCluster struct{ name string }
	installAgent    struct{ name string }
	addMember       struct{ member member }
	removeBinding   struct{ binding binding }
	deleteCluster   struct{ name, id string }
	removeAgent     struct{}
	// failTeardown is a teardown that must not delete what it found: its
	// step fails with the reason, so destroy exits non-zero.
	failTeardown struct{ reason string }
)

// Plan registers the cluster in Rancher when no registration of its name
// exists, installs the Rancher agent when the cluster has none, and makes
// the member bindings those of rancher.admins and rancher.users. A
// registration that is not this cluster's (another agent id, another
// cluster of the name, an agent whose registration is gone) is refused.
func (*Plugin) Plan(_ *spec.Cluster, s reconcile.PluginState) ([]plan.Change, error) {
	st, ok := s.(*state)
	if !ok {
		return nil, errors.New("rancher: not its state")
	}
	dec, reason := decideCluster(st.name, st.cluster, st.agentID)
	if dec == refuse {
		return []plan.Change{{Phase: plan.PhasePlugins, Action: plan.ActionRefuse,
			Resource: plan.Resource{Kind: KindCluster, Name: st.name}, Reason: reason}}, nil
	}
	var out []plan.Change
	clusterID, bindings := "", st.bindings
	if dec == register {
		bindings = nil
		out = append(out, plan.Change{Phase: plan.PhasePlugins, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: KindCluster, Name: st.name},
			Reason:   "register cluster " + st.name + " in Rancher (an imported cluster)",
			Expects:  "Rancher has no cluster of that name, or a pending one an interrupted import left",
			Op:       registerCluster{name: st.name}})
	} else {
		clusterID = st.cluster.ID
	}
	if st.agentID == "" {
		out = append(out, plan.Change{Phase: plan.PhasePlugins, Action: plan.ActionCreate,
			Resource: plan.Resource{Kind: KindAgent, Name: AgentNamespace},
			Reason:   "install the Rancher agent: apply Rancher's import manifest for cluster " + st.name + " to the cluster",
			Expects:  "the cluster has no Rancher agent, or one registered as that Rancher cluster",
			Op:       installAgent{name: st.name}})
	}
	for _, mc := range reconcileBindings(clusterID, st.members, bindings) {
		out = append(out, memberStep(mc))
	}
	return out, nil
}

// memberStep is the step of one member binding change.
func memberStep(mc memberChange) plan.Change {
	if mc.Add {
		m := mc.Member
		return plan.Change{Phase: plan.PhasePlugins, Action: plan.ActionCreate,
			Resource:   plan.Resource{Kind: KindMember, Name: m.Name},
			Reason:     fmt.Sprintf("add %s as %s (rancher.%s)", m.Name, m.Role, m.Tier),
			Attributes: []plan.Attribute{{Key: "principal", Value: m.Principal}, {Key: "role", Value: m.Role}},
			Expects:    "the principal does not hold that role on the cluster yet",
			Op:         addMember{member: m}}
	}
	b := mc.Binding
	reason := fmt.Sprintf("remove stale binding %s: %s is not a configured member", b.ID, b.UserPrincipalID)
	if mc.Correct {
		reason = fmt.Sprintf("correct role: %s is configured in another tier; its %s binding %s is removed", b.UserPrincipalID, b.RoleTemplateID, b.ID)
	}
	return plan.Change{Phase: plan.PhasePlugins, Action: plan.ActionDelete,
		Resource:   plan.Resource{Kind: KindBinding, Name: b.ID},
		Reason:     reason,
		Attributes: []plan.Attribute{{Key: "principal", Value: b.UserPrincipalID}, {Key: "role", Value: b.RoleTemplateID}},
		Op:         removeBinding{binding: b}}
}

// PlanTeardown deletes the Rancher cluster only when its id is the one
// the cluster's Rancher agent is registered as, then removes the agent
// (the cattle-system namespace). A registration of the cluster's name
// that cannot be shown to be this cluster's is never deleted: with the
// cluster at hand (no agent, another id, or an agent that cannot be read
// while machines remain) the teardown fails saying why, so destroy can be
// run again; with nothing of the cluster left to show it (never built, or
// its machines gone) it is kept and the plan says so. An agent whose
// registration is gone is removed alone.
func (*Plugin) PlanTeardown(_ *spec.Cluster, s reconcile.PluginState) ([]plan.Change, error) {
	st, ok := s.(*state)
	if !ok {
		return nil, errors.New("rancher: not its state")
	}
	agent := plan.Change{Phase: plan.PhasePlugins, Action: plan.ActionDelete,
		Resource: plan.Resource{Kind: KindAgent, Name: AgentNamespace},
		Reason:   "destroy: uninstall the Rancher agent (namespace " + AgentNamespace + ")", Op: removeAgent{}}
	res := plan.Resource{Kind: KindCluster, Name: st.name}
	switch cl := st.cluster; {
	case cl == nil && st.agentID != "":
		agent.Reason = "destroy: the cluster's Rancher agent is registered as " + st.agentID + ", but Rancher has no cluster named " +
			st.name + "; only the agent (namespace " + AgentNamespace + ") is removed"
		return []plan.Change{agent}, nil
	case cl == nil && st.agentUnknown != "" && st.machines > 0:
		return []plan.Change{failing(agent.Resource, "the cluster's Rancher agent could not be read ("+st.agentUnknown+"); run destroy again once the cluster's API answers")}, nil
	case cl == nil:
		return nil, nil
	case !st.kubeconfig:
		return []plan.Change{kept(res, fmt.Sprintf("Rancher cluster '%s' (%s) is kept: the cluster has no kubeconfig (it was never built), so nothing shows that registration is this cluster's; remove it in Rancher if it is", st.name, cl.ID))}, nil
	case st.agentUnknown != "" && st.machines == 0:
		return []plan.Change{kept(res, fmt.Sprintf("Rancher cluster '%s' (%s) is kept: the cluster's Rancher agent could not be read (%s) and the cluster has no machines left, so nothing shows that registration is this cluster's; remove it in Rancher if it is", st.name, cl.ID, st.agentUnknown))}, nil
	case st.agentUnknown != "":
		return []plan.Change{failing(res, fmt.Sprintf("the cluster's Rancher agent could not be read (%s), so nothing shows Rancher cluster '%s' (%s) is this cluster's; run destroy again once the cluster's API answers", st.agentUnknown, st.name, cl.ID))}, nil
	case st.agentID == "":
		return []plan.Change{failing(res, fmt.Sprintf("Rancher cluster '%s' (%s) has no cattle-cluster-agent on the downstream cluster, so it is not this cluster; refuse to delete it", st.name, cl.ID))}, nil
	case st.agentID != cl.ID:
		return []plan.Change{failing(res, fmt.Sprintf("Rancher cluster '%s' (%s) does not match the downstream cluster (%s); refuse to delete it", st.name, cl.ID, st.agentID))}, nil
	}
	return []plan.Change{{Phase: plan.PhasePlugins, Action: plan.ActionDelete, Resource: res,
		Reason:  "destroy: the cluster's registration in Rancher (" + st.cluster.ID + ", the id its agent is registered as)",
		Expects: "the Rancher cluster of that name is the one the cluster's agent is registered as",
		Op:      deleteCluster{name: st.name, id: st.cluster.ID}}, agent}, nil
}

// kept is a teardown step that refuses to delete what it found: destroy
// goes on and says why it is kept.
func kept(res plan.Resource, reason string) plan.Change {
	return plan.Change{Phase: plan.PhasePlugins, Action: plan.ActionRefuse, Resource: res, Reason: reason}
}

// failing is a teardown step that fails with reason when it runs.
func failing(res plan.Resource, reason string) plan.Change {
	return plan.Change{Phase: plan.PhasePlugins, Action: plan.ActionWait, Resource: res,
		Reason: "not torn down: " + reason, Op: failTeardown{reason: reason}}
}

// Apply makes one step, after reading its precondition again. The steps
// that register the cluster, install its agent or change its members
// return the Rancher cluster id and Rancher's URL (cluster_id, url) for
// the plugins after this one.
func (p *Plugin) Apply(ctx context.Context, env reconcile.PluginEnv, ch plan.Change) (map[string]string, error) {
	// The steps on the cluster alone need no Rancher client.
	switch op := ch.Op.(type) {
	case removeAgent:
		d, err := newDownstream(env.Kubeconfig)
		if err != nil {
			return nil, err
		}
		return nil, d.removeAgent(ctx)
	case failTeardown:
		return nil, errors.New(op.reason)
	}
	c := env.Cluster
	api, err := p.client(c)
	if err != nil {
		return nil, err
	}
	var id string
	switch op := ch.Op.(type) {
	case registerCluster:
		id, err = p.register(ctx, api, op.name)
	case installAgent:
		id, err = p.install(ctx, api, env, op.name)
	case addMember:
		id, err = p.add(ctx, api, c.Name, op.member)
	case removeBinding:
		// A binding gone already is done.
		if err := api.removeBinding(ctx, op.binding.ID); err != nil && !notFound(err) {
			return nil, fmt.Errorf("removing binding %s: %w", op.binding.ID, err)
		}
		return nil, nil
	case deleteCluster:
		return nil, p.delete(ctx, api, env, op)
	default:
		return nil, fmt.Errorf("rancher: no operation for %s %s", ch.Action, ch.Resource)
	}
	if err != nil {
		return nil, err
	}
	return map[string]string{"cluster_id": id, "url": api.base.String()}, nil
}

// register creates the imported cluster, unless a pending one of the
// name is there now (an interrupted import, recovered).
func (p *Plugin) register(ctx context.Context, api *v3, name string) (string, error) {
	found, err := api.findCluster(ctx, name)
	if err != nil {
		return "", fmt.Errorf("finding the Rancher cluster: %w", err)
	}
	if found != nil {
		if found.State == "pending" {
			return found.ID, nil
		}
		return "", fmt.Errorf("a Rancher cluster named '%s' (%s, state %s) exists since the plan was made; run converge again to see whether it is this cluster's", name, found.ID, found.State)
	}
	cl, err := api.createImportCluster(ctx, name)
	if err != nil {
		return "", fmt.Errorf("registering cluster %s in Rancher: %w", name, err)
	}
	return cl.ID, nil
}

// install applies the Rancher cluster's import manifest to the cluster,
// once Rancher made the cluster's namespace; an agent already registered
// as that cluster is done, one registered as another is refused.
func (p *Plugin) install(ctx context.Context, api *v3, env reconcile.PluginEnv, name string) (string, error) {
	if env.Kubeconfig == nil {
		return "", errors.New("the cluster has no kubeconfig: the Rancher agent cannot be installed")
	}
	cl, err := api.findCluster(ctx, name)
	if err != nil {
		return "", fmt.Errorf("finding the Rancher cluster: %w", err)
	}
	if cl == nil {
		return "", fmt.Errorf("there is no Rancher cluster named '%s' to install the agent of", name)
	}
	d, err := newDownstream(env.Kubeconfig)
	if err != nil {
		return "", err
	}
	switch agentID, err := d.agentID(ctx, api, cl); {
	case err != nil:
		return "", err
	case agentID == cl.ID:
		return cl.ID, nil
	case agentID != "":
		return "", fmt.Errorf("the cluster's Rancher agent is registered as %s since the plan was made, not as Rancher cluster '%s' (%s); refuse to install another", agentID, name, cl.ID)
	}
	if err := api.waitNamespace(ctx, cl.ID, p.opts.NamespaceTimeout, p.opts.NamespacePoll); err != nil {
		return "", err
	}
	manifest, err := api.importManifest(ctx, cl.ID)
	if err != nil {
		return "", err
	}
	objs, err := manifestObjects(manifest)
	if err != nil {
		return "", err
	}
	if err := d.apply(ctx, objs); err != nil {
		return "", fmt.Errorf("applying the Rancher import manifest to the cluster: %w", err)
	}
	return cl.ID, nil
}

// add binds the member's principal to its role, unless a user binding
// already does.
func (p *Plugin) add(ctx context.Context, api *v3, name string, m member) (string, error) {
	cl, err := api.findCluster(ctx, name)
	if err != nil {
		return "", fmt.Errorf("finding the Rancher cluster: %w", err)
	}
	if cl == nil {
		return "", fmt.Errorf("there is no Rancher cluster named '%s' to add %s to", name, m.Name)
	}
	bindings, err := api.listBindings(ctx, cl.ID)
	if err != nil {
		return "", fmt.Errorf("reading the members of Rancher cluster %s: %w", cl.ID, err)
	}
	for _, b := range bindings {
		if b.user() && b.UserPrincipalID == m.Principal && b.RoleTemplateID == m.Role {
			return cl.ID, nil
		}
	}
	if err := api.addMember(ctx, cl.ID, m.Principal, m.Role); err != nil {
		return "", fmt.Errorf("adding %s as %s: %w", m.Name, m.Role, err)
	}
	return cl.ID, nil
}

// delete deletes the Rancher cluster after reading again that it is the
// one the cluster's agent is registered as; one gone already is done.
func (p *Plugin) delete(ctx context.Context, api *v3, env reconcile.PluginEnv, op deleteCluster) error {
	cl, err := api.findCluster(ctx, op.name)
	if err != nil {
		return fmt.Errorf("finding the Rancher cluster: %w", err)
	}
	if cl == nil {
		return nil
	}
	if cl.ID != op.id {
		return fmt.Errorf("the Rancher cluster '%s' is %s now, not %s as planned; refuse to delete it", op.name, cl.ID, op.id)
	}
	if env.Kubeconfig == nil {
		return fmt.Errorf("the cluster has no kubeconfig: nothing shows Rancher cluster %s is this cluster's; refuse to delete it", cl.ID)
	}
	d, err := newDownstream(env.Kubeconfig)
	if err != nil {
		return err
	}
	agentID, err := d.agentID(ctx, api, cl)
	if err != nil {
		return err
	}
	switch {
	case agentID == "":
		return fmt.Errorf("the Rancher cluster '%s' (%s) has no cattle-cluster-agent on the downstream cluster, so it is not this cluster; refuse to delete it", op.name, cl.ID)
	case agentID != cl.ID:
		return fmt.Errorf("the Rancher cluster '%s' (%s) does not match the downstream cluster (%s); refuse to delete it", op.name, cl.ID, agentID)
	}
	if err := api.deleteCluster(ctx, cl.ID); err != nil && !notFound(err) {
		return fmt.Errorf("deleting Rancher cluster %s: %w", cl.ID, err)
	}
	return nil
}
