package agent

import (
	"context"
	"slices"
)

// Fleet shares the repository's clusters among the agent's replicas
// (state.Fleet, with Kubernetes Leases). A replica plans, converges,
// checks drift and reports only for the clusters it owns; a pull request
// is planned by the owner of the first cluster it changes. Without a
// Fleet the agent owns every cluster.
type Fleet interface {
	// SetClusters tells the repository's clusters.
	SetClusters(paths []string)
	// Owns reports whether this replica owns a cluster now.
	Owns(cluster string) bool
	// Run shares the clusters until ctx ends, then gives them up; busy
	// says whether a cluster has work running.
	Run(ctx context.Context, busy func(cluster string) bool)
	// TakeOrphanOutboxes takes the report outboxes of replicas that are
	// gone, by document name.
	TakeOrphanOutboxes(ctx context.Context) (map[string][]byte, error)
	// Summary describes the replica's share for the status page.
	Summary() string
}

// owns reports whether this replica plans and converges cluster.
func (a *Agent) owns(cluster string) bool {
	return a.fleet == nil || a.fleet.Owns(cluster)
}

// takeOver runs the resume check for the clusters this replica came to
// own since the last poll (another replica died, shut down or handed them
// over): each one not converged to head is converged, resuming from its
// journal. It also sends the reports of replicas that are gone.
func (a *Agent) takeOver(ctx context.Context, head string) {
	if a.fleet == nil {
		return
	}
	a.mu.Lock()
	dirs := slices.Clone(a.clusters)
	a.mu.Unlock()
	var gained []string
	owned := map[string]bool{}
	for _, d := range dirs {
		if !a.fleet.Owns(d) {
			continue
		}
		owned[d] = true
		if !a.ownedBefore[d] {
			gained = append(gained, d)
		}
	}
	a.ownedBefore = owned
	if a.metrics != nil {
		for _, d := range dirs {
			a.metrics.LeaseHeld(d, owned[d])
		}
	}
	if len(gained) > 0 && head != "" {
		a.log.Info("clusters now owned by this replica", "clusters", gained)
		a.queueBehind(ctx, head, gained)
	}
	docs, err := a.fleet.TakeOrphanOutboxes(ctx)
	if err != nil {
		a.log.Warn("taking the reports of replicas that are gone", "error", err)
	}
	for name, data := range docs {
		if err := a.reports.Adopt(ctx, data); err != nil {
			a.log.Error("adopting the reports of a replica that is gone", "document", name, "error", err)
		}
	}
}
