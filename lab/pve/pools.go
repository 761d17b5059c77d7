package pve

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

type pool struct {
	name     string
	comment  string
	storages []string
}

var poolNameRE = regexp.MustCompile(`^[A-Za-z0-9.\-_]+$`)

func (s *Server) poolRoutes() {
	s.route("GET", "/pools", "pool.list", s.listPools)
	s.route("POST", "/pools", "pool.create", s.createPool)
	s.route("PUT", "/pools", "pool.update", s.updatePoolByParam)
	s.route("DELETE", "/pools", "pool.delete", s.deletePoolByParam)
	s.route("GET", "/pools/{pool}", "pool.get", s.getPool)
	s.route("PUT", "/pools/{pool}", "pool.update", s.updatePool)
	s.route("DELETE", "/pools/{pool}", "pool.delete", s.deletePool)
}

// poolMembers lists a pool's members in the shape of GET /pools/{pool}. The
// caller holds s.mu.
func (s *Server) poolMembers(p *pool, typ string) []map[string]any {
	out := []map[string]any{}
	if typ == "" || typ == "qemu" {
		s.broadcastStats()
		for _, id := range s.sortedVMIDs() {
			g := s.vms[id]
			if g.pool != p.name {
				continue
			}
			m := s.vmResource(g)
			delete(m, "pool")
			out = append(out, m)
		}
	}
	if typ == "" || typ == "storage" {
		for _, name := range p.storages {
			st := s.findStorage(name)
			if st == nil {
				continue
			}
			for _, n := range s.nodes {
				if !st.onNode(n.name) {
					continue
				}
				out = append(out, s.storageResource(st, n.name))
			}
		}
	}
	return out
}

func (s *Server) listPools(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	id := q.Get("poolid")
	if id != "" {
		if _, ok := s.pools[id]; !ok {
			return nil, errorf("pool '%s' does not exist", id)
		}
	}
	for _, name := range s.poolOrder {
		if id != "" && name != id {
			continue
		}
		// Pool.pm index: without poolid, only pools with Pool.Audit; with
		// poolid the check's answer is not used (check(..., 1) whose
		// result is ignored), so any caller gets the pool.
		if id == "" && s.check(caller(r), "/pool/"+name, "Pool.Audit") != nil {
			continue
		}
		p := s.pools[name]
		m := map[string]any{"poolid": p.name}
		if p.comment != "" {
			m["comment"] = p.comment
		}
		if id != "" {
			m["members"] = s.poolMembers(p, q.Get("type"))
		}
		out = append(out, m)
	}
	return out, nil
}

func (s *Server) createPool(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	name := q.Get("poolid")
	if name == "" {
		return nil, paramErr("poolid", "property is missing and it is not optional")
	}
	if !poolNameRE.MatchString(name) {
		return nil, paramErr("poolid", "invalid format - invalid pool ID '"+name+"'")
	}
	s.lock()
	defer s.mu.Unlock()
	if _, ok := s.pools[name]; ok {
		return nil, errorf("create pool failed: pool '%s' already exists", name)
	}
	s.pools[name] = &pool{name: name, comment: q.Get("comment")}
	s.poolOrder = append(s.poolOrder, name)
	slices.Sort(s.poolOrder)
	return nil, nil
}

func (s *Server) getPool(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	name := r.PathValue("pool")
	p, ok := s.pools[name]
	if !ok {
		return nil, errorf("pool '%s' does not exist", name)
	}
	m := map[string]any{"members": s.poolMembers(p, q.Get("type"))}
	if p.comment != "" {
		m["comment"] = p.comment
	}
	return m, nil
}

func (s *Server) updatePool(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	return nil, s.applyPoolUpdate(caller(r), r.PathValue("pool"), q)
}

func (s *Server) updatePoolByParam(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	if q.Get("poolid") == "" {
		return nil, paramErr("poolid", "property is missing and it is not optional")
	}
	return nil, s.applyPoolUpdate(caller(r), q.Get("poolid"), q)
}

func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}

func (s *Server) applyPoolUpdate(authid, name string, q url.Values) error {
	s.lock()
	defer s.mu.Unlock()
	p, ok := s.pools[name]
	if !ok {
		return errorf("update pools failed: pool '%s' does not exist", name)
	}
	remove := q.Get("delete") == "1"
	allowMove := q.Get("allow-move") == "1"

	var ids []int
	for _, v := range splitList(q.Get("vms")) {
		id, err := strconv.Atoi(v)
		if err != nil {
			return paramErr("vms", fmt.Sprintf("invalid format - value '%s' does not look like a valid VM ID", v))
		}
		ids = append(ids, id)
	}
	storages := splitList(q.Get("storage"))

	// Check everything first: Proxmox VE changes nothing when one member
	// is refused. Adding or removing a member needs check_perm_modify on
	// it, moving a VM from another pool Pool.Allocate there.
	for _, id := range ids {
		if err := s.checkPermModify(authid, "/vms/"+strconv.Itoa(id)); err != nil {
			return err
		}
		g, ok := s.vms[id]
		if ok && !remove && g.pool != "" && g.pool != name && allowMove {
			if err := s.check(authid, "/pool/"+g.pool, "Pool.Allocate"); err != nil {
				return err
			}
		}
		if !ok {
			if remove {
				continue
			}
			return errorf("update pools failed: no such VM '%d'", id)
		}
		if !remove && g.pool != "" && g.pool != name && !allowMove {
			return errorf("update pools failed: VM %d belongs already to pool '%s'", id, g.pool)
		}
	}
	for _, st := range storages {
		if err := s.checkPermModify(authid, "/storage/"+st); err != nil {
			return err
		}
		if s.findStorage(st) == nil {
			return errorf("update pools failed: no such storage '%s'", st)
		}
	}

	if _, ok := q["comment"]; ok {
		p.comment = q.Get("comment")
	}
	for _, id := range ids {
		g, ok := s.vms[id]
		if !ok {
			continue
		}
		switch {
		case remove && g.pool == name:
			g.pool = ""
		case !remove:
			g.pool = name
		}
	}
	for _, st := range storages {
		i := slices.Index(p.storages, st)
		switch {
		case remove && i >= 0:
			p.storages = slices.Delete(p.storages, i, i+1)
		case !remove && i < 0:
			p.storages = append(p.storages, st)
		}
	}
	return nil
}

func (s *Server) deletePool(r *http.Request) (any, error) {
	return nil, s.removePool(r.PathValue("pool"))
}

func (s *Server) deletePoolByParam(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	if q.Get("poolid") == "" {
		return nil, paramErr("poolid", "property is missing and it is not optional")
	}
	return nil, s.removePool(q.Get("poolid"))
}

func (s *Server) removePool(name string) error {
	s.lock()
	defer s.mu.Unlock()
	p, ok := s.pools[name]
	if !ok {
		return errorf("delete pool failed: pool '%s' does not exist", name)
	}
	for _, g := range s.vms {
		if g.pool == name {
			return errorf("delete pool failed: pool '%s' is not empty", name)
		}
	}
	if len(p.storages) > 0 {
		return errorf("delete pool failed: pool '%s' is not empty", name)
	}
	delete(s.pools, name)
	s.poolOrder = slices.DeleteFunc(s.poolOrder, func(n string) bool { return n == name })
	return nil
}
