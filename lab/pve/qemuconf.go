package pve

import (
	"crypto/sha1" //nolint:gosec // Proxmox VE digests are SHA-1.
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// keyKind classifies QEMU configuration keys by how Proxmox VE validates
// them and how they are encoded in JSON answers.
type keyKind int

const (
	kindUnknown keyKind = iota
	kindString
	kindInt
	kindBool
	kindFloat
	kindDrive  // ide, sata, scsi, virtio
	kindVolume // efidisk0, tpmstate0
	kindNet
	kindUnused
)

var plainKinds = map[string]keyKind{
	"affinity": kindString, "agent": kindString, "amd-sev": kindString, "arch": kindString,
	"args": kindString, "audio0": kindString, "bios": kindString, "boot": kindString,
	"bootdisk": kindString, "cdrom": kindString, "cicustom": kindString, "cipassword": kindString,
	"citype": kindString, "ciuser": kindString, "cpu": kindString, "description": kindString,
	"hookscript": kindString, "hotplug": kindString, "hugepages": kindString,
	"import-working-storage": kindString, "intel-tdx": kindString, "ivshmem": kindString,
	"keyboard": kindString, "lock": kindString, "machine": kindString, "memory": kindString,
	"meta": kindString, "name": kindString, "nameserver": kindString, "ostype": kindString,
	"rng0": kindString, "scsihw": kindString, "searchdomain": kindString, "smbios1": kindString,
	"spice_enhancements": kindString, "sshkeys": kindString, "startdate": kindString,
	"startup": kindString, "tags": kindString, "vga": kindString, "vmgenid": kindString,
	"vmstatestorage": kindString, "watchdog": kindString,

	"balloon": kindInt, "cores": kindInt, "cpuunits": kindInt, "migrate_speed": kindInt,
	"shares": kindInt, "smp": kindInt, "sockets": kindInt, "vcpus": kindInt,

	"acpi": kindBool, "allow-ksm": kindBool, "autostart": kindBool, "ciupgrade": kindBool,
	"freeze": kindBool, "keephugepages": kindBool, "kvm": kindBool, "localtime": kindBool,
	"numa": kindBool, "onboot": kindBool, "protection": kindBool, "reboot": kindBool,
	"tablet": kindBool, "template": kindBool,

	"cpulimit": kindFloat, "migrate_downtime": kindFloat,

	"efidisk0": kindVolume, "tpmstate0": kindVolume,
}

var indexedKinds = []struct {
	prefix string
	max    int
	kind   keyKind
}{
	{"ide", 3, kindDrive}, {"sata", 5, kindDrive}, {"scsi", 30, kindDrive}, {"virtio", 15, kindDrive},
	{"net", 31, kindNet}, {"unused", 255, kindUnused},
	{"hostpci", 15, kindString}, {"ipconfig", 31, kindString}, {"numa", 7, kindString},
	{"parallel", 2, kindString}, {"serial", 3, kindString}, {"usb", 29, kindString},
	{"virtiofs", 9, kindString},
}

// driveOrder is the order drives are allocated and boot devices chosen.
var driveOrder = []string{"ide", "sata", "scsi", "virtio"}

func kindOf(key string) keyKind {
	if k, ok := plainKinds[key]; ok {
		return k
	}
	for _, ix := range indexedKinds {
		rest, ok := strings.CutPrefix(key, ix.prefix)
		if !ok || rest == "" {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 || n > ix.max || strconv.Itoa(n) != rest {
			continue
		}
		return ix.kind
	}
	return kindUnknown
}

// isVolumeKey reports whether a key holds a drive or volume.
func isVolumeKey(key string) bool {
	switch kindOf(key) {
	case kindDrive, kindVolume, kindUnused:
		return true
	}
	return false
}

// jsonValue encodes a configuration value the way Proxmox VE does: numbers
// for integer, boolean and number properties, strings otherwise.
func jsonValue(key, v string) any {
	switch kindOf(key) {
	case kindInt, kindBool:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	case kindFloat:
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	}
	return v
}

// prop is a parsed Proxmox VE property string: a value for the default key
// followed by key=value pairs.
type prop struct {
	head string
	kv   map[string]string
}

// parseProp parses "head,k=v,..." where head may also be given as
// defaultKey=head.
func parseProp(s, defaultKey string) (prop, error) {
	p := prop{kv: map[string]string{}}
	for i, part := range strings.Split(s, ",") {
		k, v, hasEq := strings.Cut(part, "=")
		switch {
		case i == 0 && !hasEq:
			p.head = part
			continue
		case !hasEq:
			return p, fmt.Errorf("value without key '%s'", part)
		case k == defaultKey && defaultKey != "":
			p.head = v
			continue
		}
		if _, dup := p.kv[k]; dup {
			return p, fmt.Errorf("duplicate key in comma-separated list property: %s", k)
		}
		p.kv[k] = v
	}
	return p, nil
}

// String prints the property string with the head first and the other keys
// sorted, as Proxmox VE writes its configuration.
func (p prop) String() string {
	keys := make([]string, 0, len(p.kv))
	for k := range p.kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys)+1)
	if p.head != "" {
		parts = append(parts, p.head)
	}
	for _, k := range keys {
		parts = append(parts, k+"="+p.kv[k])
	}
	return strings.Join(parts, ",")
}

