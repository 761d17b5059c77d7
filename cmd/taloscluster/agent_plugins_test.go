package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	labcharts "github.com/taloscluster/taloscluster/lab/charts"
	labrancher "github.com/taloscluster/taloscluster/lab/rancher"
)

// TestAgentRunsChartsAndRancher: the agent trusts plugins.ca_file for the
// plugins' HTTPS; a pull request that adds charts and rancher sections to
// a built cluster (its chart repository an allowed endpoint, the Rancher
// token in the agent's secrets directory) is planned with the plugins'
// steps and nothing else; its merge installs the chart and registers the
// cluster with Rancher; no token reaches a comment, a status or the log.
func TestAgentRunsChartsAndRancher(t *testing.T) {
	t.Parallel()
	w := newAgentWorld(t, "127.183.67.0/24")
	w.convergedFirst(t)
	rs := labrancher.New(labrancher.Options{Token: rancherToken, NamespaceDelay: -1})
	rs.AddUser("openldap", "alice", "Alice")
	rancherURL := tlsServe(t, w.lab, rs)
	repo, err := labcharts.New()
	if err != nil {
		t.Fatal(err)
	}
	chartsURL := tlsServe(t, w.lab, repo)
	secrets := filepath.Join(w.cfg.SecretsDir, "clusters", "demo", "secrets.yaml")
	data, err := os.ReadFile(secrets)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secrets, append(data, "rancher:\n  url: '"+rancherURL+"'\n  token: '"+rancherToken+"'\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	w.secrets = append(w.secrets, rancherToken)
	w.cfg.Plugins.CAFile = w.cfg.Repository.CAFile
	w.cfg.AllowedEndpoints = []string{chartsURL}
	w.restart(t)

	section := "\nrancher:\n  admins: [alice@example.org]\ncharts:\n  lab-app: {repo: '" + chartsURL + "', version: 0.1.0}\n"
	head, err := w.repo.Commit("plugins", map[string]string{"clusters/demo/cluster.yaml": w.cluster + section}, "charts and rancher")
	if err != nil {
		t.Fatal(err)
	}
	pr, err := w.repo.OpenPR("alice", "plugins", "main", "Charts and Rancher")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the plan comment", func() bool { return w.status(head, "taloscluster/plan: clusters/demo") == "success" })
	comments := w.repo.Comments(pr.Number)
	if len(comments) != 1 {
		t.Fatalf("%d plan comments", len(comments))
	}
	body := comments[0].Body
	for _, want := range []string{"| helm-release | lab-app/lab-app |", "| rancher-cluster | demo |", "| rancher-agent |", "| rancher-member | alice@example.org |"} {
		if !strings.Contains(body, want) {
			t.Errorf("the plan comment does not show %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "machine ") {
		t.Errorf("the plan comment shows a machine step:\n%s", body)
	}

	merged, err := w.repo.Merge(pr.Number, "alice")
	if err != nil {
		t.Fatal(err)
	}
	w.pollUntil(t, "the converge of the merge", func() bool {
		return w.status(merged, "taloscluster/converge: clusters/demo") == "success"
	})
	if cl := rs.Clusters(); len(cl) != 1 || cl[0].Name != "demo" {
		t.Errorf("Rancher's clusters after the merge: %+v", cl)
	}
	k, ok := w.lab.Kube("demo")
	if !ok {
		t.Fatal("the lab has no Kubernetes API for demo")
	}
	cfg, err := k.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	releases, err := kc.CoreV1().Secrets("lab-app").List(t.Context(), metav1.ListOptions{LabelSelector: "owner=helm,name=lab-app"})
	if err != nil || len(releases.Items) != 1 {
		t.Errorf("the lab-app release after the merge: %v %v", releases, err)
	}

	var out strings.Builder
	for _, c := range w.repo.Comments(pr.Number) {
		out.WriteString(c.Body)
	}
	for _, sha := range []string{head, merged} {
		for _, s := range w.repo.Statuses(sha) {
			out.WriteString(s.Description + s.TargetURL)
		}
	}
	out.WriteString(w.logs.String())
	for _, s := range w.secrets {
		if strings.Contains(out.String(), s) {
			t.Fatalf("a secret leaked into comments, statuses or logs")
		}
	}
}
