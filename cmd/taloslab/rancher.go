package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/taloscluster/taloscluster/lab"
	labrancher "github.com/taloscluster/taloscluster/lab/rancher"
)

// rancherFaultKinds are the Rancher emulator's fault kinds on POST
// /lab/v1/faults, in the lab's JSON shape (lab.Fault); op is
// "METHOD /path" of the v3 API, such as "DELETE /v3/clusters/c-abc12":
//
//	rancher-fail  the next n requests (default 1) answer status (default
//	              500) in Rancher's error shape, without effect
//	rancher-hang  the next n requests never answer, without effect
var rancherFaultKinds = []string{"rancher-fail", "rancher-hang"}

// rancherUsers are the users the lab's Rancher knows, from its LDAP:
// a rancher section's members resolve to them by login.
var rancherUsers = []string{"alice", "bob", "carol", "dave"}

// rancherLab is the lab's Rancher: its v3 API over TLS with the lab's CA.
type rancherLab struct {
	server *labrancher.Server
	http   *http.Server
	url    string
	token  string
}

// startRancher serves the Rancher emulator on 127.0.0.1 with an API
// token of its own.
func startRancher(l *lab.Lab) (*rancherLab, error) {
	secret := make([]byte, 20)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	token := "token-lab01:" + hex.EncodeToString(secret)
	srv := labrancher.New(labrancher.Options{Token: token})
	for _, login := range rancherUsers {
		srv.AddUser("openldap", login, strings.ToUpper(login[:1])+login[1:])
	}
	hs, url, err := serveTLS(l, srv, "the Rancher API")
	if err != nil {
		return nil, err
	}
	return &rancherLab{server: srv, http: hs, url: url, token: token}, nil
}

// serveTLS serves h on a free port of 127.0.0.1 with a certificate of the
// lab's CA, and returns its server and https URL.
func serveTLS(l *lab.Lab, h http.Handler, what string) (*http.Server, string, error) {
	tlsCfg, err := l.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("listening for %s: %w", what, err)
	}
	hs := &http.Server{Handler: h, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	return hs, "https://" + ln.Addr().String(), nil
}

func (r *rancherLab) close() { _ = r.http.Close() }

// inject applies a rancher-* fault and describes it.
func (r *rancherLab) inject(f lab.Fault) (string, error) {
	method, path, ok := strings.Cut(f.Op, " ")
	if !ok || method == "" || !strings.HasPrefix(path, "/v3/") {
		return "", fmt.Errorf("fault %s needs op, \"METHOD /v3/path\" such as \"DELETE /v3/clusters/c-abc12\"", f.Kind)
	}
	if f.N <= 0 {
		f.N = 1
	}
	fault := labrancher.Fault{Times: f.N}
	switch f.Kind {
	case "rancher-fail":
		fault.Status = f.Status
		if fault.Status == 0 {
			fault.Status = http.StatusInternalServerError
		}
		if fault.Status < 400 || fault.Status > 599 {
			return "", fmt.Errorf("fault rancher-fail: status %d is not an HTTP error status (400 to 599)", fault.Status)
		}
		fault.Message = "injected by the lab"
	case "rancher-hang":
		fault.Hang = true
	default:
		return "", errors.New("unknown Rancher fault " + f.Kind)
	}
	r.server.Fault(strings.ToUpper(method), path, fault)
	return fmt.Sprintf("op=%s n=%d", f.Op, f.N), nil
}

// rancherEnv is lab.env's part on the lab's Rancher. It also makes the
// lab's CA the roots Go programs trust (SSL_CERT_FILE), so the CLI's
// rancher and charts plugins, which use the system's roots as the Python
// tool's requests does, reach the lab's Rancher and chart repository.
func rancherEnv(r *rancherLab, ca string) string {
	return fmt.Sprintf(`# The lab's Rancher: its v3 API, TLS from the lab's CA, and an API token of
# its admin. Its LDAP (openldap) users are %s: a rancher section's
# members resolve to them by login (alice@example.org is alice).
export TALOSLAB_RANCHER_URL=%q
export TALOSLAB_RANCHER_TOKEN=%q
# Go programs (taloscluster's plugins) trust the lab's CA as their roots.
export SSL_CERT_FILE=%q
`, strings.Join(rancherUsers, ", "), r.url, r.token, ca)
}
