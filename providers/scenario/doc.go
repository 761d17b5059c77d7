// Package scenario holds the scale-down, rollout and remediation scenarios
// of docs/safety.md that do not depend on the provider, as one table run
// against both providers: each TestScenario runs as the subtests
// "proxmox" and "openstack", each in a lab world of its own (the lab's
// Proxmox VE cluster, or its OpenStack cloud of Keystone, Nova, Neutron and
// Glance), so every such rule is proven on both.
//
// A cloud (cloud_test.go) is what a scenario needs of a provider: building
// the lab world and the cluster directory, the provider for the engine,
// whether a machine exists and runs, stopping or deleting one behind the
// engine's back, the provider's mutating calls, and the lab log entries
// that mark a machine's creation and deletion (Proxmox's qemu.create and
// qemu.delete; Nova's compute.server.create and compute.server.delete, the
// latter followed by Neutron's network.port.delete of the machine's port
// unless the machine is replaced).
//
// The scenarios whose rule is Proxmox's own stay in providers/proxmox: the
// token's privileges (TestScenarioRestrictedTokenRefusesScaleDown), the config ISOs
// (TestScenarioOrphanedConfigISOIsDeleted), resizes that wait for a
// restart (TestScenarioRebootAppliesPendingResizes) and a new kubeapi_vip
// (TestScenarioNewEndpointIsWrittenOnceItAnswers; on OpenStack the
// endpoint is the provider's port). TestRolloutPlanOrder checks the
// refusal of a new endpoint together with restarts where cluster.yaml
// names the endpoint (Proxmox).
//
// The package has no non-test code: this file only documents it.
package scenario
