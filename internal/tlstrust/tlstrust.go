// Package tlstrust turns a provider section's tls_verify setting into a TLS
// client config: the system roots, plus a CA bundle when a path is given;
// verification off only when the user set false.
package tlstrust

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile/retry"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Config returns the TLS config of v, the value of the setting key (such
// as proxmox.tls_verify). The bundle is read bounded, from files (the
// cluster's directory), or from the host when the path is absolute and
// hostFiles allows it; a relative path that leaves the directory is
// refused as a terminal error.
func Config(v spec.TLSVerify, key string, files fs.FS, hostFiles bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if !v.Verify {
		cfg.InsecureSkipVerify = true //nolint:gosec // the user set tls_verify: false
		return cfg, nil
	}
	if v.CAFile == "" {
		return cfg, nil
	}
	var pem []byte
	if hostFiles && filepath.IsAbs(v.CAFile) {
		var err error
		if pem, err = boundedfile.Read(v.CAFile, boundedfile.Small); err != nil {
			return nil, fmt.Errorf("the CA bundle of %s: %w", key, err)
		}
	} else {
		name, err := spec.DirPath(v.CAFile)
		if err != nil {
			return nil, retry.Terminal(fmt.Errorf("%s: %w", key, err))
		}
		if pem, err = boundedfile.ReadFS(files, name, boundedfile.Small); err != nil {
			return nil, fmt.Errorf("the CA bundle of %s: %w", key, err)
		}
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("reading the CA bundle of %s %s: no PEM certificate in it", key, v.CAFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
