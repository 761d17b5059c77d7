package gitsync_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/taloscluster/taloscluster/gitsync"
)

// sshOrigin serves the origin's bare repository over ssh on loopback: a
// minimal server that accepts one client key and runs git upload-pack for
// "git-upload-pack '<path>'" exec requests.
type sshOrigin struct {
	addr    string
	hostKey ssh.PublicKey
}

func (o *origin) serveSSH(t *testing.T, client ssh.PublicKey) sshOrigin {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	host, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), client.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(host)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go o.serveSSHConn(c, cfg)
		}
	}()
	return sshOrigin{addr: ln.Addr().String(), hostKey: host.PublicKey()}
}

func (o *origin) serveSSHConn(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go o.serveSSHSession(ch, creqs)
	}
}

func (o *origin) serveSSHSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil)
			continue
		}
		var payload struct{ Command string }
		if ssh.Unmarshal(req.Payload, &payload) != nil {
			_ = req.Reply(false, nil)
			return
		}
		repo, ok := strings.CutPrefix(payload.Command, "git-upload-pack ")
		repo = strings.Trim(repo, "'")
		if !ok || repo != "/remote.git" {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		cmd := exec.Command("git", "upload-pack", filepath.Join(o.root, repo))
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return
		}
		go func() {
			_, _ = io.Copy(stdin, ch)
			stdin.Close()
		}()
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			status = 1
		}
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

// clientKey writes a fresh ed25519 private key file.
func clientKey(t *testing.T, dir string) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return file, sshPub
}

func knownHostsFile(t *testing.T, dir, addr string, key ssh.PublicKey) string {
	t.Helper()
	file := filepath.Join(dir, "known_hosts_"+strings.ReplaceAll(addr, ":", "_"))
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, key) + "\n"
	if err := os.WriteFile(file, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestSSHWithKeyAndKnownHosts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := newOrigin(t)
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\n"})
	c1 := o.commit("first")
	o.pushMain()
	dir := t.TempDir()
	keyFile, pub := clientKey(t, dir)
	srv := o.serveSSH(t, pub)
	url := "ssh://git@" + srv.addr + "/remote.git"
	auth := gitsync.Auth{SSHKeyFile: keyFile, KnownHostsFile: knownHostsFile(t, dir, srv.addr, srv.hostKey)}

	r := open(t, ctx, gitsync.Options{URL: url, Auth: auth})
	h, err := r.Heads()
	if err != nil || h.Default != c1 {
		t.Fatalf("Heads = %+v, %v; want main at %s", h, err, c1)
	}
	o.write(map[string]string{"clusters/a/cluster.yaml": "name: a\nnodes: 3\n"})
	c2 := o.commit("second")
	o.pushMain()
	o.openPR(4, c2)
	h, err = r.Fetch(ctx, []int{4})
	if err != nil {
		t.Fatal(err)
	}
	if h.Default != c2 || h.PRs[4] != c2 {
		t.Fatalf("Heads = %+v, want main and PR 4 at %s", h, c2)
	}
	readAt(t, r, c2, "clusters/a/cluster.yaml", "name: a\nnodes: 3\n")

	t.Run("unknown host key", func(t *testing.T) {
		t.Parallel()
		_, other, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := ssh.NewSignerFromKey(other)
		if err != nil {
			t.Fatal(err)
		}
		bad := gitsync.Auth{SSHKeyFile: keyFile, KnownHostsFile: knownHostsFile(t, t.TempDir(), srv.addr, signer.PublicKey())}
		_, err = gitsync.Open(ctx, gitsync.Options{URL: url, Auth: bad, Dir: filepath.Join(t.TempDir(), "c")})
		if err == nil || !strings.Contains(err.Error(), "fetching "+url) || !strings.Contains(err.Error(), "key mismatch") {
			t.Fatalf("Open with a wrong host key: err = %v", err)
		}
	})
	t.Run("unknown client key", func(t *testing.T) {
		t.Parallel()
		otherKey, _ := clientKey(t, t.TempDir())
		bad := gitsync.Auth{SSHKeyFile: otherKey, KnownHostsFile: auth.KnownHostsFile}
		_, err := gitsync.Open(ctx, gitsync.Options{URL: url, Auth: bad, Dir: filepath.Join(t.TempDir(), "c")})
		if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
			t.Fatalf("Open with an unknown client key: err = %v", err)
		}
	})
	t.Run("no known_hosts", func(t *testing.T) {
		t.Parallel()
		_, err := gitsync.Open(ctx, gitsync.Options{URL: url, Auth: gitsync.Auth{SSHKeyFile: keyFile}, Dir: filepath.Join(t.TempDir(), "c")})
		if err == nil || !strings.Contains(err.Error(), "known_hosts") {
			t.Fatalf("Open without known_hosts: err = %v", err)
		}
	})
}
