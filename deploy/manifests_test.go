package deploy_test

import (
	"encoding/json"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/taloscluster/taloscluster/agent"
)

// namespace is where the manifests put everything.
const namespace = "taloscluster"

// TestRenderedObjects: both kustomizations build, the overlay holds exactly
// the expected objects, all in one namespace, and no Secret: the agent's
// Secrets are created by hand, never from Git.
func TestRenderedObjects(t *testing.T) {
	if got := render(t, baseDir); len(got) == 0 {
		t.Fatal("the base renders no object")
	}
	objs := render(t, overlayDir)
	var got []string
	for _, o := range objs {
		name := o.GetName()
		if strings.HasPrefix(name, "taloscluster-config-") {
			name = "taloscluster-config-<hash>"
		}
		got = append(got, o.GetKind()+"/"+name)
		if o.GetKind() == "Namespace" {
			continue
		}
		if o.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q, not %s", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}
	slices.Sort(got)
	want := []string{
		"ConfigMap/taloscluster-config-<hash>",
		"ConfigMap/taloscluster-dashboard",
		"Deployment/taloscluster",
		"Namespace/taloscluster",
		"PrometheusRule/taloscluster",
		"Role/taloscluster-agent",
		"RoleBinding/taloscluster-agent",
		"Service/taloscluster",
		"ServiceAccount/taloscluster",
		"ServiceMonitor/taloscluster",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rendered objects:\n got %q\nwant %q", got, want)
	}
}

// deployment returns the rendered Deployment and its one container.
func deployment(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	var d appsv1.Deployment
	convert(t, find(t, objs, "Deployment", "taloscluster"), &d)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", n)
	}
	return &d, &d.Spec.Template.Spec.Containers[0]
}

// TestDeploymentSecurity pins the Deployment's security settings, probes
// and resources, so that none regresses: non-root as 65532, a read-only
// root file system, no privilege escalation, every capability dropped,
// the runtime's seccomp profile, liveness on /healthz and readiness on
// /readyz, requests and limits, writable emptyDirs only, the service
// account token mounted (the kubernetes state backend needs it).
func TestDeploymentSecurity(t *testing.T) {
	for _, dir := range []string{baseDir, overlayDir} {
		t.Run(dir, func(t *testing.T) {
			d, c := deployment(t, render(t, dir))
			pod := d.Spec.Template.Spec
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("replicas = %v, want 1", d.Spec.Replicas)
			}
			// Effective settings: the container's, else the pod's.
			psc, csc := pod.SecurityContext, c.SecurityContext
			if psc == nil || csc == nil {
				t.Fatal("the pod and the container must both have a securityContext")
			}
			nonRoot := csc.RunAsNonRoot
			if nonRoot == nil {
				nonRoot = psc.RunAsNonRoot
			}
			if nonRoot == nil || !*nonRoot {
				t.Error("runAsNonRoot is not true")
			}
			user := csc.RunAsUser
			if user == nil {
				user = psc.RunAsUser
			}
			if user == nil || *user != 65532 {
				t.Errorf("runAsUser = %v, want 65532", user)
			}
			seccomp := csc.SeccompProfile
			if seccomp == nil {
				seccomp = psc.SeccompProfile
			}
			if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccompProfile = %v, want RuntimeDefault", seccomp)
			}
			if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("the pod's seccompProfile is not RuntimeDefault")
			}
			if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
				t.Error("readOnlyRootFilesystem is not true")
			}
			if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
				t.Error("allowPrivilegeEscalation is not false")
			}
			if csc.Privileged != nil && *csc.Privileged {
				t.Error("the container is privileged")
			}
			if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
				t.Errorf("capabilities = %+v, want drop [ALL] and no add", csc.Capabilities)
			}
			if pod.HostNetwork || pod.HostPID || pod.HostIPC {
				t.Error("the pod shares a host namespace")
			}
			if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
				t.Error("automountServiceAccountToken is not true: the kubernetes state backend needs the token")
			}
			if pod.ServiceAccountName != "taloscluster" {
				t.Errorf("serviceAccountName = %q", pod.ServiceAccountName)
			}

			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := c.Resources.Requests[res]
				lim, okLim := c.Resources.Limits[res]
				if !okReq || !okLim || req.IsZero() || lim.IsZero() {
					t.Errorf("%s needs a request and a limit (requests %v, limits %v)", res, c.Resources.Requests, c.Resources.Limits)
				} else if req.Cmp(lim) > 0 {
					t.Errorf("%s request %s is above its limit %s", res, req.String(), lim.String())
				}
			}

			probe := func(name string, p *corev1.Probe, wantPath string) {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("%s: want an HTTP GET of %s", name, wantPath)
					return
				}
				if p.HTTPGet.Path != wantPath || p.HTTPGet.Port != intstr.FromString("http-metrics") {
					t.Errorf("%s: GET %s on %s, want %s on http-metrics", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), wantPath)
				}
			}
			probe("livenessProbe", c.LivenessProbe, "/healthz")
			probe("readinessProbe", c.ReadinessProbe, "/readyz")
			probe("startupProbe", c.StartupProbe, "/healthz")

			// Every volume is read-only but the two emptyDirs; no hostPath.
			writable := map[string]bool{}
			for _, v := range pod.Volumes {
				switch {
				case v.HostPath != nil:
					t.Errorf("volume %s is a hostPath", v.Name)
				case v.EmptyDir != nil:
					writable[v.Name] = true
				}
			}
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = m.Name
				if !writable[m.Name] && !m.ReadOnly {
					t.Errorf("mount %s (%s) is writable; only emptyDirs may be", m.MountPath, m.Name)
				}
			}
			if !writable[mounts["/tmp"]] {
				t.Error("/tmp is not an emptyDir")
			}
		})
	}
}

