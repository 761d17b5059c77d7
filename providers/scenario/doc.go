// Package scenario holds the scale-down and rollout scenarios of
// docs/safety.md that do not depend on the provider, as one table run
// against both providers: each TestScenario runs as the subtests
// "proxmox" and "openstack", each in a lab world of its own (the lab's
// Proxmox VE cluster, or its OpenStack cloud of Keystone, Nova, Neutron and
// Glance), so every such rule is proven on both.
//
// A cloud (cloud_test.go) is what a scenario needs of a provider: building
// the lab world and the cluster directory, the provider for the engine,
// whether a machine exists and runs, stopping or deleting one behind the
// engine's back, the provider's mutating calls, and the lab log entries
// that mark a machine's deletion (Proxmox's qemu.delete; Nova's
// compute.server.delete, followed by Neutron's network.port.delete of the
// machine's port).
//
// The scenarios whose rule is Proxmox's own stay in providers/proxmox:
// the token's privileges (TestScenarioRestrictedTokenRefusesScaleDown),
// the config ISOs (TestScenarioOrphanedConfigISOIsDeleted), resizes that
// wait for a restart (TestScenarioRebootAppliesPendingResizes), a new
// kubeapi_vip (TestScenarioNewEndpointIsWrittenOnceItAnswers; the endpoint
// is the provider's port on OpenStack) and the remediation scenarios (the
// OpenStack provider cannot replace a machine yet: it is no
// reconcile.Replacer).
//
// The package has no non-test code: this file only documents it.
package scenario
