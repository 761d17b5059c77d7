package pve

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The permission checks qemu-server makes inside create_vm and
// update_vm_api (src/PVE/API2/Qemu.pm: $check_vm_modify_config_perm and its
// option tables, $check_storage_access, $check_vm_create_serial_perm,
// check_usb_perm, check_hostpci_perm, check_rng_perm, check_dir_perm, the
// worker's $check_drive_perms), PVE::QemuServer::check_bridge_access with
// pve-guest-common's PVE::GuestHelpers::check_vnet_access and
// assert_tag_permissions.

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

var (
	cpuOptions       = keySet("cores", "cpu", "runningcpu", "cpulimit", "cpuunits", "numa", "smp", "sockets", "vcpus")
	memoryOptions    = keySet("memory", "balloon", "shares", "allow-ksm")
	hwtypeOptions    = keySet("acpi", "hotplug", "kvm", "machine", "runningmachine", "scsihw", "smbios1", "tablet", "vga", "watchdog", "audio0", "rng0")
	generalOptions   = keySet("agent", "autostart", "bios", "description", "keyboard", "localtime", "migrate_downtime", "migrate_speed", "name", "onboot", "ostype", "protection", "reboot", "startdate", "startup", "tdf", "template")
	vmPowerOptions   = keySet("freeze")
	diskOptions      = keySet("boot", "bootdisk", "vmstatestorage")
	cloudinitOptions = keySet("cicustom", "cipassword", "citype", "ciuser", "ciupgrade", "nameserver", "searchdomain", "sshkeys")

	ownDeviceRE = regexp.MustCompile(`^(?:unused|serial|usb|hostpci|virtiofs)\d+$`)
	numaNRE     = regexp.MustCompile(`^numa\d+$`)
	ipconfigRE  = regexp.MustCompile(`^ipconfig\d+$`)
	netNRE      = regexp.MustCompile(`^net\d+$`)
	newDiskRE   = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`) // $NEW_DISK_RE
	ownerRE     = regexp.MustCompile(`(?:^|/)(?:vm|base)-(\d+)-`)
)

// isDriveName is is_valid_drivename: ide, sata, scsi, virtio, efidisk0 and
// tpmstate0 (not unused).
func isDriveName(k string) bool {
	kind := kindOf(k)
	return kind == kindDrive || kind == kindVolume
}

// modifyConfigPerm is $check_vm_modify_config_perm: one privilege per
// option, on the pool or the VM (check_vm_perm). Drives, serial, usb,
// hostpci, virtiofs, unused and tags are checked elsewhere; an option in
// no table is refused to anyone but root@pam, which a token never is.
// The caller holds s.mu.
func (s *Server) modifyConfigPerm(authid string, vmid int, pool string, keys []string) error {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	for _, opt := range keys {
		if isDriveName(opt) || opt == "cdrom" || ownDeviceRE.MatchString(opt) || opt == "tags" {
			continue
		}
		var err error
		switch {
		case cpuOptions[opt] || numaNRE.MatchString(opt):
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.Config.CPU")
		case memoryOptions[opt]:
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.Config.Memory")
		case hwtypeOptions[opt]:
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.Config.HWType")
		case generalOptions[opt]:
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.Config.Options")
			if err == nil && opt == "startup" {
				err = s.check(authid, "/", "Sys.Modify")
			}
		case vmPowerOptions[opt]:
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.PowerMgmt")
		case diskOptions[opt]:
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.Config.Disk")
		case netNRE.MatchString(opt) || opt == "running-nets-host-mtu":
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.Config.Network")
		case cloudinitOptions[opt] || ipconfigRE.MatchString(opt):
			err = s.checkVMPerm(authid, vmid, pool, true, "VM.Config.Cloudinit", "VM.Config.Network")
		case opt == "vmstate":
			err = s.checkVMPerm(authid, vmid, pool, false, "VM.Config.Disk", "VM.PowerMgmt")
		default:
			err = errorf("only root can set '%s' config", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// volumeInfo is what pve-storage's parse_volname tells of a volume ID:
// its content type and owning VM (0 for none).
func volumeInfo(volid string) (content string, owner int) {
	_, name, _ := strings.Cut(volid, ":")
	content = contentOfVolname(name)
	if m := ownerRE.FindStringSubmatch(name); m != nil {
		owner, _ = strconv.Atoi(m[1])
	}
	return content, owner
}

// storageAccess is $check_storage_access for the drives of a create or
// update: a new disk needs Datastore.AllocateSpace on its storage, an
// existing volume check_volume_access, a host CD-ROM Sys.Console on /.
// defaultStorage is create's storage parameter. The caller holds s.mu.
func (s *Server) storageAccess(authid string, vmid int, changes map[string]string, defaultStorage string) error {
	for _, k := range sortedKeys(changes) {
		v := changes[k]
		switch {
		case isDriveName(k):
			p, err := parseProp(v, "file")
			if err != nil {
				continue
			}
			volid := p.head
			cdrom := p.kv["media"] == "cdrom"
			_, volname, hasStore := strings.Cut(volid, ":")
			switch {
			case volid == "" || volid == "none" || volid == "cloudinit" || (hasStore && volname == "cloudinit"):
			case cdrom && volid == "cdrom":
				err = s.check(authid, "/", "Sys.Console")
			case !cdrom && newDiskRE.MatchString(volid):
				store := newDiskRE.FindStringSubmatch(volid)[2]
				if store == "" {
					store = defaultStorage
				}
				if store == "" {
					return errorf("no storage ID specified (and no default storage)")
				}
				err = s.check(authid, "/storage/"+store, "Datastore.AllocateSpace")
			case !hasStore:
				if authid != "root@pam" {
					err = errorf("Only root can pass arbitrary filesystem paths.")
				}
			default:
				store, _, _ := strings.Cut(volid, ":")
				if s.findStorage(store) == nil {
					continue // parse_volname fails: the storage checks say so
				}
				content, owner := volumeInfo(volid)
				err = s.checkVolumeAccess(authid, volid, content, owner, vmid)
			}
			if err != nil {
				return err
			}
		case kindOf(k) == kindUnused:
			if store, _, ok := strings.Cut(v, ":"); ok && s.findStorage(store) != nil {
				content, owner := volumeInfo(v)
				if err := s.checkVolumeAccess(authid, v, content, owner, vmid); err != nil {
					return err
				}
			}
		}
	}
	if st, ok := changes["vmstatestorage"]; ok {
		return s.check(authid, "/storage/"+st, "Datastore.AllocateSpace")
	}
	return nil
}

// trunkTags expands a NIC's trunks (vlanid[;vlanid...], ranges a-b) as
// GuestHelpers::get_tags_from_trunk does.
func trunkTags(trunks string) []string {
	var out []string
	for _, part := range strings.Split(trunks, ";") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			if part != "" {
				out = append(out, part)
			}
			continue
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil {
			continue
		}
		for i := a; i <= b; i++ {
			out = append(out, strconv.Itoa(i))
		}
	}
	slices.Sort(out)
	return out
}

// bridgeAccess is check_bridge_access: SDN.Use on the bridge (in the
// localnetwork zone; the emulator has no SDN VNets of other zones), or on
// the VLAN of a tagged NIC and on each VLAN of its trunks. The caller
// holds s.mu.
func (s *Server) bridgeAccess(authid string, nets map[string]string) error {
	for _, k := range sortedKeys(nets) {
		if kindOf(k) != kindNet {
			continue
		}
		_, _, kv := netParts(nets[k])
		bridge := kv["bridge"]
		if bridge == "" {
			continue
		}
		path := "/sdn/zones/localnetwork/" + bridge
		tag, trunks := kv["tag"], kv["trunks"]
		if tag != "" {
			if err := s.check(authid, path+"/"+tag, "SDN.Use"); err != nil {
				return err
			}
		}
		for _, t := range trunkTags(trunks) {
			if err := s.check(authid, path+"/"+t, "SDN.Use"); err != nil {
				return err
			}
		}
		if tag == "" && trunks == "" {
			if err := s.check(authid, path, "SDN.Use"); err != nil {
				return err
			}
		}
	}
	return nil
}

// devicePerm is check_usb_perm, check_hostpci_perm, check_rng_perm and
// check_dir_perm for one device option; other options pass. The caller
// holds s.mu.
func (s *Server) devicePerm(authid string, vmid int, pool, opt, value string) error {
	switch {
	case strings.HasPrefix(opt, "usb"):
		if err := s.checkVMPerm(authid, vmid, pool, false, "VM.Config.HWType"); err != nil {
			return err
		}
		p, _ := parseProp(value, "host")
		switch {
		case p.head != "" || p.kv["host"] != "":
			if host := p.head + p.kv["host"]; !strings.EqualFold(host, "spice") {
				return errorf("only root can set '%s' config for real devices", opt)
			}
		case p.kv["mapping"] != "":
			return s.check(authid, "/mapping/usb/"+p.kv["mapping"], "Mapping.Use")
		default:
			return errorf("either 'host' or 'mapping' must be set.")
		}
	case strings.HasPrefix(opt, "hostpci"):
		p, _ := parseProp(value, "host")
		switch {
		case p.head != "" || p.kv["host"] != "":
			return errorf("only root can set '%s' config for non-mapped devices", opt)
		case p.kv["mapping"] != "":
			if err := s.check(authid, "/mapping/pci/"+p.kv["mapping"], "Mapping.Use"); err != nil {
				return err
			}
			if err := s.checkVMPerm(authid, vmid, pool, false, "VM.Config.HWType"); err != nil {
				return err
			}
		default:
			return errorf("either 'host' or 'mapping' must be set.")
		}
		if _, ok := p.kv["romfile"]; ok {
			return paramErr(opt, "only root@pam can set 'romfile' option")
		}
	case opt == "rng0":
		if err := s.checkVMPerm(authid, vmid, pool, false, "VM.Config.HWType"); err != nil {
			return err
		}
		p, _ := parseProp(value, "source")
		if p.head == "/dev/hwrng" || p.kv["source"] == "/dev/hwrng" {
			return s.check(authid, "/mapping/hwrng", "Mapping.Use")
		}
	case strings.HasPrefix(opt, "virtiofs"):
		if err := s.checkVMPerm(authid, vmid, pool, false, "VM.Config.Disk"); err != nil {
			return err
		}
		p, _ := parseProp(value, "dirid")
		dir := p.head
		if dir == "" {
			dir = p.kv["dirid"]
		}
		return s.check(authid, "/mapping/dir/"+dir, "Mapping.Use")
	}
	return nil
}

// createPerms are create_vm's checks before it forks, after the pool's
// existence: VM.Allocate on the VM or its pool (a bare "Permission check
// failed" otherwise), then the storages, the options, serial and device
// options, and the bridges. The caller holds s.mu.
func (s *Server) createPerms(authid string, vmid int, pool, storage string, start bool, changes map[string]string) error {
	if storage != "" {
		if err := s.check(authid, "/storage/"+storage, "Datastore.AllocateSpace"); err != nil {
			return err
		}
	}
	if start {
		if err := s.checkVMPerm(authid, vmid, pool, false, "VM.PowerMgmt"); err != nil {
			return err
		}
	}
	if s.check(authid, "/vms/"+strconv.Itoa(vmid), "VM.Allocate") != nil &&
		(pool == "" || s.check(authid, "/pool/"+pool, "VM.Allocate") != nil) {
		return permError("")
	}
	if len(changes) == 0 {
		return nil
	}
	if err := s.storageAccess(authid, vmid, changes, storage); err != nil {
		return err
	}
	keys := make([]string, 0, len(changes))
	for k := range changes {
		keys = append(keys, k)
	}
	if err := s.modifyConfigPerm(authid, vmid, pool, keys); err != nil {
		return err
	}
	for _, k := range sortedKeys(changes) {
		if strings.HasPrefix(k, "serial") {
			if changes[k] != "socket" {
				return errorf("only root can set '%s' config for real devices", k)
			}
			if err := s.checkVMPerm(authid, vmid, pool, false, "VM.Config.HWType"); err != nil {
				return err
			}
		}
	}
	for _, k := range sortedKeys(changes) {
		if strings.HasPrefix(k, "usb") || strings.HasPrefix(k, "hostpci") || k == "rng0" || strings.HasPrefix(k, "virtiofs") {
			if err := s.devicePerm(authid, vmid, pool, k, changes[k]); err != nil {
				return err
			}
		}
	}
	return s.bridgeAccess(authid, changes)
}

// updatePerms are update_vm_api's checks before it loads the
// configuration: the options deleted and set, the storages and the
// bridges. The caller holds s.mu.
func (s *Server) updatePerms(authid string, vmid int, changes map[string]string, deletes []string) error {
	if err := s.modifyConfigPerm(authid, vmid, "", deletes); err != nil {
		return err
	}
	keys := make([]string, 0, len(changes))
	for k := range changes {
		keys = append(keys, k)
	}
	if err := s.modifyConfigPerm(authid, vmid, "", keys); err != nil {
		return err
	}
	if err := s.storageAccess(authid, vmid, changes, ""); err != nil {
		return err
	}
	return s.bridgeAccess(authid, changes)
}

// drivePerms is the update worker's $check_drive_perms: a cloud-init drive
// needs VM.Config.Cloudinit and VM.Config.CDROM, a CD-ROM VM.Config.CDROM,
// a disk VM.Config.Disk. The caller holds s.mu.
func (s *Server) drivePerms(authid string, vmid int, value string) error {
	p, err := parseProp(value, "file")
	if err != nil {
		return nil
	}
	_, volname, _ := strings.Cut(p.head, ":")
	switch {
	case p.head == "cloudinit" || volname == "cloudinit" || strings.Contains(volname, "-cloudinit"):
		return s.checkVMPerm(authid, vmid, "", false, "VM.Config.Cloudinit", "VM.Config.CDROM")
	case p.kv["media"] == "cdrom":
		return s.checkVMPerm(authid, vmid, "", false, "VM.Config.CDROM")
	}
	return s.checkVMPerm(authid, vmid, "", false, "VM.Config.Disk")
}

// updateWorkerPerms are the checks update_vm_api's $updatefn makes per
// option once the configuration is loaded (in the qmconfig worker for
// POST): deleted and replaced drives by their kind, unused disks, serial
// ports, devices, tags (assert_tag_permissions: VM.Config.Options; every
// tag is allowed, as with datacenter.cfg's default user-tag-access) and a
// NIC's old bridge. The emulator checks every option before changing any;
// Proxmox VE writes each option as it goes, so a refusal there leaves the
// options before it changed. The caller holds s.mu.
func (s *Server) updateWorkerPerms(authid string, g *vm, changes map[string]string, deletes []string) error {
	current := func(k string) (string, bool) {
		if v, ok := g.pending[k]; ok {
			return v, true
		}
		v, ok := g.conf[k]
		return v, ok
	}
	for _, opt := range deletes {
		val, ok := current(opt)
		if !ok {
			continue
		}
		var err error
		switch {
		case kindOf(opt) == kindUnused:
			err = s.checkVMPerm(authid, g.id, "", false, "VM.Config.Disk")
		case isDriveName(opt):
			err = s.drivePerms(authid, g.id, val)
		case strings.HasPrefix(opt, "serial"):
			if val == "socket" {
				err = s.checkVMPerm(authid, g.id, "", false, "VM.Config.HWType")
			} else {
				err = errorf("only root can delete '%s' config for real devices", opt)
			}
		case strings.HasPrefix(opt, "usb") || strings.HasPrefix(opt, "hostpci") || opt == "rng0" || strings.HasPrefix(opt, "virtiofs"):
			err = s.devicePerm(authid, g.id, "", opt, val)
		case opt == "tags":
			err = s.checkVMPerm(authid, g.id, "", false, "VM.Config.Options")
		case kindOf(opt) == kindNet:
			if old, ok := g.conf[opt]; ok {
				err = s.bridgeAccess(authid, map[string]string{opt: old})
			}
		}
		if err != nil {
			return err
		}
	}
	for _, opt := range sortedKeys(changes) {
		val := changes[opt]
		if pv, ok := g.pending[opt]; ok && pv == val {
			continue
		}
		old, had := g.conf[opt]
		var err error
		switch {
		case isDriveName(opt):
			if had {
				err = s.drivePerms(authid, g.id, old)
			}
			if err == nil {
				err = s.drivePerms(authid, g.id, val)
			}
		case strings.HasPrefix(opt, "serial"):
			if (!had || old == "socket") && val == "socket" {
				err = s.checkVMPerm(authid, g.id, "", false, "VM.Config.HWType")
			} else {
				err = errorf("only root can modify '%s' config for real devices", opt)
			}
		case strings.HasPrefix(opt, "usb") || strings.HasPrefix(opt, "hostpci") || opt == "rng0" || strings.HasPrefix(opt, "virtiofs"):
			if had {
				err = s.devicePerm(authid, g.id, "", opt, old)
			}
			if err == nil {
				err = s.devicePerm(authid, g.id, "", opt, val)
			}
		case opt == "tags":
			err = s.checkVMPerm(authid, g.id, "", false, "VM.Config.Options")
		case kindOf(opt) == kindNet:
			if had {
				err = s.bridgeAccess(authid, map[string]string{opt: old})
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