// TestAgentConfig: the agent.yaml each kustomization ships loads with the
// agent's own loader, uses the kubernetes backend in the manifests'
// namespace, and names the paths where the Deployment mounts things: the
// clone on an emptyDir, the token and the credentials from their Secrets,
// the port the Service and probes use.
func TestAgentConfig(t *testing.T) {
	for _, dir := range []string{baseDir, overlayDir} {
		t.Run(dir, func(t *testing.T) {
			objs := render(t, dir)
			d, c := deployment(t, objs)
			pod := d.Spec.Template.Spec

			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v
			}
			mountOf := map[string]corev1.Volume{} // mount path -> volume
			for _, m := range c.VolumeMounts {
				mountOf[m.MountPath] = volumes[m.Name]
			}

			// The config file: --config names a key of the mounted ConfigMap.
			var configPath string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--config="); ok {
					configPath = v
				}
			}
			if configPath == "" {
				t.Fatalf("the container's args %q have no --config=", c.Args)
			}
			if slices.Contains(c.Args, "agent") || len(c.Command) > 0 {
				t.Errorf("command %q args %q: the image's entrypoint is already `/taloscluster agent`", c.Command, c.Args)
			}
			cmVol := mountOf[path.Dir(configPath)]
			if cmVol.ConfigMap == nil {
				t.Fatalf("--config=%s is not in a mounted ConfigMap", configPath)
			}
			var cm corev1.ConfigMap
			convert(t, find(t, objs, "ConfigMap", cmVol.ConfigMap.Name), &cm)
			text, ok := cm.Data[path.Base(configPath)]
			if !ok {
				t.Fatalf("ConfigMap %s has no key %s", cm.Name, path.Base(configPath))
			}
			file := t.TempDir() + "/agent.yaml"
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := agent.LoadConfig(file)
			if err != nil {
				t.Fatalf("the shipped agent.yaml does not load: %v", err)
			}

			if cfg.State.Backend != "kubernetes" || cfg.State.Namespace != namespace {
				t.Errorf("state = %+v, want the kubernetes backend in %s", cfg.State, namespace)
			}
			if v := mountOf[cfg.DataDir]; v.EmptyDir == nil {
				t.Errorf("data_dir %s is not an emptyDir mount", cfg.DataDir)
			}
			secretFile := func(key, file, secret string) {
				v := mountOf[path.Dir(file)]
				if v.Secret == nil || v.Secret.SecretName != secret {
					t.Errorf("%s %s is not in the mounted Secret %s", key, file, secret)
				}
			}
			secretFile("github.token_file", cfg.GitHub.TokenFile, "taloscluster-github")
			if cfg.Repository.TokenFile != "" {
				secretFile("repository.token_file", cfg.Repository.TokenFile, "taloscluster-github")
			}
			if v := mountOf[cfg.SecretsDir]; v.Secret == nil || v.Secret.SecretName != "taloscluster-credentials" {
				t.Errorf("secrets_dir %s is not the mounted Secret taloscluster-credentials", cfg.SecretsDir)
			} else {
				for _, it := range v.Secret.Items {
					if path.Base(it.Path) != "secrets.yaml" || strings.Contains(it.Key, "/") {
						t.Errorf("credentials item %s -> %s: want <cluster path>/secrets.yaml", it.Key, it.Path)
					}
				}
			}
			if !strings.HasPrefix(cfg.Listen, "0.0.0.0:") {
				t.Errorf("listen %s: the probes and the Service need the pod's address", cfg.Listen)
			}
			port := c.Ports[0]
			if port.Name != "http-metrics" || !strings.HasSuffix(cfg.Listen, ":"+strconv.Itoa(int(port.ContainerPort))) {
				t.Errorf("container port %s/%d does not match listen %s", port.Name, port.ContainerPort, cfg.Listen)
			}
			if cfg.PublicURL == "" {
				t.Error("public_url is empty: links in comments need it")
			}
			// The replica's identity in its Leases is the pod's name.
			podName := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" })
			if podName < 0 || c.Env[podName].ValueFrom == nil || c.Env[podName].ValueFrom.FieldRef == nil ||
				c.Env[podName].ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Error("the container has no POD_NAME from the downward API (metadata.name)")
			}
		})
	}
}

