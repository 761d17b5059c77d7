package gitsync

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/internal/noredirect"
)

type remoteKind int

const (
	kindHTTP remoteKind = iota
	kindSSH
	kindLocal
)

// remote knows how to reach the remote and with which credentials. Its
// endpoint never carries credentials, so go-git can never echo them.
type remote struct {
	kind    remoteKind
	ep      transport.Endpoint // credential-free template, copied per session
	safeURL string
	http    transport.Transport
	auth    Auth
	timeout time.Duration

	// Credentials that came embedded in an HTTP(S) URL.
	urlUser, urlPassword string
}

func newRemote(o Options) (*remote, error) {
	ep, err := transport.NewEndpoint(o.URL)
	if err != nil {
		// The parse error may quote the URL; report only a stripped form.
		return nil, fmt.Errorf("parsing remote URL %s: not a valid git URL", stripUserinfo(o.URL))
	}
	m := &remote{auth: o.Auth, timeout: o.Timeout}
	if m.timeout <= 0 {
		m.timeout = DefaultTimeout
	}
	switch ep.Protocol {
	case "http", "https":
		m.kind = kindHTTP
		m.urlUser, m.urlPassword = ep.User, ep.Password
		ep.User, ep.Password = "", ""
		// The token goes with every request: a redirect is never followed.
		var base http.RoundTripper
		if o.HTTPClient != nil {
			base = o.HTTPClient.Transport
		}
		hc := noredirect.Client(base)
		if o.HTTPClient != nil {
			hc.Timeout = o.HTTPClient.Timeout
		}
		m.http = githttp.NewClient(hc)
		if o.Auth.SSHKeyFile != "" || o.Auth.KnownHostsFile != "" {
			return nil, fmt.Errorf("configuring %s: ssh key given for an HTTP remote", ep.String())
		}
	case "ssh":
		m.kind = kindSSH
		ep.Password = ""
		if ep.User == "" {
			ep.User = "git"
		}
		if o.Auth.TokenFile != "" {
			return nil, fmt.Errorf("configuring %s: token given for an ssh remote", ep.String())
		}
		if o.Auth.SSHKeyFile == "" || o.Auth.KnownHostsFile == "" {
			return nil, fmt.Errorf("configuring %s: ssh remotes need a key file and a known_hosts file", ep.String())
		}
	case "file":
		m.kind = kindLocal
		if err := absLocal(ep); err != nil {
			return nil, fmt.Errorf("resolving local remote %s: %w", ep.Path, err)
		}
		if o.Auth != (Auth{}) {
			return nil, fmt.Errorf("configuring %s: credentials given for a local remote", ep.String())
		}
	default:
		return nil, fmt.Errorf("configuring %s: unsupported protocol %q", stripUserinfo(o.URL), ep.Protocol)
	}
	m.ep = *ep
	m.safeURL = ep.String()
	return m, nil
}

// session opens an upload-pack session. It reads the secret files afresh
// and returns the secret strings that must never appear in an error.
func (m *remote) session() (transport.UploadPackSession, redactor, error) {
	ep := m.ep
	switch m.kind {
	case kindHTTP:
		auth, secrets, err := m.httpAuth()
		if err != nil {
			return nil, secrets, err
		}
		s, err := m.http.NewUploadPackSession(&ep, auth)
		return s, secrets, err
	case kindSSH:
		auth, err := m.sshAuth()
		if err != nil {
			return nil, nil, err
		}
		cfg, err := auth.ClientConfig()
		if err != nil {
			return nil, nil, err
		}
		// go-git lets a client-wide config replace the auth's; it is built
		// from the auth itself, so the only addition is the dial bound.
		cfg.Timeout = m.timeout
		s, err := gitssh.NewClient(cfg).NewUploadPackSession(&ep, auth)
		return s, nil, err
	default:
		s, err := localTransport{}.NewUploadPackSession(&ep, nil)
		return s, nil, err
	}
}