var (
	tagRE     = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_\-+.]*$`)
	dnsNameRE = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?\.)*[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?$`)
	memoryRE  = regexp.MustCompile(`^(?:current=)?(\d+)$`)
	netModels = []string{
		"e1000", "e1000-82540em", "e1000-82544gc", "e1000-82545em", "e1000e", "i82551", "i82557b",
		"i82559er", "ne2k_isa", "ne2k_pci", "pcnet", "rtl8139", "virtio", "vmxnet3",
	}
)

// normalizeTags splits a tag list on ';', ',' and spaces, drops duplicates
// (ignoring case) and sorts it, as Proxmox VE does with the default
// datacenter tag style.
func normalizeTags(v string) (string, error) {
	var tags []string
	seen := map[string]bool{}
	for _, t := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		if !tagRE.MatchString(t) {
			return "", fmt.Errorf("invalid format - invalid tag '%s'", t)
		}
		if seen[strings.ToLower(t)] {
			continue
		}
		seen[strings.ToLower(t)] = true
		tags = append(tags, t)
	}
	slices.SortFunc(tags, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return strings.Join(tags, ";"), nil
}

func splitTags(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ";")
}

func normalizeBool(v string) (string, bool) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return "1", true
	case "0", "false", "no", "off":
		return "0", true
	}
	return "", false
}

// normalizeValue validates a configuration value that needs no cluster
// state and returns it in the form Proxmox VE stores. Drives are checked for
// syntax only; their volumes are resolved when the change is applied.
func normalizeValue(key, v string) (string, error) {
	switch kindOf(key) {
	case kindUnknown:
		return "", fmt.Errorf("property is not defined in schema and the schema does not allow additional properties")
	case kindBool:
		b, ok := normalizeBool(v)
		if !ok {
			return "", fmt.Errorf("type check ('boolean') failed - got '%s'", v)
		}
		return b, nil
	case kindInt:
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", fmt.Errorf("type check ('integer') failed - got '%s'", v)
		}
		minimum := 0
		switch key {
		case "cores", "sockets", "vcpus", "smp":
			minimum = 1
		}
		if n < minimum {
			return "", fmt.Errorf("value must have a minimum value of %d", minimum)
		}
		return strconv.Itoa(n), nil
	case kindFloat:
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return "", fmt.Errorf("type check ('number') failed - got '%s'", v)
		}
		return v, nil
	case kindNet:
		return normalizeNet(v)
	case kindDrive, kindVolume, kindUnused:
		p, err := parseProp(v, "file")
		if err != nil {
			return "", err
		}
		if p.head == "" {
			return "", fmt.Errorf("missing property - 'file' requires this property")
		}
		if m, ok := p.kv["media"]; ok && m != "cdrom" && m != "disk" {
			return "", fmt.Errorf("invalid format - value '%s' does not have a value in the enumeration 'cdrom, disk'", m)
		}
		return p.String(), nil
	}
	switch key {
	case "name":
		if len(v) > 128 || !dnsNameRE.MatchString(v) {
			return "", fmt.Errorf("invalid format - value does not look like a valid DNS name")
		}
	case "tags":
		return normalizeTags(v)
	case "memory":
		m := memoryRE.FindStringSubmatch(v)
		if m == nil {
			return "", fmt.Errorf("invalid format - value '%s' does not look like a valid memory setting", v)
		}
		if n, _ := strconv.Atoi(m[1]); n < 16 {
			return "", fmt.Errorf("value must have a minimum value of 16")
		}
	case "agent":
		p, err := parseProp(v, "enabled")
		if err != nil {
			return "", err
		}
		enabled, ok := normalizeBool(p.head)
		if !ok {
			return "", fmt.Errorf("type check ('boolean') failed - got '%s'", p.head)
		}
		p.head = enabled
		return p.String(), nil
	case "bios":
		if v != "seabios" && v != "ovmf" {
			return "", fmt.Errorf("value '%s' does not have a value in the enumeration 'seabios, ovmf'", v)
		}
	case "ostype":
		if !slices.Contains([]string{"other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24", "l26", "solaris"}, v) {
			return "", fmt.Errorf("value '%s' does not have a value in the enumeration", v)
		}
	case "scsihw":
		if !slices.Contains([]string{"lsi", "lsi53c810", "virtio-scsi-pci", "virtio-scsi-single", "megasas", "pvscsi"}, v) {
			return "", fmt.Errorf("value '%s' does not have a value in the enumeration", v)
		}
	}
	return v, nil
}

