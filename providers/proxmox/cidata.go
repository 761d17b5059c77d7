package proxmox

import (
	"bytes"
	"fmt"

	"github.com/kdomanski/iso9660"
)

// cidataLabel is the volume label Talos's nocloud platform looks for.
const cidataLabel = "cidata"

// CIDataISO builds the small NoCloud config ISO a VM first boots with: the
// machine config as user-data, and meta-data naming the instance.
func CIDataISO(hostname string, userData []byte) ([]byte, error) {
	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, fmt.Errorf("building the config ISO of %s: %w", hostname, err)
	}
	defer w.Cleanup() //nolint:errcheck // only a temporary staging directory
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", hostname, hostname)
	for name, data := range map[string][]byte{"user-data": userData, "meta-data": []byte(meta)} {
		if err := w.AddFile(bytes.NewReader(data), name); err != nil {
			return nil, fmt.Errorf("building the config ISO of %s: adding %s: %w", hostname, name, err)
		}
	}
	var buf bytes.Buffer
	if err := w.WriteTo(&buf, cidataLabel); err != nil {
		return nil, fmt.Errorf("building the config ISO of %s: %w", hostname, err)
	}
	return buf.Bytes(), nil
}
