package pve

import (
	"net/http"
	"regexp"
	"strings"
)

// permCheck is an API method's `permissions => {check => ...}` (PVE
// RESTHandler schema), evaluated as RPCEnvironment.pm's
// exec_api2_perm_check: "perm" checks privileges on a path template, "and"
// needs every sub-check, "or" one of them (its failure names nothing:
// "Permission check failed").
type permCheck struct {
	kind  string // "perm", "and", "or"
	path  string // template with {node}, {vmid}, {storage}, {poolid}
	privs []string
	any   bool
	subs  []permCheck
}

func perm(path string, privs ...string) permCheck {
	return permCheck{kind: "perm", path: path, privs: privs}
}

func permAny(path string, privs ...string) permCheck {
	return permCheck{kind: "perm", path: path, privs: privs, any: true}
}

// vmConfigPrivs is qemu-server's $vm_config_perm_list, the schema check of
// both config updates (any of them).
var vmConfigPrivs = []string{"VM.Config.Disk", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Memory",
	"VM.Config.Network", "VM.Config.HWType", "VM.Config.Options", "VM.Config.Cloudinit"}

// apiChecks are the schema permission checks of the methods the emulator
// serves, by operation name. A method missing here is `user => 'all'`
// (anyone authenticated; its code filters or checks inside). Sources:
// pve-manager PVE/API2/Nodes.pm (status), PVE/API2/Cluster.pm (status),
// PVE/API2/Pool.pm, pve-ha-manager PVE/API2/HA/Resources.pm, pve-storage
// PVE/API2/Storage/{Config,Status,Content}.pm, qemu-server
// PVE/API2/Qemu.pm and PVE/API2/Qemu/Agent.pm, pve-firewall
// PVE/API2/Firewall/{VM,Rules,Cluster}.pm with PVE/Firewall.pm
// rules_audit_permissions and rules_modify_permissions.
var apiChecks = map[string]permCheck{
	"node.status":          perm("/nodes/{node}", "Sys.Audit"),
	"cluster.status":       perm("/", "Sys.Audit"),
	"ha.resources.list":    perm("/", "Sys.Audit"),
	"ha.resources.get":     perm("/", "Sys.Audit"),
	"storage.config.get":   perm("/storage/{storage}", "Datastore.Allocate"),
	"storage.get":          permAny("/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace"),
	"storage.status":       permAny("/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace"),
	"storage.content.list": permAny("/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace"),
	"storage.upload":       perm("/storage/{storage}", "Datastore.AllocateTemplate"),
	"storage.download": {kind: "and", subs: []permCheck{
		perm("/storage/{storage}", "Datastore.AllocateTemplate"),
		{kind: "or", subs: []permCheck{perm("/", "Sys.Audit", "Sys.Modify"), perm("/nodes/{node}", "Sys.AccessNetwork")}},
	}},
	"pool.create":                  perm("/pool/{poolid}", "Pool.Allocate"),
	"pool.get":                     perm("/pool/{poolid}", "Pool.Audit"),
	"pool.update":                  perm("/pool/{poolid}", "Pool.Allocate"),
	"pool.delete":                  perm("/pool/{poolid}", "Pool.Allocate"),
	"qemu.delete":                  perm("/vms/{vmid}", "VM.Allocate"),
	"qemu.config.get":              perm("/vms/{vmid}", "VM.Audit"),
	"qemu.config.update":           permAny("/vms/{vmid}", vmConfigPrivs...),
	"qemu.config.set":              permAny("/vms/{vmid}", vmConfigPrivs...),
	"qemu.pending":                 perm("/vms/{vmid}", "VM.Audit"),
	"qemu.resize":                  perm("/vms/{vmid}", "VM.Config.Disk"),
	"qemu.status":                  perm("/vms/{vmid}", "VM.Audit"),
	"qemu.start":                   perm("/vms/{vmid}", "VM.PowerMgmt"),
	"qemu.stop":                    perm("/vms/{vmid}", "VM.PowerMgmt"),
	"qemu.shutdown":                perm("/vms/{vmid}", "VM.PowerMgmt"),
	"qemu.reboot":                  perm("/vms/{vmid}", "VM.PowerMgmt"),
	"qemu.reset":                   perm("/vms/{vmid}", "VM.PowerMgmt"),
	"qemu.agent.interfaces":        permAny("/vms/{vmid}", "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"),
	"qemu.agent.ping":              permAny("/vms/{vmid}", "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"),
	"firewall.options.get":         perm("/vms/{vmid}", "VM.Audit"),
	"firewall.options.set":         perm("/vms/{vmid}", "VM.Config.Network"),
	"firewall.rules.list":          perm("/vms/{vmid}", "VM.Audit"),
	"firewall.rules.get":           perm("/vms/{vmid}", "VM.Audit"),
	"firewall.rules.create":        perm("/vms/{vmid}", "VM.Config.Network"),
	"firewall.rules.update":        perm("/vms/{vmid}", "VM.Config.Network"),
	"firewall.rules.delete":        perm("/vms/{vmid}", "VM.Config.Network"),
	"cluster.firewall.options.get": perm("/", "Sys.Audit"),
	"cluster.firewall.options.set": perm("/", "Sys.Modify"),
}

