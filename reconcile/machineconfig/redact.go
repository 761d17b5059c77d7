package machineconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/siderolabs/crypto/x509"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime/extensions"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Redaction replaces every secret value in a redacted config.
const Redaction = "REDACTED"

// secretEnvMarkers mark an extension-service environment variable whose
// value is a secret, matched against the upper-cased variable name.
var secretEnvMarkers = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"}

// Redacted returns a copy of cfg that is safe to show: the machinery's own
// redaction (keys, tokens, encryption secrets), plus what it leaves in place:
// secret-looking environment values of extension services (such as
// tailscale's TS_AUTHKEY) and certificate bodies. A certificate is replaced
// by Redaction and a short SHA-256 fingerprint of the public certificate, so
// a diff still shows that it changed. cfg itself is not modified.
func Redacted(cfg coreconfig.Provider) coreconfig.Provider {
	if cfg == nil {
		return nil
	}

	out := cfg.RedactSecrets(Redaction)

	for _, doc := range out.Documents() {
		switch d := doc.(type) {
		case *v1alpha1.Config:
			redactCertificates(d)
		case *extensions.ServiceConfigV1Alpha1:
			for i, kv := range d.ServiceEnvironment {
				name, _, found := strings.Cut(kv, "=")
				if found && secretEnvName(name) {
					d.ServiceEnvironment[i] = name + "=" + Redaction
				}
			}
		}
	}

	return out
}

func secretEnvName(name string) bool {
	upper := strings.ToUpper(name)

	for _, marker := range secretEnvMarkers {
		if strings.Contains(upper, marker) {
			return true
		}
	}

	return false
}

func redactCertificates(c *v1alpha1.Config) {
	if m := c.MachineConfig; m != nil {
		redactCertAndKey(m.MachineCA)

		for _, ca := range m.MachineAcceptedCAs {
			if ca != nil {
				ca.Crt = certFingerprint(ca.Crt)
			}
		}
	}

	if cl := c.ClusterConfig; cl != nil {
		redactCertAndKey(cl.ClusterCA)
		redactCertAndKey(cl.ClusterAggregatorCA)

		if cl.EtcdConfig != nil {
			redactCertAndKey(cl.EtcdConfig.RootCA)
		}

		for _, ca := range cl.ClusterAcceptedCAs {
			if ca != nil {
				ca.Crt = certFingerprint(ca.Crt)
			}
		}
	}
}

func redactCertAndKey(ck *x509.PEMEncodedCertificateAndKey) {
	if ck == nil {
		return
	}

	ck.Crt = certFingerprint(ck.Crt)

	if len(ck.Key) > 0 {
		ck.Key = []byte(Redaction)
	}
}

func certFingerprint(crt []byte) []byte {
	if len(crt) == 0 {
		return crt
	}

	sum := sha256.Sum256(crt)

	return fmt.Appendf(nil, "%s sha256:%s", Redaction, hex.EncodeToString(sum[:8]))
}

// Encode renders cfg as YAML without documentation comments, the form
// Talos accepts in apply-config and cloud-init user data.
func Encode(cfg coreconfig.Provider) ([]byte, error) {
	data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("encoding config: %w", err)
	}

	return data, nil
}

// Diff returns a unified diff (hunks only, no file header) from the redacted
// form of old to the redacted form of new. A nil config reads as empty, so
// Diff(nil, cfg) shows the whole config as added. Equal configs give "".
func Diff(old, new coreconfig.Provider) (string, error) {
	a, err := redactedText(old)
	if err != nil {
		return "", fmt.Errorf("diffing configs: old: %w", err)
	}

	b, err := redactedText(new)
	if err != nil {
		return "", fmt.Errorf("diffing configs: new: %w", err)
	}

	return unifiedDiff(a, b), nil
}

func redactedText(cfg coreconfig.Provider) (string, error) {
	if cfg == nil {
		return "", nil
	}

	data, err := Encode(Redacted(cfg))
	if err != nil {
		return "", err
	}

	return string(data), nil
}

// Parse reads a machine config as Talos does.
func Parse(data []byte) (coreconfig.Provider, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("reading a machine config: %w", err)
	}

	return cfg, nil
}

// DiffBytes is Diff of two encoded machine configs.
func DiffBytes(old, new []byte) (string, error) {
	a, err := Parse(old)
	if err != nil {
		return "", fmt.Errorf("old: %w", err)
	}

	b, err := Parse(new)
	if err != nil {
		return "", fmt.Errorf("new: %w", err)
	}

	return Diff(a, b)
}

// Digest is a fingerprint of an encoded machine config that is safe to
// show: "sha256:" and the first 16 hex digits of the SHA-256 of its
// redacted form. Two configs that differ in anything a redacted diff
// would show have different digests; the secrets themselves are not
// hashed, only the redaction and certificate fingerprints that stand for
// them.
func Digest(data []byte) (string, error) {
	cfg, err := Parse(data)
	if err != nil {
		return "", err
	}

	text, err := Encode(Redacted(cfg))
	if err != nil {
		return "", err
	}

	sum := sha256.Sum256(text)

	return "sha256:" + hex.EncodeToString(sum[:8]), nil
}

// PatchesDigest is a fingerprint of the user patches a machine of pool p
// gets (talos.config_patches, then the pool's config_patches), in the form
// of Digest; "" when there are none. It stands for the config of a machine
// whose config is not known yet because the cluster identity does not exist.
func PatchesDigest(c *spec.Cluster, p spec.Pool) string {
	h := sha256.New()
	n := 0

	for _, patches := range [][]string{c.Talos.ConfigPatches, p.ConfigPatches} {
		for _, text := range patches {
			fmt.Fprintf(h, "%d\n%s\n", len(text), text)
			n++
		}

		_, _ = h.Write([]byte("--\n"))
	}

	if n == 0 {
		return ""
	}

	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:8])
}

// RunsTailscale reports whether a machine config configures the tailscale
// extension service (it has an auth key to join with); false for a config
// that cannot be parsed.
func RunsTailscale(data []byte) bool {
	cfg, err := Parse(data)
	if err != nil {
		return false
	}
	for _, s := range cfg.ExtensionServiceConfigs() {
		if s.Name() == "tailscale" {
			return true
		}
	}
	return false
}