// normalizeNet validates a NIC and writes it as "model=MAC,key=value...".
// A NIC without a MAC keeps an empty one; the caller generates it.
func normalizeNet(v string) (string, error) {
	var model, mac string
	kv := map[string]string{}
	for i, part := range strings.Split(v, ",") {
		k, val, hasEq := strings.Cut(part, "=")
		if slices.Contains(netModels, k) {
			if i != 0 && model != "" {
				return "", fmt.Errorf("duplicate model")
			}
			model, mac = k, val
			continue
		}
		switch {
		case !hasEq:
			return "", fmt.Errorf("invalid format - value without key '%s'", part)
		case k == "model":
			model = val
		case k == "macaddr":
			mac = val
		default:
			kv[k] = val
		}
	}
	if !slices.Contains(netModels, model) {
		return "", fmt.Errorf("invalid format - value '%s' does not have a value in the enumeration '%s'", model, strings.Join(netModels, ", "))
	}
	if mac != "" {
		hw, err := net.ParseMAC(mac)
		if err != nil || len(hw) != 6 {
			return "", fmt.Errorf("invalid format - value does not look like a valid MAC address")
		}
		if hw[0]&1 == 1 {
			return "", fmt.Errorf("invalid format - value is a multicast MAC address")
		}
	}
	if b, ok := kv["firewall"]; ok {
		nb, ok := normalizeBool(b)
		if !ok {
			return "", fmt.Errorf("type check ('boolean') failed - got '%s'", b)
		}
		kv["firewall"] = nb
	}
	if b, ok := kv["link_down"]; ok {
		nb, ok := normalizeBool(b)
		if !ok {
			return "", fmt.Errorf("type check ('boolean') failed - got '%s'", b)
		}
		kv["link_down"] = nb
	}
	if t, ok := kv["tag"]; ok {
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 || n > 4094 {
			return "", fmt.Errorf("invalid format - value '%s' is not a valid VLAN tag", t)
		}
	}
	return prop{head: model + "=" + mac, kv: kv}.String(), nil
}

// netParts returns a normalised NIC's model, MAC and options.
func netParts(v string) (model, mac string, kv map[string]string) {
	head, rest, _ := strings.Cut(v, ",")
	model, mac, _ = strings.Cut(head, "=")
	kv = map[string]string{}
	if rest != "" {
		for _, part := range strings.Split(rest, ",") {
			k, val, _ := strings.Cut(part, "=")
			kv[k] = val
		}
	}
	return model, mac, kv
}

// generatedMAC returns a deterministic MAC address with the Proxmox VE
// prefix BC:24:11.
func generatedMAC(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", sum[0], sum[1], sum[2])
}

// uuidFrom returns a deterministic version-4-shaped UUID.
func uuidFrom(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	sum[6] = sum[6]&0x0f | 0x40
	sum[8] = sum[8]&0x3f | 0x80
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func digestOf(s string) string {
	sum := sha1.Sum([]byte(s)) //nolint:gosec // Proxmox VE digests are SHA-1.
	return hex.EncodeToString(sum[:])
}

const (
	kib = int64(1024)
	mib = 1024 * kib
	gib = 1024 * mib
	tib = 1024 * gib
)

// formatSize prints a size the way Proxmox VE writes drive sizes.
func formatSize(b int64) string {
	switch {
	case b == 0:
		return "0"
	case b%tib == 0:
		return strconv.FormatInt(b/tib, 10) + "T"
	case b%gib == 0:
		return strconv.FormatInt(b/gib, 10) + "G"
	case b%mib == 0:
		return strconv.FormatInt(b/mib, 10) + "M"
	case b%kib == 0:
		return strconv.FormatInt(b/kib, 10) + "K"
	}
	return strconv.FormatInt(b, 10)
}

var sizeRE = regexp.MustCompile(`^(\+)?(\d+(?:\.\d+)?)([KMGT])?$`)

// parseSize parses a resize argument: an optional '+', a number and an
// optional K, M, G or T suffix (bytes without one).
func parseSize(v string) (n int64, relative bool, err error) {
	m := sizeRE.FindStringSubmatch(v)
	if m == nil {
		return 0, false, fmt.Errorf("invalid format - value '%s' does not match the regex pattern", v)
	}
	f, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return 0, false, fmt.Errorf("invalid format - value '%s' is not a number", v)
	}
	unit := map[string]int64{"": 1, "K": kib, "M": mib, "G": gib, "T": tib}[m[3]]
	return int64(f * float64(unit)), m[1] == "+", nil
}

// parseFormattedSize reads a drive's size= option.
func parseFormattedSize(v string) int64 {
	n, _, err := parseSize(v)
	if err != nil {
		return 0
	}
	return n
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
