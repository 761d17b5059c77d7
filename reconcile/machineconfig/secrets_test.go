package machineconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

func TestWriteSecrets(t *testing.T) {
	t.Parallel()

	bundle, err := machineconfig.NewSecrets("v1.13.2")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("round trip with mode 0600", func(t *testing.T) {
		t.Parallel()

		dir := t.TempDir()
		path := filepath.Join(dir, "talossecrets.yaml")

		if err := machineconfig.WriteSecrets(path, bundle); err != nil {
			t.Fatal(err)
		}

		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}

		if mode := info.Mode().Perm(); mode != 0o600 {
			t.Errorf("mode %v, want 0600", mode)
		}

		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}

		if len(entries) != 1 {
			t.Errorf("directory holds %d entries, want only the secrets file", len(entries))
		}

		loaded, err := machineconfig.LoadSecrets(path)
		if err != nil {
			t.Fatal(err)
		}

		if loaded.Cluster.Secret != bundle.Cluster.Secret || loaded.Secrets.BootstrapToken != bundle.Secrets.BootstrapToken ||
			string(loaded.Certs.OS.Key) != string(bundle.Certs.OS.Key) {
			t.Error("loaded bundle differs from the written one")
		}

		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}

		// The layout `talosctl gen secrets` writes.
		for _, key := range []string{"cluster:\n    id: ", "secrets:\n    bootstraptoken: ", "trustdinfo:\n    token: ", "certs:\n    etcd:\n        crt: "} {
			if !strings.Contains(string(data), key) {
				t.Errorf("secrets file lacks %q", key)
			}
		}
	})

	t.Run("refuses to overwrite", func(t *testing.T) {
		t.Parallel()

		dir := t.TempDir()
		path := filepath.Join(dir, "talossecrets.yaml")

		if err := os.WriteFile(path, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}

		err := machineconfig.WriteSecrets(path, bundle)
		if !errors.Is(err, machineconfig.ErrSecretsExist) {
			t.Fatalf("err = %v, want ErrSecretsExist", err)
		}

		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name the file", err)
		}

		data, _ := os.ReadFile(path)
		if string(data) != "precious\n" {
			t.Errorf("existing file changed to %q", data)
		}

		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("temporary file left behind: %d entries", len(entries))
		}
	})

	t.Run("refuses a dangling symlink", func(t *testing.T) {
		t.Parallel()

		dir := t.TempDir()
		path := filepath.Join(dir, "talossecrets.yaml")

		if err := os.Symlink(filepath.Join(dir, "elsewhere"), path); err != nil {
			t.Fatal(err)
		}

		if err := machineconfig.WriteSecrets(path, bundle); !errors.Is(err, machineconfig.ErrSecretsExist) {
			t.Fatalf("err = %v, want ErrSecretsExist", err)
		}
	})
}

func TestLoadSecretsErrors(t *testing.T) {
	t.Parallel()

	const secretish = "s3cr3t-value-never-echoed"

	for _, tc := range []struct {
		name    string
		content string
	}{
		{"wrong types", "cluster:\n  id: [" + secretish + "]\n"},
		{"incomplete", "cluster:\n  id: abc\n  secret: " + secretish + "\n"},
		{"not yaml", "cluster: {" + secretish},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			path := filepath.Join(t.TempDir(), "talossecrets.yaml")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}

			_, err := machineconfig.LoadSecrets(path)
			if err == nil {
				t.Fatal("no error")
			}

			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}

			if strings.Contains(err.Error(), secretish) {
				t.Errorf("error %q quotes the file's contents", err)
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "talossecrets.yaml")

		_, err := machineconfig.LoadSecrets(path)
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v", err)
		}
	})
}
