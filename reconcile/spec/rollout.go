package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// rollout reads the rollout section. An absent or null section gives the
// defaults.
func (v *validator) rollout(t *node, c *Cluster) Rollout {
	out := Rollout{MaxUnavailable: DefaultMaxUnavailable}
	n := t.get("rollout")
	if !v.mapping(n, "rollout", rolloutKeys...) {
		return out
	}
	const key = "rollout.max_unavailable"
	i, ok := v.integer(n, "max_unavailable", key)
	if !ok {
		return out
	}
	if i < 1 {
		v.errorf(n.get("max_unavailable"), key, "%s must be 1 or greater: a rollout takes at least one worker down at a time", key)
		return out
	}
	out.MaxUnavailable = int(min(i, 1<<31-1))
	if workers := workerMachines(c); workers > 0 && out.MaxUnavailable > workers {
		v.warnf(n.get("max_unavailable"), key, "%s is %d but the cluster has %d worker machines: a rollout takes every worker down at once", key, out.MaxUnavailable, workers)
	}
	return out
}

// workerMachines counts the cluster's worker machines: the worker pools'
// counts and the metal workers.
func workerMachines(c *Cluster) int {
	n := 0
	for _, p := range c.Workers {
		n += p.Count
	}
	for _, g := range c.Metal {
		for _, s := range g.Servers {
			if s.Role == RoleWorker {
				n++
			}
		}
	}
	return n
}

// remediation reads the remediation section: nil when it is absent or
// null, the defaults for what it leaves out.
func (v *validator) remediation(t *node, c *Cluster) *Remediation {
	n := t.get("remediation")
	if !v.mapping(n, "remediation", remediationKeys...) {
		return nil
	}
	r := &Remediation{After: DefaultRemediationAfter, MaxUnhealthy: DefaultMaxUnhealthy}
	if d, ok := v.remediationAfter(n.get("after")); ok {
		r.After = d
	}
	if m, ok := v.maxUnhealthy(n.get("max_unhealthy")); ok {
		r.MaxUnhealthy = m
	}
	r.Pools = v.remediationPools(t, n)
	// A pool too small for the percentage is never remediated: say so.
	for _, p := range c.Workers {
		if r.Covers(p.Name) && p.Count > 0 && r.Limit(p.Count) == 0 {
			v.warnf(where(n, "max_unhealthy"), "remediation.max_unhealthy",
				"remediation.max_unhealthy %s of pool '%s' (%d machines) is less than one machine, so that pool is never remediated; write a count such as 1 or a larger percentage",
				r.MaxUnhealthy, p.Name, p.Count)
		}
	}
	return r
}

// remediationAfter reads remediation.after: a Go duration of a minute or
// more.
func (v *validator) remediationAfter(n *node) (time.Duration, bool) {
	const key = "remediation.after"
	if n.isNull() {
		return 0, false
	}
	if n.kind != kindString {
		v.errorf(n, key, "%s must be a duration with its unit, such as 10m, 90s or 1h, not %s", key, kindPhrase(n))
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.str))
	if err != nil {
		v.errorf(n, key, "%s %q is not a duration such as 10m, 90s or 1h", key, n.str)
		return 0, false
	}
	if d < MinRemediationAfter {
		v.errorf(n, key, "%s must be 1m or longer, not %s: Kubernetes alone takes 40 to 50 seconds (its node-monitor grace period) to mark a silent node NotReady, so a shorter wait would replace machines that are only slow to report", key, n.str)
		return 0, false
	}
	return d, true
}

// maxUnhealthy reads remediation.max_unhealthy: a whole percentage from 1%
// to 100%, or a count of machines (an integer or a numeric string) of 1 or
// more.
func (v *validator) maxUnhealthy(n *node) (MaxUnhealthy, bool) {
	const key = "remediation.max_unhealthy"
	if n.isNull() {
		return MaxUnhealthy{}, false
	}
	text := strings.TrimSpace(n.str)
	var count int64
	switch {
	case n.kind == kindString && strings.HasSuffix(text, "%"):
		p, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(text, "%")))
		if err != nil || p < 1 || p > 100 {
			v.errorf(n, key, "%s %q must be a whole percentage from 1%% to 100%%, such as 40%%", key, n.str)
			return MaxUnhealthy{}, false
		}
		return MaxUnhealthy{Percent: p}, true
	case n.kind == kindInt:
		count = n.num
	case n.kind == kindString:
		i, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			v.errorf(n, key, "%s %q must be a count of machines such as 2 or a percentage of the pool such as 40%%", key, n.str)
			return MaxUnhealthy{}, false
		}
		count = i
	default:
		v.errorf(n, key, "%s must be a count of machines such as 2 or a percentage of the pool such as 40%%, not %s", key, kindPhrase(n))
		return MaxUnhealthy{}, false
	}
	if count < 1 {
		v.errorf(n, key, "%s must be 1 or greater when it is a count of machines (or a percentage such as 40%%): 0 would never remediate", key)
		return MaxUnhealthy{}, false
	}
	return MaxUnhealthy{Count: int(min(count, 1<<31-1))}, true
}

// remediationPools reads remediation.pools: worker pool names, each once.
func (v *validator) remediationPools(t, sec *node) []string {
	const key = "remediation.pools"
	n := sec.get("pools")
	if n.isNull() {
		return nil
	}
	if n.kind == kindList && len(n.items) == 0 {
		v.errorf(n, key, "%s is empty: leave it out to cover every worker pool, or remove the remediation section to turn remediation off", key)
		return nil
	}
	// strList reports a value that is not a list and the entries that are
	// not names; the loop below judges the names.
	v.strList(sec, "pools", key)
	if n.kind != kindList {
		return nil
	}
	workers := t.get("workers")
	var known []string
	if workers != nil && workers.kind == kindMap {
		known = workers.keys
	}
	var out []string
	seen := map[string]bool{}
	for i, it := range n.items {
		if it.kind != kindString || strings.TrimSpace(it.str) == "" {
			continue
		}
		entry := fmt.Sprintf("%s[%d]", key, i)
		name := it.str
		switch {
		case name == string(RoleControlPlane):
			v.errorf(it, entry, "%s lists controlplane: control planes are never remediated (replacing one risks etcd quorum); list worker pools only", key)
		case !slices.Contains(known, name):
			v.errorf(it, entry, "%s lists '%s', which is not a worker pool (%s)", key, name, poolList(known))
		case seen[name]:
			v.errorf(it, entry, "%s lists '%s' twice", key, name)
		default:
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// poolList names the worker pools for a message.
func poolList(names []string) string {
	if len(names) == 0 {
		return "the cluster has no worker pools"
	}
	return "worker pools: " + strings.Join(names, ", ")
}