// TestRBAC: the Role is namespaced and grants exactly what the agent uses:
// state Secrets, the Leases of the mutation lock, and Events.
func TestRBAC(t *testing.T) {
	objs := render(t, overlayDir)
	var role rbacv1.Role
	convert(t, find(t, objs, "Role", ""), &role)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	got, _ := json.Marshal(role.Rules)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Errorf("Role rules:\n got %s\nwant %s", got, exp)
	}
	for _, o := range objs {
		if strings.HasPrefix(o.GetKind(), "Cluster") {
			t.Errorf("%s %s: the agent needs no cluster-wide access", o.GetKind(), o.GetName())
		}
	}
	var rb rbacv1.RoleBinding
	convert(t, find(t, objs, "RoleBinding", ""), &rb)
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding refers to %s %s", rb.RoleRef.Kind, rb.RoleRef.Name)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != "taloscluster" || rb.Subjects[0].Namespace != namespace {
		t.Errorf("RoleBinding subjects = %+v, want the ServiceAccount taloscluster/%s", rb.Subjects, namespace)
	}
}

// TestMonitoringObjects: the Service selects the agent's pod and exposes
// http-metrics; the ServiceMonitor selects that Service and port, and
// gives a job label that the TalosclusterAgentDown alert matches; the
// dashboard ConfigMap is labelled for the Grafana sidecar and holds valid
// JSON.
func TestMonitoringObjects(t *testing.T) {
	objs := render(t, overlayDir)
	d, _ := deployment(t, objs)
	var svc corev1.Service
	convert(t, find(t, objs, "Service", ""), &svc)
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pod does not have", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http-metrics" || svc.Spec.Ports[0].Port != 8080 ||
		svc.Spec.Ports[0].TargetPort != intstr.FromString("http-metrics") {
		t.Errorf("Service ports = %+v, want http-metrics 8080 -> http-metrics", svc.Spec.Ports)
	}

	sm := find(t, objs, "ServiceMonitor", "")
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %s", sm.GetAPIVersion())
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		t.Error("the ServiceMonitor selects no label")
	}
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the Service does not have", k, v)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints = %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != "http-metrics" || ep["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoint = %v, want port http-metrics, path /metrics", ep)
	}
	jobLabel, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel")
	job := svc.Labels[jobLabel]
	if job == "" {
		t.Fatalf("the ServiceMonitor's jobLabel %q is not a label of the Service", jobLabel)
	}
	down := alertByName(t, loadRules(t), "TalosclusterAgentDown")
	m := regexp.MustCompile(`job=~"([^"]+)"`).FindStringSubmatch(down.Expr)
	if m == nil || !regexp.MustCompile("^(?:"+m[1]+")$").MatchString(job) {
		t.Errorf("TalosclusterAgentDown (%s) does not match the job label %q", down.Expr, job)
	}

	var dash corev1.ConfigMap
	convert(t, find(t, objs, "ConfigMap", "taloscluster-dashboard"), &dash)
	if dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels = %v, want grafana_dashboard: \"1\"", dash.Labels)
	}
	if len(dash.Data) != 1 {
		t.Fatalf("the dashboard ConfigMap holds %d files, want 1", len(dash.Data))
	}
	for name, text := range dash.Data {
		if !strings.HasSuffix(name, ".json") || !json.Valid([]byte(text)) {
			t.Errorf("dashboard %s is not a valid JSON file", name)
		}
	}
}

// TestDockerfile: the image is built without cgo, with -trimpath, runs as
// 65532 on distroless, and starts the agent.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{
		"CGO_ENABLED=0",
		"-trimpath",
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"USER 65532:65532",
		`ENTRYPOINT ["/taloscluster", "agent"]`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the Dockerfile does not contain %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^FROM golang:\S+ AS build$`).MatchString(text) {
		t.Error("the Dockerfile has no golang build stage")
	}
}
