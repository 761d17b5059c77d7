package main

import (
	"slices"
	"testing"
	"testing/fstest"
)

// An OpenStack cluster's Keystone URL, Image Factory and CA bundle are all
// under the pull-request endpoint policy, as Proxmox's are: a pull request
// cannot send the application credential, or the trust of the boot image,
// elsewhere.
func TestAgentEndpointsOfAnOpenStackCluster(t *testing.T) {
	t.Parallel()
	files := fstest.MapFS{
		"cluster.yaml": {Data: []byte(`name: cloud
talos: {version: v1.13.8}
kubernetes: {version: v1.36.1}
controlplane: {count: 3, flavor: gp.medium, disk: 40}
openstack:
  url: https://keystone.example:5000/v3
  availability_zone: nova
  external_net: ext-net
  tls_verify: ca.pem
  image_factory: https://factory.example
network:
  cluster: {cidr: 10.20.0.0/24}
  dns: []
  ntp: [ntp.example]
`)},
		"ca.pem": {Data: []byte("not read as a certificate here")},
	}
	got, err := (&agentRunner{}).Endpoints("clusters/cloud", files)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range got.URLs {
		keys = append(keys, e.Key+"="+e.URL)
	}
	want := []string{"openstack.url=https://keystone.example:5000/v3", "openstack.image_factory=https://factory.example"}
	if !slices.Equal(keys, want) {
		t.Errorf("URLs %v, want %v", keys, want)
	}
	if len(got.TLS) != 1 || got.TLS[0].Key != "openstack.tls_verify" || got.TLS[0].CAFile != "ca.pem" || got.TLS[0].CADigest == "" || got.TLS[0].CADigest == "unreadable" {
		t.Errorf("TLS %+v, want openstack.tls_verify with the bundle's digest", got.TLS)
	}
}

// The plugin sections' URLs a credential goes to (rancher.url,
// argocd.git.url) or the agent fetches from while planning (a charts
// entry's repo and manifests) are under the endpoint policy too; a known
// chart's default repository is not a pull request's to set.
func TestAgentEndpointsOfThePlugins(t *testing.T) {
	t.Parallel()
	files := fstest.MapFS{
		"cluster.yaml": {Data: []byte(`name: plugged
talos: {version: v1.13.8}
kubernetes: {version: v1.36.1}
controlplane: {count: 1, flavor: gp.medium, disk: 40}
openstack:
  url: https://keystone.example:5000/v3
  availability_zone: nova
  external_net: ext-net
network:
  cluster: {cidr: 10.20.0.0/24}
  dns: []
  ntp: [ntp.example]
rancher:
  url: https://rancher.example
  token: token-abc:secret
argocd:
  context: argo
  git: {url: https://git.example/apps.git}
  infra: {url: https://git.example/infra.git}
charts:
  traefik: {}
  custom: {repo: https://charts.example/stable, namespace: custom}
  crds: {manifest: [https://raw.example/a.yaml, https://raw.example/b.yaml]}
`)},
	}
	got, err := (&agentRunner{}).Endpoints("clusters/plugged", files)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range got.URLs {
		keys = append(keys, e.Key+"="+e.URL)
	}
	want := []string{"openstack.url=https://keystone.example:5000/v3", "openstack.image_factory=https://factory.talos.dev",
		"rancher.url=https://rancher.example", "argocd.git.url=https://git.example/apps.git",
		"charts.crds.manifest=https://raw.example/a.yaml", "charts.crds.manifest=https://raw.example/b.yaml",
		"charts.custom.repo=https://charts.example/stable"}
	if !slices.Equal(keys, want) {
		t.Errorf("URLs\n%v, want\n%v", keys, want)
	}
}
