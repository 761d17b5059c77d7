package pve_test

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/Telmate/proxmox-api-go/proxmox"

	"github.com/taloscluster/taloscluster/lab/labca"
	"github.com/taloscluster/taloscluster/lab/pve"
)

// TestServedWithLabCA serves the emulator the way the lab does: on a
// loopback listener with a certificate from the lab CA, verified by the
// client against the CA alone.
func TestServedWithLabCA(t *testing.T) {
	t.Parallel()
	ca, err := labca.New("lab test CA")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ca.ServerTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := pve.New(pve.Options{TaskDuration: -1})
	hs := &http.Server{Handler: srv.Handler(), TLSConfig: serverTLS, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		srv.Close()
		_ = hs.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving: %v", err)
		}
	})

	c, err := proxmox.NewClient("https://"+ln.Addr().String()+"/api2/json", nil, "", &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, "", 30, false)
	if err != nil {
		t.Fatal(err)
	}
	var id proxmox.ApiTokenID
	if err := id.Parse(pve.DefaultTokenID); err != nil {
		t.Fatal(err)
	}
	c.SetAPIToken(id, pve.DefaultTokenSecret)
	if v, err := c.GetVersion(t.Context()); err != nil || v.Major != 9 {
		t.Errorf("version over lab TLS = %v, %v", v, err)
	}
}
