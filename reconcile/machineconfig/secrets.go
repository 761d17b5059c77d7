package machineconfig

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"gopkg.in/yaml.v3"

	"github.com/taloscluster/taloscluster/internal/boundedfile"
	"github.com/taloscluster/taloscluster/reconcile/state"
)

// ErrSecretsExist is returned by WriteSecrets when the target file already
// exists. The Talos secrets bundle is the cluster's identity: a file that is
// there is never replaced, whatever it holds.
var ErrSecretsExist = errors.New("talos secrets file already exists")

// NewSecrets mints a new cluster identity (CAs, keys, tokens) for the given
// Talos version, such as "v1.13.2".
func NewSecrets(talosVersion string) (*secrets.Bundle, error) {
	contract, err := contractFor(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("generating talos secrets: %w", err)
	}

	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		return nil, fmt.Errorf("generating talos secrets: %w", err)
	}

	return bundle, nil
}

// LoadSecrets reads a secrets bundle in the format `talosctl gen secrets`
// writes and checks that it is complete. Errors name the file but never
// quote its contents.
func LoadSecrets(path string) (*secrets.Bundle, error) {
	data, err := boundedfile.Read(path, boundedfile.Small)
	if err != nil {
		return nil, fmt.Errorf("talos secrets: %w", err)
	}
	return ParseSecrets(path, data)
}

// ParseSecrets reads a secrets bundle from its bytes; name says where they
// came from in errors, which never quote the contents.
func ParseSecrets(name string, data []byte) (*secrets.Bundle, error) {
	bundle := &secrets.Bundle{}
	if err := yaml.Unmarshal(data, bundle); err != nil {
		return nil, fmt.Errorf("parsing talos secrets %q: %w", name, sanitizeYAMLError(err))
	}
	if err := bundle.Validate(); err != nil {
		return nil, fmt.Errorf("checking talos secrets %q: %w", name, err)
	}
	bundle.Clock = secrets.NewClock()
	return bundle, nil
}

// EncodeSecrets returns a bundle in the format `talosctl gen secrets`
// writes.
func EncodeSecrets(bundle *secrets.Bundle) ([]byte, error) {
	if err := bundle.Validate(); err != nil {
		return nil, fmt.Errorf("checking the talos secrets bundle: %w", err)
	}
	data, err := yaml.Marshal(bundle)
	if err != nil {
		return nil, fmt.Errorf("encoding the talos secrets bundle: %w", err)
	}
	return data, nil
}

// sanitizeYAMLError drops the values that a YAML type error quotes, since
// they may be secrets; syntax errors carry only a line and a fixed message.
func sanitizeYAMLError(err error) error {
	var typeErr *yaml.TypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("%d values have the wrong type", len(typeErr.Errors))
	}

	return err
}

// WriteSecrets stores a secrets bundle at path with mode 0600. The write is
// atomic and create-only (see state.CreateFile): an existing file yields an
// error wrapping ErrSecretsExist and is left untouched.
func WriteSecrets(path string, bundle *secrets.Bundle) error {
	if bundle == nil {
		return fmt.Errorf("writing talos secrets to %q: no bundle given", path)
	}
	if err := bundle.Validate(); err != nil {
		return fmt.Errorf("writing talos secrets to %q: checking bundle: %w", path, err)
	}
	data, err := yaml.Marshal(bundle)
	if err != nil {
		return fmt.Errorf("writing talos secrets to %q: encoding bundle: %w", path, err)
	}
	if err := state.CreateFile(path, data, 0o600); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("writing talos secrets to %q: %w", path, ErrSecretsExist)
		}
		return fmt.Errorf("writing talos secrets: %w", err)
	}
	return nil
}

// minContract is the oldest Talos version the generator supports; older
// configs lack the multi-document network layout used here.
var minContract = config.TalosVersion1_13

// contractFor parses a Talos version into its config contract and refuses
// versions older than v1.13.
func contractFor(talosVersion string) (*config.VersionContract, error) {
	contract, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("parsing talos version %q: %w", talosVersion, err)
	}

	if minContract.Greater(contract) {
		return nil, fmt.Errorf("talos version %q is older than %s, the oldest supported", talosVersion, minContract)
	}

	return contract, nil
}
