// Package pve is an emulator of the subset of the Proxmox VE API the
// provider uses. It serves the real /api2/json wire protocol the way
// proxmox-api-go calls and parses it: API-token authentication, {"data": ...}
// envelopes, errors with "message" (and "errors" on 400), asynchronous tasks
// identified by UPIDs with "OK", error or "WARNINGS: N" exit statuses, nodes,
// storages with content upload, resource pools, QEMU virtual machines with
// pending configuration, the guest agent, and the per-VM and datacenter
// firewall.
//
// A call that Proxmox VE answers with a UPID makes only the checks Proxmox VE
// makes before forking its worker; the worker's checks and the call's effect
// run when the task ends, so reads show the old state while the task runs.
// A VM being created is listed at once with "lock: create", as qemu-server
// writes a locked placeholder configuration before forking, and refuses
// configuration changes with "VM is locked (create)" until its task ends.
//
// Requests are authorized as Proxmox VE 9 authorizes them: API tokens
// (privilege-separated or not), users, groups, roles and ACL entries with
// propagation, resource pools lending their roles to their members; each
// method's schema check and the checks its code makes answer 403
// "Permission check failed (<path>, <privilege>)", lists leave out what the
// caller may not audit, and GET /access/permissions reports a token's
// privileges. The primary token holds every privilege.
//
// The emulator keeps its state in memory behind one mutex. Every request is
// recorded in an operation log, and every operation can be made to fail,
// hang, slow down, or end its task with warnings, so tests can assert how a
// client behaves. A request for anything not implemented is answered with
// HTTP 501 naming the method and path, like Proxmox VE itself.
//
// The package provides an http.Handler; the caller serves it over TLS on a
// loopback address.
package pve
