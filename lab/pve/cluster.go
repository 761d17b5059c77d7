package pve

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const nodeMemory = 256 * gib

func (s *Server) routes() {
	s.route("GET", "/version", "version.get", s.getVersion)
	s.route("GET", "/nodes", "nodes.list", s.listNodes)
	s.route("GET", "/nodes/{node}/status", "node.status", s.getNodeStatus)
	s.route("GET", "/nodes/{node}/network", "node.network", s.listNetwork)
	s.route("GET", "/cluster/status", "cluster.status", s.getClusterStatus)
	s.route("GET", "/cluster/resources", "cluster.resources", s.listResources)
	s.route("GET", "/cluster/nextid", "cluster.nextid", s.nextID)
	s.route("GET", "/access/permissions", "access.permissions", s.getPermissions)
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

// auditedNodeEntry is a node's entry in /nodes and /cluster/resources:
// without Sys.Audit on /nodes/<node> its figures are left out
// (API2Tools::extract_node_stats with $exclude_stats). The caller holds
// s.mu.
func (s *Server) auditedNodeEntry(r *http.Request, n *node) map[string]any {
	m := s.nodeEntry(n)
	if s.check(caller(r), "/nodes/"+n.name, "Sys.Audit") != nil {
		for _, k := range []string{"uptime", "cpu", "mem", "disk", "maxcpu", "maxmem", "maxdisk"} {
			delete(m, k)
		}
	}
	return m
}

func (s *Server) listNodes(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, n := range s.nodes {
		out = append(out, s.auditedNodeEntry(r, n))
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
		// Network.pm index: a bridge is listed only to who may audit or
		// use it (check_sdn_bridge on the localnetwork zone).
		if !s.canUseBridge(caller(r), b, "SDN.Audit", "SDN.Use") {
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
	authid := caller(r)
	out := []map[string]any{}
	// Cluster.pm resources: a VM is listed with VM.Audit on /vms/<id>,
	// its pool only with Pool.Audit on the pool; a node always, its
	// figures with Sys.Audit; a storage with Datastore.Audit; a pool with
	// Pool.Audit.
	if typ == "" || typ == "vm" {
		s.broadcastStats()
		for _, id := range s.sortedVMIDs() {
			if s.check(authid, "/vms/"+strconv.Itoa(id), "VM.Audit") != nil {
				continue
			}
			m := s.vmResource(s.vms[id])
			if pool, ok := m["pool"].(string); ok && s.check(authid, "/pool/"+pool, "Pool.Audit") != nil {
				delete(m, "pool")
			}
			out = append(out, m)
		}
	}
	if typ == "" || typ == "node" {
		for _, n := range s.nodes {
			out = append(out, s.auditedNodeEntry(r, n))
		}
	}
	if typ == "" || typ == "storage" {
		for i := range s.storages {
			st := &s.storages[i]
			if s.check(authid, "/storage/"+st.Name, "Datastore.Audit") != nil {
				continue
			}
			for _, n := range s.nodes {
				if st.onNode(n.name) {
					out = append(out, s.storageResource(st, n.name))
				}
			}
		}
	}
	if typ == "" {
		for _, name := range s.poolOrder {
			if s.check(authid, "/pool/"+name, "Pool.Audit") != nil {
				continue
			}
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

func (s *Server) getHAResource(r *http.Request) (any, error) {
	sid := r.PathValue("sid")
	if !strings.Contains(sid, ":") {
		sid = "vm:" + sid
	}
	return nil, errorf("no such resource '%s'", sid)
}
