package proxmox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// A VM's configuration is read with GET .../pending rather than GET
// .../config: both need VM.Audit and both read the same config file, but
// the pending list carries every current value and, next to it, the value
// waiting for the VM's next restart (qemu-server API2/Qemu.pm vm_pending,
// pve-guest-common GuestHelpers.pm config_with_pending_array), so one call
// gives the configuration GET config answers (pending values applied,
// AbstractConfig.pm load_current_config) and what waits for a restart. On
// a running VM, Proxmox keeps cores, sockets and memory pending: the
// default hotplug (network,disk,usb) plugs none of them
// (QemuServer.pm vmconfig_hotplug_pending).

// vmConfig is a VM's configuration as GET .../pending lists it.
type vmConfig struct {
	current map[string]string // the values the VM runs with
	pending map[string]string // the values waiting for its next start
	deleted map[string]bool   // the keys deleted at its next start
}

// readConfig reads a VM's configuration with its pending changes. A VM
// that is gone fails as GET config does (vmGone).
func (p *Provider) readConfig(ctx context.Context, node string, id int) (vmConfig, error) {
	items, err := p.api.GetItemListInterfaceArray(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/pending", node, id))
	if err != nil {
		return vmConfig{}, err
	}
	return parsePending(items), nil
}

// parsePending reads the items of GET .../pending: {key, value, pending,
// delete}, each field but key optional; delete is 1, or 2 for a forced
// delete.
func parsePending(items []any) vmConfig {
	c := vmConfig{current: map[string]string{}, pending: map[string]string{}, deleted: map[string]bool{}}
	for _, item := range items {
		m, _ := item.(map[string]any)
		key := str(m["key"])
		if key == "" {
			continue
		}
		if v, ok := m["value"]; ok && v != nil {
			c.current[key] = str(v)
		}
		if v, ok := m["pending"]; ok && v != nil {
			c.pending[key] = str(v)
		}
		if d := str(m["delete"]); d != "" && d != "0" {
			c.deleted[key] = true
		}
	}
	return c
}

// effective is the configuration with the pending changes applied, as GET
// config answers without current=1.
func (c vmConfig) effective() map[string]string {
	out := make(map[string]string, len(c.current)+len(c.pending))
	for k, v := range c.current {
		if !c.deleted[k] {
			out[k] = v
		}
	}
	for k, v := range c.pending {
		out[k] = v
	}
	return out
}

// restartPending describes the pending changes of the VM's size, the ones
// the provider makes, such as "cores 2 -> 4" and "memory 4 GB -> 8 GB".
// Other pending keys (a CD-ROM that Proxmox detaches only at the next
// start, for example) are no reason to restart a machine.
func (c vmConfig) restartPending() []string {
	var out []string
	for _, key := range []string{"cores", "sockets", "memory"} {
		from, to, ok := c.change(key)
		if !ok {
			continue
		}
		if key == "memory" {
			from, to = memoryText(from), memoryText(to)
		}
		out = append(out, fmt.Sprintf("%s %s -> %s", key, from, to))
	}
	return out
}

// sizeDefaults are qemu-server's defaults of the size keys ($confdesc
// cores and sockets, Memory.pm $memory_fmt current).
var sizeDefaults = map[string]string{"cores": "1", "sockets": "1", "memory": "512"}

// change returns the current and pending value of a key that has a
// pending change, defaults filled in.
func (c vmConfig) change(key string) (from, to string, ok bool) {
	to, set := c.pending[key]
	if !set && !c.deleted[key] {
		return "", "", false
	}
	from, had := c.current[key]
	if !had {
		from = sizeDefaults[key]
	}
	if !set {
		to = sizeDefaults[key]
	}
	if key == "memory" {
		ok = memoryMB(from) != memoryMB(to)
	} else {
		ok = from != to
	}
	return from, to, ok
}

// memoryMB reads a memory value in MiB: "4096", or the property string
// "current=4096" (qemu-server Memory.pm $memory_fmt); 0 when unreadable.
func memoryMB(s string) int {
	head, _, _ := strings.Cut(s, ",")
	head = strings.TrimPrefix(head, "current=")
	n, _ := strconv.Atoi(head)
	return n
}

// memoryText shows a memory value in GB when it is whole GB.
func memoryText(s string) string {
	mb := memoryMB(s)
	if mb > 0 && mb%1024 == 0 {
		return fmt.Sprintf("%d GB", mb/1024)
	}
	return fmt.Sprintf("%d MB", mb)
}
