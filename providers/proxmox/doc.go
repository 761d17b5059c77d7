// Package proxmox is the Proxmox VE provider: it owns a cluster's resource
// pool, boot ISO, per-VM config ISOs, VMs and per-VM firewalls, found by
// ownership tags and the pool, and talks to Proxmox through proxmox-api-go.
package proxmox
