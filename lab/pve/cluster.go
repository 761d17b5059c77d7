package pve

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// privileges are the privileges Proxmox VE 9 knows; the lab token has all of
// them everywhere.
var privileges = []string{
	"Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit",
	"Group.Allocate", "Mapping.Audit", "Mapping.Modify", "Mapping.Use", "Permissions.Modify",
	"Pool.Allocate", "Pool.Audit", "Realm.Allocate", "Realm.AllocateUser",
	"SDN.Allocate", "SDN.Audit", "SDN.Use", "Sys.AccessNetwork", "Sys.Audit", "Sys.Console",
	"Sys.Incoming", "Sys.Modify", "Sys.PowerMgmt", "Sys.Syslog", "User.Modify",
	"VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU",
	"VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory",
	"VM.Config.Network", "VM.Config.Options", "VM.Console", "VM.GuestAgent.Audit",
	"VM.GuestAgent.FileRead", "VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite",
	"VM.GuestAgent.Unrestricted", "VM.Migrate", "VM.PowerMgmt", "VM.Replicate", "VM.Snapshot",
	"VM.Snapshot.Rollback",
}

const nodeMemory = 256 * gib

func (s *Server) routes() {
	s.route("GET", "/version", "version.get", s.getVersion)
	s.route("GET", "/nodes", "nodes.list", s.listNodes)
	s.route("GET", "/nodes/{node}/status", "node.status", s.getNodeStatus)
	s.route("GET", "/nodes/{node}/network", "node.network", s.listNetwork)
	s.route("GET", "/cluster/status", "cluster.status", s.getClusterStatus)
	s.route("GET", "/cluster/resources", "cluster.resources", s.listResources)
	s.route("GET", "/cluster/nextid", "cluster.nextid", s.nextID)
	s.route("GET", "/access/permissions", "access.permissions", s.permissions)
	s.route("GET", "/cluster/ha/resources", "ha.resources.list", func(*http.Request) (any, error) { return []any{}, nil })
	s.route("GET", "/cluster/ha/resources/{sid}", "ha.resources.get", s.getHAResource)
	s.taskRoutes()
	s.storageRoutes()
	s.poolRoutes()
	s.qemuRoutes()
	s.firewallRoutes()
	sdn := func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := r.Context().Value(ctxKey{}).(*Op); ok {
			rec.Name = "sdn"
		}
		handle, lose := s.inject(w, r, "sdn")
		switch {
		case !handle:
		case lose:
			loseReply(w, r, notImplementedError(r.Method, r.URL.Path))
		default:
			s.notImplemented(w, r.Method, r.URL.Path)
		}
	}
	s.mux.HandleFunc(apiPrefix+"/cluster/sdn", sdn)
	s.mux.HandleFunc(apiPrefix+"/cluster/sdn/", sdn)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := r.Context().Value(ctxKey{}).(*Op); ok {
			rec.Name = "unimplemented"
		}
		s.notImplemented(w, r.Method, r.URL.Path)
	})
}

func (s *Server) getVersion(*http.Request) (any, error) {
	release, _, _ := strings.Cut(Version, ".")
	minor := strings.Split(Version, ".")[1]
	return map[string]any{
		"version": Version,
		"release": release + "." + minor,
		"repoid":  "4d4b28e7a1c3b5f0",
	}, nil
}

func (s *Server) nodeEntry(n *node) map[string]any {
	m := map[string]any{
		"node":            n.name,
		"id":              "node/" + n.name,
		"type":            "node",
		"status":          "offline",
		"level":           "",
		"ssl_fingerprint": "5A:1B:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00",
	}
	if n.online {
		var used int64
		for _, g := range s.vms {
			if g.node == n.name && g.running {
				used += int64(g.memoryMB()) * mib
			}
		}
		m["status"] = "online"
		m["maxcpu"] = 32
		m["cpu"] = 0.02
		m["maxmem"] = nodeMemory
		m["mem"] = 8*gib + used
		m["maxdisk"] = 100 * gib
		m["disk"] = 10 * gib
		m["uptime"] = int64(time.Since(s.started)/time.Second) + 86400
	}
	return m
}

func (s *Server) listNodes(*http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, n := range s.nodes {
		out = append(out, s.nodeEntry(n))
	}
	return out, nil
}

func (s *Server) getNodeStatus(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	n, err := s.lookupNode(r.PathValue("node"))
	if err != nil {
		return nil, err
	}
	e := s.nodeEntry(n)
	used := e["mem"].(int64)
	return map[string]any{
		"pveversion": "pve-manager/" + Version + "/4d4b28e7a1c3b5f0",
		"kversion":   "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2",
		"uptime":     e["uptime"],
		"cpu":        e["cpu"],
		"wait":       0,
		"loadavg":    []string{"0.10", "0.08", "0.05"},
		"cpuinfo": map[string]any{
			"cpus": 32, "cores": 16, "sockets": 1, "model": "Emulated CPU", "mhz": "3000.000", "hvm": "1",
		},
		"memory":    map[string]any{"total": nodeMemory, "used": used, "free": nodeMemory - used},
		"swap":      map[string]any{"total": 8 * gib, "used": 0, "free": 8 * gib},
		"rootfs":    map[string]any{"total": 100 * gib, "used": 10 * gib, "free": 90 * gib, "avail": 90 * gib},
		"ksm":       map[string]any{"shared": 0},
		"boot-info": map[string]any{"mode": "efi", "secureboot": 0},
		"current-kernel": map[string]any{
			"sysname": "Linux", "release": "6.14.8-2-pve", "machine": "x86_64",
			"version": "#1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2",
		},
	}, nil
}