func (m *remote) httpAuth() (transport.AuthMethod, redactor, error) {
	// A URL's password is secret; so is a user without a password, which
	// is how a token often rides in a URL (https://TOKEN@host/...).
	var secrets redactor
	switch {
	case m.urlPassword != "":
		secrets = append(secrets, m.urlPassword)
	case m.urlUser != "":
		secrets = append(secrets, m.urlUser)
	}
	if m.auth.TokenFile == "" {
		if m.urlUser == "" && m.urlPassword == "" {
			return nil, secrets, nil
		}
		secrets = append(secrets, basicValue(m.urlUser, m.urlPassword))
		return &githttp.BasicAuth{Username: m.urlUser, Password: m.urlPassword}, secrets, nil
	}
	b, err := boundedfile.Read(m.auth.TokenFile, boundedfile.Small)
	if err != nil {
		return nil, secrets, fmt.Errorf("token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return nil, secrets, fmt.Errorf("reading token file %s: file is empty", m.auth.TokenFile)
	}
	user := m.auth.Username
	if user == "" {
		user = DefaultUsername
	}
	secrets = append(secrets, token, basicValue(user, token))
	return &githttp.BasicAuth{Username: user, Password: token}, secrets, nil
}

func basicValue(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

func (m *remote) sshAuth() (*gitssh.PublicKeys, error) {
	if _, err := os.Stat(m.auth.KnownHostsFile); err != nil {
		return nil, fmt.Errorf("reading known_hosts file: %w", err)
	}
	db, err := gitssh.NewKnownHostsDb(m.auth.KnownHostsFile)
	if err != nil {
		return nil, fmt.Errorf("reading known_hosts file %s: %w", m.auth.KnownHostsFile, err)
	}
	pk, err := gitssh.NewPublicKeysFromFile(m.ep.User, m.auth.SSHKeyFile, "")
	if err != nil {
		// Parse errors from x/crypto/ssh never quote key material.
		return nil, fmt.Errorf("reading ssh key file %s: %w", m.auth.SSHKeyFile, err)
	}
	port := m.ep.Port
	if port <= 0 {
		port = gitssh.DefaultPort
	}
	pk.HostKeyCallback = db.HostKeyCallback()
	pk.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(m.ep.Host, strconv.Itoa(port)))
	return pk, nil
}

// redactor lists secret strings that must not leave the package.
type redactor []string

// redactedError replaces an error whose text carried a secret. It
// deliberately does not unwrap: the original chain still holds the secret.
type redactedError struct{ msg string }

func (e *redactedError) Error() string { return e.msg }

// error returns err unchanged unless its text contains a secret, in which
// case it returns a flattened copy with every secret replaced.
func (r redactor) error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	for _, s := range r {
		if s == "" {
			continue
		}
		for _, form := range []string{s, url.PathEscape(s), url.QueryEscape(s)} {
			clean = strings.ReplaceAll(clean, form, "[redacted]")
		}
	}
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean}
}

// stripUserinfo removes anything between "scheme://" and the host's "@",
// for URLs too broken to parse.
func stripUserinfo(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		return raw[:i+3] + rest[at+1:]
	}
	return raw
}

// localTransport serves a local repository in process with go-git's own
// upload-pack implementation, instead of go-git's file transport, which
// runs the git-upload-pack binary.
type localTransport struct{}

func (localTransport) NewUploadPackSession(ep *transport.Endpoint, _ transport.AuthMethod) (transport.UploadPackSession, error) {
	st, err := server.DefaultLoader.Load(ep)
	if err != nil {
		return nil, err
	}
	s, err := server.NewClient(server.MapLoader{ep.String(): st}).NewUploadPackSession(ep, nil)
	if err != nil {
		return nil, err
	}
	return &localSession{UploadPackSession: s, objects: st}, nil
}

// localSession drops haves the serving repository does not know: real
// upload-pack ignores them, go-git's in-process server fails on them.
type localSession struct {
	transport.UploadPackSession
	objects storer.EncodedObjectStorer
}

func (s *localSession) UploadPack(ctx context.Context, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	known := req.Haves[:0:0]
	for _, h := range req.Haves {
		if s.objects.HasEncodedObject(h) == nil {
			known = append(known, h)
		}
	}
	req.Haves = known
	return s.UploadPackSession.UploadPack(ctx, req)
}

// hashSet is a small helper type for wants and haves.
type hashSet map[plumbing.Hash]struct{}

func (s hashSet) add(h plumbing.Hash) bool {
	if _, ok := s[h]; ok {
		return false
	}
	s[h] = struct{}{}
	return true
}
