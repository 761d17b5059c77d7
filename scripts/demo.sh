#!/usr/bin/env bash
# The demo: start the simulated datacenter, converge a three-control-plane
# Talos cluster on its Proxmox API with the real code paths, show its
# status, register it with Argo CD and Rancher and install a chart at the
# end of its converge, show that a second plan is empty, shrink it, upgrade its
# Kubernetes, and stop the lab.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=bin
work=$(mktemp -d "${TMPDIR:-/tmp}/taloslab.XXXXXX")
lab_pid=""
agent_pid=""
cleanup() {
	if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null || true; wait "$agent_pid" 2>/dev/null || true; fi
	if [ -n "$lab_pid" ]; then kill "$lab_pid" 2>/dev/null || true; wait "$lab_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "== starting the lab in $work"
"$bin/taloslab" up --dir "$work" > "$work/lab.log" 2>&1 &
lab_pid=$!
# The lab writes lab.env once it is up, the cluster the Python tool would
# have left (examples/proxmox-legacy) included: allow a minute.
for _ in $(seq 1 600); do
	[ -f "$work/lab.env" ] && break
	kill -0 "$lab_pid" 2>/dev/null || { cat "$work/lab.log"; exit 1; }
	sleep 0.1
done
[ -f "$work/lab.env" ] || { echo "the lab did not come up"; cat "$work/lab.log"; exit 1; }
cat "$work/lab.log"
# shellcheck disable=SC1091
. "$work/lab.env"

cluster="$TALOSLAB_EXAMPLES/proxmox"
echo
echo "== cluster.yaml"
sed -n '/^name:/,$p' "$cluster/cluster.yaml"
echo
echo "== taloscluster plan (nothing exists yet)"
"$bin/taloscluster" plan -C "$cluster" | tail -n 3
if [ -n "${TALOSLAB_ARGOCD_KUBECONFIG:-}" ]; then
	echo
	echo "== argocd: converge registers the cluster with Argo CD at its end (the lab's Argo CD side)"
	cp "$TALOSLAB_ARGOCD_KUBECONFIG" "$cluster/argocd.kubeconfig"
	cat >> "$cluster/cluster.yaml" <<'YAML'

argocd:
  kubeconfig: argocd.kubeconfig
  admins: [ops@example.org]
  git: {url: https://git.example.org/k8s/apps.git}
  infra: {url: https://git.example.org/k8s/infra.git}
YAML
else
	echo
	echo "== argocd: skipped, the lab has no Argo CD side (no real kube-apiserver named; .ci/kube-binaries.sh)"
fi
echo
echo "== rancher and charts: converge also registers the cluster with the lab's Rancher and installs a chart of the lab's repository"
cat >> "$cluster/cluster.yaml" <<YAML

rancher:
  admins: [alice@example.org]
  users: [bob]
charts:
  lab-app: {repo: '$TALOSLAB_CHARTS_URL', version: 0.1.0}
YAML
cat >> "$cluster/secrets.yaml" <<YAML
rancher:
  url: '$TALOSLAB_RANCHER_URL'
  token: '$TALOSLAB_RANCHER_TOKEN'
YAML
echo
echo "== taloscluster converge --yes"
"$bin/taloscluster" converge --yes -C "$cluster"
echo
echo "== taloscluster status"
"$bin/taloscluster" status -C "$cluster"
echo
echo "== taloscluster plan (after converge: nothing to do)"
"$bin/taloscluster" plan -C "$cluster"
echo
echo "== taloscluster check: the plugins against cluster.yaml"
# check exits 1 when something needs attention (an update to take): the
# plugins' part is what is shown here.
"$bin/taloscluster" check -C "$cluster" --github-api "$TALOSLAB_GITHUB_API" --ca-file "$TALOSLAB_CA" > "$work/check.txt" 2>&1 || true
sed -n '/^Plugins/,/^$/p' "$work/check.txt"
echo
echo "== chart upgrade: charts.lab-app.version 0.1.0 -> 0.2.0"
sed -i 's/lab-app: {repo: \(.*\), version: 0.1.0}/lab-app: {repo: \1, version: 0.2.0}/' "$cluster/cluster.yaml"
"$bin/taloscluster" plan -C "$cluster" | grep -E 'lab-app|^Plan' || true
if ! "$bin/taloscluster" converge --yes -C "$cluster" > "$work/chart-upgrade.log" 2>&1; then
	cat "$work/chart-upgrade.log"; echo "the chart upgrade failed"; exit 1
fi
grep -E 'helm-release' "$work/chart-upgrade.log"
echo
echo "== scale-down: workers.worker.count 2 -> 1 (drain, reset, Node and VM removed; docs/safety.md)"
sed -i '/^workers:/,/^[a-z]/ s/^    count: 2$/    count: 1/' "$cluster/cluster.yaml"
"$bin/taloscluster" plan -C "$cluster" | grep -E '^(Removes|scale-down:|  [-+~=*vx] .*worker-02|Plan:)' || true
if ! "$bin/taloscluster" converge --yes -C "$cluster" > "$work/scale-down.log" 2>&1; then
	cat "$work/scale-down.log"; echo "the scale-down failed"; exit 1
fi
grep -E 'scale-down|healthy' "$work/scale-down.log"
echo
echo "== rollout: kubernetes.version v1.36.1 -> v1.36.2 (each control plane's API server, controller manager and scheduler, kube-proxy, every kubelet; docs/safety.md)"
sed -i '/^kubernetes:/,/^[a-z]/ s/^  version: v1.36.1$/  version: v1.36.2/' "$cluster/cluster.yaml"
"$bin/taloscluster" plan -C "$cluster" | grep -E '^(  \^ .*(controlplane-01|kube-proxy|worker-01)|Summary)' | cut -c1-150 || true
if ! "$bin/taloscluster" converge --yes -C "$cluster" > "$work/rollout.log" 2>&1; then
	cat "$work/rollout.log"; echo "the rollout failed"; exit 1
fi
grep -E 'healthy' "$work/rollout.log"
echo
echo "== OpenStack: the same engine on the lab's Keystone, Nova, Neutron and Glance (examples/openstack)"
"$bin/taloscluster" plan -C "$TALOSLAB_EXAMPLES/openstack" | grep -E '^(Plan|Summary|  [-+~] +(port +[a-z0-9]+-(kubeapi|ingress)|floating-ip|machine-configs|machine +[a-z0-9]+-controlplane-01|kubeconfig) )' | cut -c1-150 || true
if ! "$bin/taloscluster" converge --yes -C "$TALOSLAB_EXAMPLES/openstack" > "$work/openstack.log" 2>&1; then
	cat "$work/openstack.log"; exit 1
fi
grep -E 'made the machine configs|healthy' "$work/openstack.log"
echo "kubeconfig for people: $(grep -m1 'server:' "$TALOSLAB_EXAMPLES/openstack/kubeconfig" | tr -d ' ')   (the API's floating IP; the engine itself uses the VIP)"
"$bin/taloscluster" plan -C "$TALOSLAB_EXAMPLES/openstack" | tail -n 2
echo
echo "== taloscluster plan of a cluster the Python tool built (examples/proxmox-legacy): only the differences docs/migration.md lists"
"$bin/taloscluster" plan -C "$TALOSLAB_EXAMPLES/proxmox-legacy" | grep -E '^(refused|Plan|Summary|  [-+~=*>^@v] .*(controlplane-01|talosconfig))' | cut -c1-160 || true
echo
echo
echo "== GitOps: the agent against the lab forge ($TALOSLAB_REPO)"
sed -n '/^repository:/,$p' "$TALOSLAB_AGENT_CONFIG"
"$bin/taloscluster" agent --config "$TALOSLAB_AGENT_CONFIG" > "$work/agent.log" 2>&1 &
agent_pid=$!
if ! "$bin/taloslab" demo-gitops --dir "$work"; then
	echo "== agent log"; cat "$work/agent.log"; exit 1
fi
echo
echo "== the agent's status page: $TALOSLAB_AGENT_URL/ ; the lab's control API: $TALOSLAB_CONTROL_URL/lab/v1/"