func (s *Server) listNetwork(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	if _, err := s.lookupNode(r.PathValue("node")); err != nil {
		return nil, err
	}
	typ := q.Get("type")
	out := []map[string]any{}
	for i, b := range s.opts.Bridges {
		if typ != "" && typ != "bridge" && typ != "any_bridge" {
			continue
		}
		out = append(out, map[string]any{
			"iface":        b,
			"type":         "bridge",
			"active":       1,
			"autostart":    1,
			"method":       "manual",
			"method6":      "manual",
			"families":     []string{"inet"},
			"bridge_ports": fmt.Sprintf("eno%d", i+1),
			"bridge_stp":   "off",
			"bridge_fd":    "0",
			"priority":     i + 3,
		})
	}
	return out, nil
}

func (s *Server) getClusterStatus(*http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	online := 0
	for _, n := range s.nodes {
		if n.online {
			online++
		}
	}
	out := []map[string]any{{
		"type":    "cluster",
		"id":      "cluster",
		"name":    "lab",
		"nodes":   len(s.nodes),
		"quorate": boolInt(online*2 > len(s.nodes)),
		"version": len(s.nodes) + 2,
	}}
	for i, n := range s.nodes {
		out = append(out, map[string]any{
			"type":   "node",
			"id":     "node/" + n.name,
			"name":   n.name,
			"nodeid": i + 1,
			"online": boolInt(n.online),
			"local":  boolInt(i == 0),
			"ip":     fmt.Sprintf("192.0.2.%d", i+1),
			"level":  "",
		})
	}
	return out, nil
}

func (s *Server) storageResource(st *Storage, nodeName string) map[string]any {
	m := map[string]any{
		"id":         "storage/" + nodeName + "/" + st.Name,
		"type":       "storage",
		"storage":    st.Name,
		"node":       nodeName,
		"status":     "available",
		"content":    st.contentString(),
		"plugintype": st.Type,
		"shared":     boolInt(st.Shared),
		"maxdisk":    st.capacity(),
		"disk":       s.usedBytes(st, nodeName),
	}
	for name, p := range s.pools {
		for _, ps := range p.storages {
			if ps == st.Name {
				m["pool"] = name
			}
		}
	}
	return m
}

func (s *Server) listResources(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	typ := q.Get("type")
	switch typ {
	case "", "vm", "storage", "node", "sdn":
	default:
		return nil, paramErr("type", fmt.Sprintf("value '%s' does not have a value in the enumeration 'vm, storage, node, sdn'", typ))
	}
	s.lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	if typ == "" || typ == "vm" {
		s.broadcastStats()
		for _, id := range s.sortedVMIDs() {
			out = append(out, s.vmResource(s.vms[id]))
		}
	}
	if typ == "" || typ == "node" {
		for _, n := range s.nodes {
			out = append(out, s.nodeEntry(n))
		}
	}
	if typ == "" || typ == "storage" {
		for _, n := range s.nodes {
			for i := range s.storages {
				st := &s.storages[i]
				if st.onNode(n.name) {
					out = append(out, s.storageResource(st, n.name))
				}
			}
		}
	}
	if typ == "" {
		for _, name := range s.poolOrder {
			out = append(out, map[string]any{"id": "/pool/" + name, "type": "pool", "pool": name})
		}
	}
	return out, nil
}

func (s *Server) nextID(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	if v := q.Get("vmid"); v != "" {
		id, err := strconv.Atoi(v)
		if err != nil {
			return nil, paramErr("vmid", fmt.Sprintf("type check ('integer') failed - got '%s'", v))
		}
		if _, used := s.vms[id]; used {
			return nil, paramErr("vmid", fmt.Sprintf("VM %d already exists", id))
		}
		return strconv.Itoa(id), nil
	}
	for id := 100; ; id++ {
		if _, used := s.vms[id]; !used {
			return strconv.Itoa(id), nil
		}
	}
}

func (s *Server) permissions(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	all := map[string]any{}
	for _, p := range privileges {
		all[p] = 1
	}
	paths := []string{"/", "/access", "/mapping", "/nodes", "/pool", "/sdn", "/storage", "/vms"}
	for _, n := range s.nodes {
		paths = append(paths, "/nodes/"+n.name)
	}
	for _, st := range s.storages {
		paths = append(paths, "/storage/"+st.Name)
	}
	for _, name := range s.poolOrder {
		paths = append(paths, "/pool/"+name)
	}
	for _, id := range s.sortedVMIDs() {
		paths = append(paths, "/vms/"+strconv.Itoa(id))
	}
	out := map[string]any{}
	want := q.Get("path")
	for _, p := range paths {
		if want != "" && p != want {
			continue
		}
		out[p] = all
	}
	if want != "" && len(out) == 0 {
		out[want] = all
	}
	return out, nil
}

func (s *Server) getHAResource(r *http.Request) (any, error) {
	sid := r.PathValue("sid")
	if !strings.Contains(sid, ":") {
		sid = "vm:" + sid
	}
	return nil, errorf("no such resource '%s'", sid)
}
