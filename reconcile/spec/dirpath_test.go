package spec_test

import (
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

func TestDirPathKeepsToTheClusterDirectory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want, refused string
	}{
		{in: "ca.pem", want: "ca.pem"},
		{in: "./certs/ca.pem", want: "certs/ca.pem"},
		{in: "certs/../ca.pem", want: "ca.pem"},
		{in: "/dev/zero", refused: "/dev/zero is an absolute path"},
		{in: "/etc/ssl/certs/ca-certificates.crt", refused: "is an absolute path"},
		{in: "../x.pem", refused: "../x.pem leaves the cluster's directory"},
		{in: "certs/../../x.pem", refused: "leaves the cluster's directory"},
		{in: "..", refused: "leaves the cluster's directory"},
		{in: ".", refused: "names the cluster's directory"},
	} {
		got, err := spec.DirPath(tc.in)
		switch {
		case tc.refused == "" && (err != nil || got != tc.want):
			t.Errorf("DirPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("DirPath(%q) = %q, %v; want it refused: %s", tc.in, got, err, tc.refused)
		}
	}
}
