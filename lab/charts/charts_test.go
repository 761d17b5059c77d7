package charts_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	repo "helm.sh/helm/v4/pkg/repo/v1"

	"github.com/taloscluster/taloscluster/lab/charts"
)

func get(t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// TestRepositoryIsHelms: Helm's own index loader reads index.yaml, every
// version's archive is there with the index's digest and loads with
// Helm's chart loader, MetalLB's and cert-manager's charts carry their
// CRDs, and a published version becomes the newest.
func TestRepositoryIsHelms(t *testing.T) {
	t.Parallel()
	r, err := charts.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(r)
	t.Cleanup(srv.Close)
	c := srv.Client()

	index := func() *repo.IndexFile {
		code, data := get(t, c, srv.URL+charts.IndexPath)
		if code != http.StatusOK {
			t.Fatalf("index.yaml: %d", code)
		}
		file := filepath.Join(t.TempDir(), "index.yaml")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		idx, err := repo.LoadIndexFile(file)
		if err != nil {
			t.Fatalf("Helm does not load the index: %v", err)
		}
		return idx
	}
	idx := index()
	for name, versions := range charts.Versions {
		if got := len(idx.Entries[name]); got != len(versions) {
			t.Errorf("%s: %d versions in the index, want %d", name, got, len(versions))
		}
		newest, err := idx.Get(name, "")
		if err != nil || newest.Version != versions[len(versions)-1] {
			t.Errorf("%s: the newest is %v (%v), want %s", name, newest, err, versions[len(versions)-1])
		}
		for _, cv := range idx.Entries[name] {
			if cv.APIVersion != "v2" || cv.AppVersion == "" || len(cv.URLs) != 1 || cv.Created.IsZero() {
				t.Errorf("%s %s: index entry %+v", name, cv.Version, cv)
			}
			code, data := get(t, c, srv.URL+"/"+cv.URLs[0])
			if code != http.StatusOK {
				t.Fatalf("%s: %d", cv.URLs[0], code)
			}
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != cv.Digest {
				t.Errorf("%s: the digest differs from the index's", cv.URLs[0])
			}
			ch, err := loader.LoadArchive(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s: Helm does not load it: %v", cv.URLs[0], err)
			}
			if ch.Metadata.Name != name || ch.Metadata.Version != cv.Version {
				t.Errorf("%s: the chart is %s %s", cv.URLs[0], ch.Metadata.Name, ch.Metadata.Version)
			}
			var crds []string
			for _, f := range ch.CRDObjects() {
				crds = append(crds, string(f.File.Data))
			}
			all := strings.Join(crds, "\n")
			switch name {
			case "metallb":
				if !strings.Contains(all, "kind: IPAddressPool") || !strings.Contains(all, "kind: L2Advertisement") || !strings.Contains(all, "name: v1beta1") {
					t.Errorf("metallb's CRDs: %s", all)
				}
			case "cert-manager":
				if !strings.Contains(all, "kind: ClusterIssuer") || !strings.Contains(all, "scope: Cluster") {
					t.Errorf("cert-manager's CRDs: %s", all)
				}
			}
		}
	}

	if err := r.Publish("metallb", "0.16.0"); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish("metallb", "0.16.0"); err == nil {
		t.Error("publishing a version twice is not refused")
	}
	if newest, err := index().Get("metallb", ""); err != nil || newest.Version != "0.16.0" {
		t.Errorf("after publishing, the newest metallb is %v (%v)", newest, err)
	}
}

// TestGatewayReleases: GitHub's latest release names the last published
// tag, whose standard-install.yaml is served; others are not found. A
// published manifest is served too.
func TestGatewayReleases(t *testing.T) {
	t.Parallel()
	r, err := charts.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(r)
	t.Cleanup(srv.Close)
	c := srv.Client()
	latest := func() string {
		_, data := get(t, c, srv.URL+charts.GatewayLatestPath)
		var rel struct {
			Tag string `json:"tag_name"`
		}
		if err := json.Unmarshal(data, &rel); err != nil {
			t.Fatal(err)
		}
		return rel.Tag
	}
	if got := latest(); got != charts.GatewayVersions[len(charts.GatewayVersions)-1] {
		t.Errorf("latest %q", got)
	}
	r.PublishGateway("v1.4.0")
	if got := latest(); got != "v1.4.0" {
		t.Errorf("latest after publishing %q", got)
	}
	manifest := func(v string) (int, string) {
		code, data := get(t, c, srv.URL+strings.ReplaceAll(charts.GatewayManifest, "{version}", v))
		return code, string(data)
	}
	if code, data := manifest("v1.4.0"); code != http.StatusOK || !strings.Contains(data, "bundle-version: v1.4.0") || !strings.Contains(data, "kind: GatewayClass") {
		t.Errorf("v1.4.0's manifest: %d %s", code, data)
	}
	if code, _ := manifest("v9.9.9"); code != http.StatusNotFound {
		t.Errorf("an unknown release: %d", code)
	}
	r.PublishManifest("mine.yaml", []byte("kind: ConfigMap\n"))
	if code, data := get(t, c, srv.URL+charts.ManifestPrefix+"mine.yaml"); code != http.StatusOK || string(data) != "kind: ConfigMap\n" {
		t.Errorf("a published manifest: %d %s", code, data)
	}
	if code, _ := get(t, c, srv.URL+charts.ManifestPrefix+"other.yaml"); code != http.StatusNotFound {
		t.Errorf("a manifest not published: %d", code)
	}
}

// TestFaults: a path answers 500, or hangs until the client gives up,
// and serves again once the fault is cleared.
func TestFaults(t *testing.T) {
	t.Parallel()
	r, err := charts.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(r)
	t.Cleanup(srv.Close)
	c := srv.Client()
	r.SetFault(charts.IndexPath, charts.Fail500)
	if code, _ := get(t, c, srv.URL+charts.IndexPath); code != http.StatusInternalServerError {
		t.Errorf("with a 500 fault: %d", code)
	}
	r.SetFault(charts.IndexPath, charts.Hang)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+charts.IndexPath, nil)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Error("a hanging path answered")
	}
	r.SetFault(charts.IndexPath, charts.NoFault)
	if code, _ := get(t, c, srv.URL+charts.IndexPath); code != http.StatusOK {
		t.Errorf("with the fault cleared: %d", code)
	}
	if r.Hits(charts.IndexPath) != 3 {
		t.Errorf("hits %d", r.Hits(charts.IndexPath))
	}
}
