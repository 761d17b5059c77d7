package talos_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/taloscluster/taloscluster/lab/talos"
)

// savedConfigPath is where Talos saves the machine config on the STATE
// partition. The machinery module of Talos 1.13 has no constant for it any
// more (constants.ConfigPath went in v1.10), and since v1.12 Talos never
// attaches STATE to the file tree, so the running node has no such file.
const savedConfigPath = "/system/state/config.yaml"

// readFile reads a file with the machinery client's Read, as talosctl read
// does; the call's error comes out of the reader.
func readFile(ctx context.Context, c *client.Client, path string) ([]byte, error) {
	r, err := c.Read(ctx, path)
	if err != nil {
		return nil, err
	}

	defer r.Close() //nolint:errcheck

	return io.ReadAll(r)
}

func TestRead(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 9)
	w := newWorld(t, talos.Options{})

	cp1, worker := tc.addrs[tc.cp(1)], tc.addrs[tc.worker(1)]
	maintenance := tc.addrs[tc.cp(2)]

	for _, host := range []string{tc.cp(1), tc.worker(1)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	if err := w.Boot(t.Context(), maintenance, nil); err != nil {
		t.Fatal(err)
	}

	waitUp(t, w, cp1, talos.ModeRunning)
	waitUp(t, w, worker, talos.ModeRunning)
	waitUp(t, w, maintenance, talos.ModeMaintenance)

	admin := tc.client(t, cp1)

	for _, tt := range []struct {
		name    string
		ctx     func(context.Context) context.Context
		path    string
		code    codes.Code
		message string
	}{
		{
			name:    "the saved machine config is not a file of a running Talos 1.13 node",
			path:    savedConfigPath,
			code:    codes.NotFound,
			message: "stat /system/state/config.yaml: no such file or directory",
		},
		{
			name:    "through the endpoint to another node",
			ctx:     func(ctx context.Context) context.Context { return client.WithNode(ctx, worker.String()) },
			path:    savedConfigPath,
			code:    codes.NotFound,
			message: "stat /system/state/config.yaml: no such file or directory",
		},
		{
			name:    "another path",
			path:    "/etc/hosts.lab",
			code:    codes.NotFound,
			message: "stat /etc/hosts.lab: no such file or directory",
		},
		{
			name:    "a directory",
			path:    "/system/state",
			code:    codes.Unknown,
			message: "path must be a regular file",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.ctx != nil {
				ctx = tt.ctx(ctx)
			}

			data, err := readFile(ctx, admin, tt.path)
			if code := client.StatusCode(err); code != tt.code || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("read %s: %q, %v; want %s %q", tt.path, data, err, tt.code, tt.message)
			}
		})
	}

	t.Run("proxied and logged for the target", func(t *testing.T) {
		if !slices.ContainsFunc(w.Log(), func(op talos.Op) bool {
			return op.Short() == "Read" && op.Node == worker && op.Endpoint == cp1 && op.Code == codes.NotFound
		}) {
			t.Errorf("the log has no proxied Read: %v", w.Log())
		}
	})

	t.Run("os:admin only", func(t *testing.T) {
		for _, r := range []role.Role{role.Operator, role.Reader} {
			_, err := readFile(t.Context(), tc.client(t, cp1, r), savedConfigPath)
			if code := client.StatusCode(err); code != codes.PermissionDenied {
				t.Errorf("read as %s: %v, want PermissionDenied", r, err)
			}
		}
	})

	t.Run("refused in maintenance mode", func(t *testing.T) {
		_, err := readFile(t.Context(), insecureClient(t, maintenance), savedConfigPath)
		if code := client.StatusCode(err); code != codes.PermissionDenied {
			t.Errorf("read in maintenance mode: %v, want PermissionDenied", err)
		}
	})
}