// checkAPIPermissions makes an operation's schema check before its code
// runs, as pve-manager's PVE::HTTPServer rest_handler does
// (check_api2_permissions, before proxying to the node and before the
// parameters are verified). Template parameters come from the path and
// then from the query or form, as the handler merges them.
func (s *Server) checkAPIPermissions(r *http.Request, op string) error {
	c, ok := apiChecks[op]
	if !ok {
		return nil
	}
	authid := caller(r)
	param := func(name string) string {
		if name == "poolid" {
			if v := r.PathValue("pool"); v != "" {
				return v
			}
		}
		if v := r.PathValue(name); v != "" {
			return v
		}
		_ = r.ParseForm() // multipart bodies are left alone
		return r.Form.Get(name)
	}
	s.lock()
	defer s.mu.Unlock()
	_, err := s.execCheck(c, authid, param, false)
	return err
}

var templateRE = regexp.MustCompile(`\{([^}]+)\}`)

// execCheck is exec_api2_perm_check; with noerr a failed check is (false,
// nil). The caller holds s.mu.
func (s *Server) execCheck(c permCheck, authid string, param func(string) string, noerr bool) (bool, error) {
	switch c.kind {
	case "and":
		for _, sub := range c.subs {
			if _, err := s.execCheck(sub, authid, param, false); err != nil {
				return false, err
			}
		}
		return true, nil
	case "or":
		for _, sub := range c.subs {
			if ok, _ := s.execCheck(sub, authid, param, true); ok {
				return true, nil
			}
		}
		if noerr {
			return false, nil
		}
		return false, permError("")
	}
	// PVE::Tools::template_replace: a missing or empty parameter is '-'.
	path := templateRE.ReplaceAllStringFunc(c.path, func(m string) string {
		if v := param(m[1 : len(m)-1]); v != "" && v != "0" {
			return v
		}
		return "-"
	})
	path = normalizePath(path)
	err := s.checkFull(authid, path, c.any, c.privs...)
	if err != nil && noerr {
		return false, nil
	}
	return err == nil, err
}

var aclPathChars = regexp.MustCompile(`^[[:alnum:]\.\-_/]+$`)

// normalizePath is AccessControl.pm's normalize_path; "" for a path it
// rejects.
func normalizePath(p string) string {
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		p = "/"
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if !aclPathChars.MatchString(p) {
		return ""
	}
	return p
}

// getPermissions is pve-access-control's GET /access/permissions
// (PVE/API2/AccessControl.pm `permissions`): the caller's own
// privileges, or those of a token it owns, or with Sys.Audit on /access
// anyone's; with path, {path: privileges on it} (the path is taken as
// given, and is answered even when nothing is held there); without,
// get_effective_permissions. Each privilege maps to its propagation flag,
// 1 or 0.
func (s *Server) getPermissions(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	authid := caller(r)
	userid := q.Get("userid")
	if userid != "" && !useridRE.MatchString(userid) {
		return nil, paramErr("userid", "value does not match the regex pattern")
	}
	if userid == "" {
		userid = authid
	}
	s.lock()
	defer s.mu.Unlock()
	user, _, _ := splitToken(userid)
	if userid != authid && (user == "" || user != authid) {
		if err := s.check(authid, "/access", "Sys.Audit"); err != nil {
			return nil, err
		}
	}
	flags := func(m map[string]bool) map[string]int {
		out := make(map[string]int, len(m))
		for p, prop := range m {
			out[p] = boolInt(prop)
		}
		return out
	}
	out := map[string]map[string]int{}
	if path := q.Get("path"); path != "" {
		out[path] = flags(s.permissions(userid, path))
		return out, nil
	}
	for p, m := range s.effectivePermissions(userid) {
		out[p] = flags(m)
	}
	return out, nil
}
