// Package reconcile is the engine. It works in three steps, and plan and
// converge share all of them:
//
//   - Observe reads the cluster once, changing nothing: the provider's
//     inventory, the state files, each node's Talos facts, etcd and the
//     Kubernetes API; a part that could not be read is unknown with the
//     reason, never empty.
//   - Plan (the only planner) turns the desired cluster and the observation
//     into ordered steps across the provider, the state, Talos, Kubernetes
//     and gates, plus refusals and warnings. It does no I/O; plan --offline
//     is Plan with an observation that found nothing.
//   - Converge runs exactly the plan's steps in order; each checks its
//     precondition just before it acts.
//
// Nothing here knows about Git or GitHub.
package reconcile
