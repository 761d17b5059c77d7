package factory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/siderolabs/talos/pkg/machinery/imager/imageropts"
	"gopkg.in/yaml.v3"
)

// The schematic model and its ID follow the Image Factory's
// pkg/schematic (github.com/siderolabs/image-factory): a schematic is
// decoded strictly (unknown fields are an error), its canonical form is its
// YAML encoding with the fields in the model's order and empty ones left
// out, and its ID is the hex SHA-256 of that canonical form. Lists keep the
// order they were posted in, so the same extensions in another order are
// another schematic. The field order below is part of the ID: do not
// reorder.

// schematic mirrors the factory's Schematic.
type schematic struct {
	// Owner is accepted by the Enterprise edition only.
	Owner         string        `yaml:"owner,omitempty"`
	Overlay       overlay       `yaml:"overlay,omitempty"`
	Customization customization `yaml:"customization"`
}

// customization mirrors the factory's Customization.
type customization struct {
	EmbeddedMachineConfiguration string                    `yaml:"embeddedMachineConfiguration,omitempty"`
	ExtraKernelArgs              []string                  `yaml:"extraKernelArgs,omitempty"`
	Meta                         []metaValue               `yaml:"meta,omitempty"`
	SystemExtensions             systemExtensions          `yaml:"systemExtensions,omitempty"`
	Bootloader                   imageropts.BootloaderKind `yaml:"bootloader,omitempty"`
	SecureBoot                   secureBoot                `yaml:"secureboot,omitempty"`
	DiskImage                    diskImage                 `yaml:"diskImage,omitempty"`
}

// metaValue mirrors the factory's MetaValue.
type metaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

// systemExtensions mirrors the factory's SystemExtensions.
type systemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// overlay mirrors the factory's Overlay.
type overlay struct {
	Image   string         `yaml:"image"`
	Name    string         `yaml:"name"`
	Options map[string]any `yaml:"options,omitempty"`
}

// secureBoot mirrors the factory's SecureBootCustomization.
type secureBoot struct {
	EnrollKeys                   string `yaml:"enrollKeys,omitempty"`
	IncludeWellKnownCertificates bool   `yaml:"includeWellKnownCertificates,omitempty"`
}

// diskImage mirrors the factory's DiskImageCustomization.
type diskImage struct {
	SectorSize uint `yaml:"sectorSize,omitempty"`
}

// invalidError is a schematic the factory refuses with 400; the answer's
// body is the error text alone, as the factory's MatchError writes it.
type invalidError struct{ err error }

func (e *invalidError) Error() string { return e.err.Error() }
func (e *invalidError) Unwrap() error { return e.err }

// parseSchematic decodes a posted schematic the way the factory's
// Unmarshal does: YAML (or JSON), one document, unknown fields refused. An
// empty body is an error (the decoder's EOF), as it is for the factory.
func parseSchematic(data []byte) (*schematic, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s schematic
	if err := dec.Decode(&s); err != nil {
		return nil, &invalidError{err: err}
	}
	return &s, nil
}

// validate is the factory's non-Enterprise Validate.
func (s *schematic) validate() error {
	if s.Owner != "" {
		return &invalidError{err: errors.New("owner field is only supported in Enterprise edition")}
	}
	return nil
}

// marshal is the canonical form.
func (s *schematic) marshal() ([]byte, error) {
	return yaml.Marshal(s)
}

// id is the schematic ID: the hex SHA-256 of the canonical form.
func (s *schematic) id() (string, []byte, error) {
	data, err := s.marshal()
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), data, nil
}

// SchematicID returns the ID the Image Factory gives a schematic document
// (YAML or JSON), computed the factory's way and independently of the
// engine's own code, or an error for a document the factory refuses.
func SchematicID(doc []byte) (string, error) {
	s, err := parseSchematic(doc)
	if err != nil {
		return "", err
	}
	if err := s.validate(); err != nil {
		return "", err
	}
	id, _, err := s.id()
	return id, err
}
