package machineconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultImageFactory is the Image Factory host installer images come from.
const DefaultImageFactory = "factory.talos.dev"

// schematic mirrors the part of the Image Factory's schematic document the
// engine uses. Field order and tags follow the factory's own model, whose
// canonical form is its yaml.v3 encoding; the schematic ID is the SHA-256 of
// that encoding, so the ID can be computed without asking the factory.
type schematic struct {
	Customization schematicCustomization `yaml:"customization"`
}

type schematicCustomization struct {
	SystemExtensions schematicExtensions `yaml:"systemExtensions,omitempty"`
}

type schematicExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// SchematicYAML returns the Image Factory schematic that installs the given
// official system extensions, in the canonical form the factory hashes. The
// list is sorted and de-duplicated first. It is the body to POST to the
// factory's /schematics endpoint.
func SchematicYAML(extensions []string) ([]byte, error) {
	exts := slices.Clone(extensions)
	slices.Sort(exts)
	exts = slices.Compact(exts)

	s := schematic{Customization: schematicCustomization{
		SystemExtensions: schematicExtensions{OfficialExtensions: exts},
	}}

	data, err := yaml.Marshal(&s)
	if err != nil {
		return nil, fmt.Errorf("encoding schematic: %w", err)
	}

	return data, nil
}

// SchematicID returns the Image Factory schematic ID for the given official
// system extensions: the hex SHA-256 of SchematicYAML. It matches the ID the
// factory answers when the same schematic is posted to it.
func SchematicID(extensions []string) (string, error) {
	data, err := SchematicYAML(extensions)
	if err != nil {
		return "", err
	}

	sum := sha256.Sum256(data)

	return hex.EncodeToString(sum[:]), nil
}

// InstallerImage returns the installer image reference
// <factory>/installer/<schematic-id>:<talos version> for the given
// extensions. factory is a registry host such as factory.talos.dev; a URL
// scheme and trailing slashes are dropped, and an empty factory means
// DefaultImageFactory.
func InstallerImage(factory string, extensions []string, talosVersion string) (string, error) {
	id, err := SchematicID(extensions)
	if err != nil {
		return "", err
	}

	return fmt.Sprintf("%s/installer/%s:v%s", factoryHost(factory), id, strings.TrimPrefix(talosVersion, "v")), nil
}

func factoryHost(factory string) string {
	host := factory
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}

	host = strings.TrimRight(host, "/")
	if host == "" {
		return DefaultImageFactory
	}

	return host
}
