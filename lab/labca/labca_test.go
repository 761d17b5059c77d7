package labca_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/taloscluster/taloscluster/lab/labca"
)

func TestServerCertVerifiesAgainstCA(t *testing.T) {
	t.Parallel()
	ca, err := labca.New("lab test CA")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ca.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM()) {
		t.Fatal("CA PEM does not parse")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("verified TLS to the lab server failed: %v", err)
	}
	resp.Body.Close()

	// A client that does not trust the lab CA must fail.
	strict := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	if resp, err := strict.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a client without the lab CA accepted the certificate")
	}
}
