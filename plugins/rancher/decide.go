package rancher

import (
	"crypto/subtle"
	"fmt"
	"strings"
)

// Roles by tier, as the Python tool's ROLE_BY_TIER.
const (
	RoleOwner  = "cluster-owner"
	RoleMember = "cluster-member"
)

// tiers are cluster.yaml's member lists in the order they are resolved.
var tiers = []struct{ key, role string }{{"admins", RoleOwner}, {"users", RoleMember}}

// member is a configured member and the principal it resolved to.
type member struct {
	Name, Tier, Role string
	Principal        string
}

// membersOf returns rancher.admins then rancher.users, trimmed, blank
// ones left out, each once per tier.
func membersOf(section map[string]any) []member {
	var out []member
	for _, t := range tiers {
		list, _ := section[t.key].([]any)
		seen := map[string]bool{}
		for _, v := range list {
			s, _ := v.(string)
			s = strings.TrimSpace(s)
			if s == "" || seen[s] {
				continue
			}
			seen[s] = true
			out = append(out, member{Name: s, Tier: t.key, Role: t.role})
		}
	}
	return out
}

// checkMembers refuses members that did not resolve, and two members of
// different tiers that resolve to the same principal: either way no
// binding may change, or one that is right could be removed as stale.
func checkMembers(ms []member) error {
	var missing []string
	for _, m := range ms {
		if m.Principal == "" {
			missing = append(missing, fmt.Sprintf("'%s' (tier %s)", m.Name, m.Tier))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("could not resolve Rancher principals for configured member(s): %s; no membership is changed, so that no binding is removed as stale",
			strings.Join(missing, ", "))
	}
	for i, a := range ms {
		for _, b := range ms[i+1:] {
			if a.Principal == b.Principal && a.Tier != b.Tier {
				return fmt.Errorf("'%s' and '%s' both resolve to the same Rancher principal (%s) but sit in different tiers ('%s' and '%s'); list that person in one tier only",
					a.Name, b.Name, a.Principal, a.Tier, b.Tier)
			}
		}
	}
	return nil
}

// decision is what converge does about the Rancher cluster.
type decision int

const (
	// register: no Rancher cluster of the name and no agent: create one.
	register decision = iota
	// reuse: the named cluster is this one (its id is the agent's), or a
	// pending registration an interrupted import left (no agent yet).
	reuse
	// refuse: the named cluster, or the agent's registration, is not
	// this cluster's; nothing is changed.
	refuse
)

// decideCluster is the Python tool's ensure_cluster without its I/O:
// found is the Rancher cluster named name (nil for none), agentID the id
// the cluster's Rancher agent is registered as ("" without an agent).
// The reason explains a refusal.
func decideCluster(name string, found *rcluster, agentID string) (decision, string) {
	switch {
	case found != nil && found.ID == agentID:
		return reuse, ""
	case found != nil && agentID != "":
		return refuse, fmt.Sprintf("Rancher cluster '%s' (%s) does not match the downstream cluster (%s): the cluster's Rancher agent is registered with another Rancher cluster; converge will not attach it to this one",
			name, found.ID, agentID)
	case found != nil && found.State == "pending":
		return reuse, ""
	case found != nil:
		return refuse, fmt.Sprintf("a Rancher cluster named '%s' already exists (%s, state %s) and the downstream cluster has no Rancher agent, so it may be another cluster's; converge will not take it over: rename one of them, or remove that registration in Rancher",
			name, found.ID, found.State)
	case agentID != "":
		return refuse, orphanReason(name, agentID)
	}
	return register, ""
}

// orphanReason says why a cluster whose agent names a registration that
// Rancher no longer has is refused.
func orphanReason(name, agentID string) string {
	return fmt.Sprintf("the downstream cluster's cattle-cluster-agent is registered as %s, but no Rancher cluster named '%s' exists; remove the stale agent first (destroying the rancher plugin's part deletes its %s namespace), then converge registers the cluster anew",
		agentID, name, AgentNamespace)
}

// memberChange is one change to a cluster's member bindings.
type memberChange struct {
	// add: Member gets Role; otherwise Binding is removed.
	Add     bool
	Member  member
	Binding binding
	// Correct marks the removal of a desired principal's binding of
	// another role (its new role's binding is added too).
	Correct bool
}

// reconcileBindings returns the changes that make the cluster's user
// bindings those of the members: the missing ones added first, then the
// stale ones removed and the wrong roles corrected. Group bindings and
// the creator's owner binding (<cluster>:creator-cluster-owner) are never
// touched.
func reconcileBindings(clusterID string, ms []member, bindings []binding) []memberChange {
	owner := clusterID + ":creator-cluster-owner"
	type grant struct{ principal, role string }
	have := map[grant]bool{}
	for _, b := range bindings {
		if b.user() {
			have[grant{b.UserPrincipalID, b.RoleTemplateID}] = true
		}
	}
	want := map[string]string{}
	var out []memberChange
	for _, m := range ms {
		if _, dup := want[m.Principal]; dup {
			continue
		}
		want[m.Principal] = m.Role
		if !have[grant{m.Principal, m.Role}] {
			out = append(out, memberChange{Add: true, Member: m})
			have[grant{m.Principal, m.Role}] = true
		}
	}
	for _, b := range bindings {
		if !b.user() || b.ID == owner {
			continue
		}
		role, desired := want[b.UserPrincipalID]
		switch {
		case !desired:
			out = append(out, memberChange{Binding: b})
		case role != b.RoleTemplateID:
			out = append(out, memberChange{Binding: b, Correct: true})
		}
	}
	return out
}

// agentIdentity is the id the cluster's Rancher agent is registered as,
// from its credentials: the cluster id they name; else, when they name
// none (an agent installed from Rancher's import manifest, which Rancher
// renders without the id), the id of the Rancher cluster of the
// cluster's name (clusterID, "" for none) when one of the agent's
// registration tokens is one of that cluster's (regTokens): the agent was
// installed from that cluster's registration. "" otherwise: no agent
// Rancher's cluster can be shown to own. Tokens are compared in constant
// time and never shown.
func agentIdentity(creds agentCreds, clusterID string, regTokens []string) string {
	if creds.id != "" {
		return creds.id
	}
	if clusterID == "" {
		return ""
	}
	for _, have := range creds.tokens {
		for _, reg := range regTokens {
			if have != "" && reg != "" && subtle.ConstantTimeCompare([]byte(have), []byte(reg)) == 1 {
				return clusterID
			}
		}
	}
	return ""
}
