// Package reconcile is the engine: it turns a validated cluster and what it
// observes of the world into a plan.Plan, and (later) executes that plan
// phase by phase. Nothing here knows about Git or GitHub.
package reconcile
