package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// ShownStore is an optional capability of the agent's Progress (the state
// backend): files of a cluster's state. With it, the plans shown on pull
// requests are kept with the cluster, so the reviewed-plan check works
// after a restart and when another replica converges the merge.
type ShownStore interface {
	Get(ctx context.Context, cluster, name string) ([]byte, error)
	Put(ctx context.Context, cluster, name string, data []byte) error
}

// shownFile is the state file of a cluster that holds the plans shown on
// its pull requests.
const shownFile = "shown-plans.json"

// Bounds of a cluster's shown plans: the newest pull requests are kept,
// within a size that leaves room in a Kubernetes Secret.
const (
	maxShownPerCluster = 10
	maxShownBytes      = 256 << 10
)

// shownRecord is one pull request's shown plan, as stored.
type shownRecord struct {
	Commit string     `json:"commit"`
	Shown  time.Time  `json:"shown"`
	Plan   *plan.Plan `json:"plan"`
}

// storeShown records in the cluster's state the plan shown on pull
// request pr (nil: none is shown). A failure is logged: the plan is still
// remembered in memory.
func (a *Agent) storeShown(ctx context.Context, cluster string, pr int, commit string, pl *plan.Plan) {
	st, ok := a.progress.(ShownStore)
	if !ok {
		return
	}
	recs := a.loadShown(ctx, st, cluster)
	key := strconv.Itoa(pr)
	if pl == nil {
		if _, had := recs[key]; !had {
			return
		}
		delete(recs, key)
	} else {
		recs[key] = shownRecord{Commit: commit, Shown: time.Now().UTC(), Plan: pl}
	}
	var data []byte
	for {
		var err error
		if data, err = json.Marshal(recs); err != nil {
			a.log.Error("encoding the shown plans", "cluster", cluster, "error", err)
			return
		}
		if (len(recs) <= maxShownPerCluster && len(data) <= maxShownBytes) || len(recs) <= 1 {
			break
		}
		oldest := slices.MinFunc(slices.Collect(maps.Keys(recs)), func(x, y string) int { return recs[x].Shown.Compare(recs[y].Shown) })
		delete(recs, oldest)
	}
	if err := st.Put(ctx, cluster, shownFile, data); err != nil {
		a.log.Warn("keeping the shown plan in the state; it is kept in memory only", "cluster", cluster, "pr", pr, "error", a.redact.String(err.Error()))
	}
}

// loadShown reads a cluster's shown plans; an absent or unreadable file is
// none (the reviewed-plan check then finds no plan and says so).
func (a *Agent) loadShown(ctx context.Context, st ShownStore, cluster string) map[string]shownRecord {
	recs := map[string]shownRecord{}
	data, err := st.Get(ctx, cluster, shownFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Warn("reading the shown plans", "cluster", cluster, "error", a.redact.String(err.Error()))
		}
		return recs
	}
	if err := json.Unmarshal(data, &recs); err != nil {
		a.log.Warn("the shown plans cannot be read; they are ignored", "cluster", cluster, "error", err)
		return map[string]shownRecord{}
	}
	return recs
}

// storedShown returns the plan shown on pull request pr as the cluster's
// state keeps it.
func (a *Agent) storedShown(ctx context.Context, cluster string, pr int) (shownPlan, bool) {
	st, ok := a.progress.(ShownStore)
	if !ok {
		return shownPlan{}, false
	}
	rec, ok := a.loadShown(ctx, st, cluster)[strconv.Itoa(pr)]
	if !ok || rec.Plan == nil {
		return shownPlan{}, false
	}
	return shownPlan{plan: rec.Plan, commit: rec.Commit}, true
}
