package machineconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"gopkg.in/yaml.v3"
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
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading talos secrets: %w", err)
	}

	bundle := &secrets.Bundle{}

	if err := yaml.Unmarshal(data, bundle); err != nil {
		return nil, fmt.Errorf("parsing talos secrets %q: %w", path, sanitizeYAMLError(err))
	}

	if err := bundle.Validate(); err != nil {
		return nil, fmt.Errorf("checking talos secrets %q: %w", path, err)
	}

	bundle.Clock = secrets.NewClock()

	return bundle, nil
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
// atomic and create-only: the bundle goes to a temporary file in the same
// directory, is synced, and is then hard-linked into place, which fails when
// path exists; the directory is synced afterwards. An existing file yields an
// error wrapping ErrSecretsExist and is left untouched.
func WriteSecrets(path string, bundle *secrets.Bundle) (err error) {
	if bundle == nil {
		return fmt.Errorf("writing talos secrets to %q: no bundle given", path)
	}

	if err := bundle.Validate(); err != nil {
		return fmt.Errorf("writing talos secrets to %q: checking bundle: %w", path, err)
	}

	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("writing talos secrets to %q: %w", path, ErrSecretsExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("writing talos secrets to %q: %w", path, err)
	}

	data, err := yaml.Marshal(bundle)
	if err != nil {
		return fmt.Errorf("writing talos secrets to %q: encoding bundle: %w", path, err)
	}

	dir := filepath.Dir(path)

	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing talos secrets to %q: creating temporary file: %w", path, err)
	}

	tmpName := tmp.Name()

	defer func() {
		// The temporary name is always removed: on success the data lives on
		// under path through the hard link.
		if rmErr := os.Remove(tmpName); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("writing talos secrets to %q: removing temporary file: %w", path, rmErr)
		}
	}()

	if err := writeSynced(tmp, data); err != nil {
		return fmt.Errorf("writing talos secrets to %q: %w", path, err)
	}

	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("writing talos secrets to %q: %w", path, ErrSecretsExist)
		}

		if !linkUnsupported(err) {
			return fmt.Errorf("writing talos secrets to %q: linking into place: %w", path, err)
		}

		// Filesystems without hard links: fall back to a rename after a last
		// existence check. The window between the check and the rename is the
		// only place a concurrent writer could be overwritten.
		if _, statErr := os.Lstat(path); statErr == nil {
			return fmt.Errorf("writing talos secrets to %q: %w", path, ErrSecretsExist)
		}

		if err := os.Rename(tmpName, path); err != nil {
			return fmt.Errorf("writing talos secrets to %q: renaming into place: %w", path, err)
		}
	}

	if err := syncDir(dir); err != nil {
		return fmt.Errorf("writing talos secrets to %q: %w", path, err)
	}

	return nil
}

func writeSynced(f *os.File, data []byte) error {
	if err := f.Chmod(0o600); err != nil {
		f.Close() //nolint:errcheck // the chmod error is the one to report

		return fmt.Errorf("setting mode of temporary file: %w", err)
	}

	if _, err := f.Write(data); err != nil {
		f.Close() //nolint:errcheck // the write error is the one to report

		return fmt.Errorf("writing temporary file: %w", err)
	}

	if err := f.Sync(); err != nil {
		f.Close() //nolint:errcheck // the sync error is the one to report

		return fmt.Errorf("syncing temporary file: %w", err)
	}

	if err := f.Close(); err != nil {
		return fmt.Errorf("closing temporary file: %w", err)
	}

	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory for sync: %w", err)
	}

	defer d.Close() //nolint:errcheck // read-only handle

	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("syncing directory: %w", err)
	}

	return nil
}

func linkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) ||
		errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS)
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
