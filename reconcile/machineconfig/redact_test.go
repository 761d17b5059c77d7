package machineconfig_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

// secretValues lists every secret a config may carry, in every form it may
// be written in: raw, base64 and PEM body lines.
func secretValues(b *secrets.Bundle) map[string]string {
	values := map[string]string{
		"cluster secret":      b.Cluster.Secret,
		"bootstrap token":     b.Secrets.BootstrapToken,
		"secretbox secret":    b.Secrets.SecretboxEncryptionSecret,
		"trustd token":        b.TrustdInfo.Token,
		"tailscale auth key":  seededAuthKey,
		"etcd CA key":         string(b.Certs.Etcd.Key),
		"etcd CA crt":         string(b.Certs.Etcd.Crt),
		"k8s CA key":          string(b.Certs.K8s.Key),
		"k8s CA crt":          string(b.Certs.K8s.Crt),
		"aggregator CA key":   string(b.Certs.K8sAggregator.Key),
		"aggregator CA crt":   string(b.Certs.K8sAggregator.Crt),
		"service account key": string(b.Certs.K8sServiceAccount.Key),
		"OS CA key":           string(b.Certs.OS.Key),
		"OS CA crt":           string(b.Certs.OS.Crt),
	}

	// The secret half of the bootstrap token on its own.
	if _, secret, ok := strings.Cut(b.Secrets.BootstrapToken, "."); ok {
		values["bootstrap token secret"] = secret
	}

	for name, v := range values {
		if v == "" {
			continue
		}

		values[name+" (base64)"] = base64.StdEncoding.EncodeToString([]byte(v))

		// Every long line of a PEM block (the base64 body).
		for i, line := range strings.Split(v, "\n") {
			if len(line) >= 40 && !strings.HasPrefix(line, "-----") {
				values[fmt.Sprintf("%s line %d", name, i)] = line
			}
		}
	}

	return values
}

func TestRedacted(t *testing.T) {
	t.Parallel()

	b := fixedSecrets(t)
	values := secretValues(b)

	for _, tc := range []struct {
		name string
		in   machineconfig.Input
	}{
		{"proxmox", proxmoxInput(t, proxmoxCluster())},
		{"openstack", openStackInput(t, openStackCluster())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			for _, m := range machineconfig.Machines(tc.in.Cluster) {
				cfg := generate(t, tc.in, m)

				plain, err := machineconfig.Encode(cfg)
				if err != nil {
					t.Fatal(err)
				}

				if tc.name == "proxmox" && !strings.Contains(string(plain), seededAuthKey) {
					t.Fatalf("%s: the unredacted config lacks the auth key; the test proves nothing", m.Hostname)
				}

				red, err := machineconfig.Encode(machineconfig.Redacted(cfg))
				if err != nil {
					t.Fatal(err)
				}

				for name, v := range values {
					if v != "" && strings.Contains(string(red), v) {
						t.Errorf("%s: %s survives redaction", m.Hostname, name)
					}
				}

				if !strings.Contains(string(red), "TS_HOSTNAME="+m.Hostname) && tc.name == "proxmox" {
					t.Errorf("%s: redaction removed the non-secret TS_HOSTNAME", m.Hostname)
				}

				// The original is untouched.
				again, err := machineconfig.Encode(cfg)
				if err != nil {
					t.Fatal(err)
				}

				if string(again) != string(plain) {
					t.Errorf("%s: Redacted modified its input", m.Hostname)
				}
			}
		})
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()

	c := proxmoxCluster()
	in := proxmoxInput(t, c)

	cp1 := generate(t, in, machine(t, c, "lab-controlplane-01"))
	cp2 := generate(t, in, machine(t, c, "lab-controlplane-02"))

	t.Run("equal", func(t *testing.T) {
		t.Parallel()

		d, err := machineconfig.Diff(cp1, cp1.Clone())
		if err != nil {
			t.Fatal(err)
		}

		if d != "" {
			t.Errorf("diff of equal configs:\n%s", d)
		}
	})

	t.Run("hostname change", func(t *testing.T) {
		t.Parallel()

		d, err := machineconfig.Diff(cp1, cp2)
		if err != nil {
			t.Fatal(err)
		}

		golden(t, "diff-controlplane-01-02.txt", []byte(d))

		for _, want := range []string{
			"-hostname: lab-controlplane-01\n",
			"+hostname: lab-controlplane-02\n",
			"-    - TS_HOSTNAME=lab-controlplane-01\n",
			"+    - TS_HOSTNAME=lab-controlplane-02\n",
			"     - TS_AUTHKEY=" + machineconfig.Redaction + "\n",
		} {
			if !strings.Contains(d, want) {
				t.Errorf("diff lacks %q:\n%s", want, d)
			}
		}

		assertNoSecrets(t, d, secretValues(fixedSecrets(t)))
	})

	t.Run("new identity shows certificate change without leaking it", func(t *testing.T) {
		t.Parallel()

		other, err := machineconfig.NewSecrets("v1.13.2")
		if err != nil {
			t.Fatal(err)
		}

		in2 := in
		in2.Secrets = other

		fresh := generate(t, in2, machine(t, c, "lab-controlplane-01"))

		d, err := machineconfig.Diff(cp1, fresh)
		if err != nil {
			t.Fatal(err)
		}

		if !strings.Contains(d, "+        crt: ") {
			t.Errorf("a new CA does not show in the diff:\n%s", d)
		}

		assertNoSecrets(t, d, secretValues(fixedSecrets(t)))
		assertNoSecrets(t, d, secretValues(other))
	})

	t.Run("creation", func(t *testing.T) {
		t.Parallel()

		d, err := machineconfig.Diff(nil, cp1)
		if err != nil {
			t.Fatal(err)
		}

		if !strings.HasPrefix(d, "@@ -0,0 +1,") {
			t.Errorf("creation diff starts %q", firstLine(d))
		}

		for _, line := range strings.Split(strings.TrimSuffix(d, "\n"), "\n")[1:] {
			if !strings.HasPrefix(line, "+") {
				t.Fatalf("creation diff has line %q", line)
			}
		}
	})
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")

	return line
}

func assertNoSecrets(t *testing.T, text string, values map[string]string) {
	t.Helper()

	for name, v := range values {
		if v != "" && strings.Contains(text, v) {
			t.Errorf("%s appears in the output", name)
		}
	}
}
