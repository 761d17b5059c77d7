// Package plugintest loads example cluster directories for the plugins'
// tests.
package plugintest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Load reads the repository's examples/<example> cluster directory with
// extra cluster.yaml text and secrets.yaml text appended, its CHANGE-ME
// placeholders filled.
func Load(t testing.TB, example, extra, secrets string) *spec.Cluster {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(here), "..", "..", "..", "examples", example)
	fsys := fstest.MapFS{}
	for f, add := range map[string]string{"cluster.yaml": extra, "secrets.yaml": secrets} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(data), "CHANGE-ME", "x0123456789") + "\n" + add
		fsys[f] = &fstest.MapFile{Data: []byte(text)}
	}
	c, _, err := spec.LoadFS(fsys, "c", spec.Options{})
	if err != nil {
		t.Fatalf("loading %s with %q: %v", example, extra, err)
	}
	return c
}
