package pve

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Access control, as Proxmox VE 9 computes it (pve-access-control
// src/PVE/AccessControl.pm roles, create_roles; src/PVE/RPCEnvironment.pm
// permissions, compile_acl_path, get_effective_permissions, check,
// check_any, check_vm_perm, check_perm_modify, check_sdn_bridge).

// privGroup is one category of AccessControl.pm's $privgroups: the
// predefined roles are built from it.
type privGroup struct {
	cat                      string
	root, admin, user, audit []string
}

// privGroups is AccessControl.pm's $privgroups (pve-access-control 9.1).
var privGroups = []privGroup{
	{cat: "VM",
		admin: []string{"VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.HWType",
			"VM.Config.Options", "VM.Allocate", "VM.Clone", "VM.GuestAgent.Unrestricted", "VM.Migrate", "VM.Replicate",
			"VM.Snapshot", "VM.Snapshot.Rollback"},
		user: []string{"VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup", "VM.GuestAgent.FileRead",
			"VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite", "VM.PowerMgmt"},
		audit: []string{"VM.Audit", "VM.GuestAgent.Audit"}},
	{cat: "Sys",
		root:  []string{"Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork"},
		admin: []string{"Sys.Console", "Sys.Syslog"},
		audit: []string{"Sys.Audit"}},
	{cat: "Datastore",
		admin: []string{"Datastore.Allocate", "Datastore.AllocateTemplate"},
		user:  []string{"Datastore.AllocateSpace"},
		audit: []string{"Datastore.Audit"}},
	{cat: "SDN",
		admin: []string{"SDN.Allocate", "SDN.Audit"},
		user:  []string{"SDN.Use"},
		audit: []string{"SDN.Audit"}},
	{cat: "User",
		root:  []string{"Realm.Allocate"},
		admin: []string{"User.Modify", "Group.Allocate", "Realm.AllocateUser"}},
	{cat: "Pool",
		admin: []string{"Pool.Allocate"},
		user:  []string{"Pool.Audit"},
		audit: []string{"Pool.Audit"}},
	{cat: "Mapping",
		admin: []string{"Mapping.Modify"},
		user:  []string{"Mapping.Use"},
		audit: []string{"Mapping.Audit"}},
}

// validPrivs are the privileges Proxmox VE 9 knows: every privilege of
// privGroups and Permissions.Modify. Administrator holds all of them.
var validPrivs = func() map[string]bool {
	m := map[string]bool{"Permissions.Modify": true}
	for _, g := range privGroups {
		for _, list := range [][]string{g.root, g.admin, g.user, g.audit} {
			for _, p := range list {
				m[p] = true
			}
		}
	}
	return m
}()

// builtinRoles are the predefined roles of create_roles: Administrator,
// NoAccess, PVEAdmin, PVE<cat>Admin, PVE<cat>User (for categories with user
// privileges), PVEAuditor and PVETemplateUser.
var builtinRoles = func() map[string]map[string]bool {
	roles := map[string]map[string]bool{
		"NoAccess":        {},
		"Administrator":   maps.Clone(validPrivs),
		"PVEAdmin":        {},
		"PVEAuditor":      {},
		"PVETemplateUser": {"VM.Clone": true, "VM.Audit": true},
	}
	add := func(role string, lists ...[]string) {
		if roles[role] == nil {
			roles[role] = map[string]bool{}
		}
		for _, l := range lists {
			for _, p := range l {
				roles[role][p] = true
			}
		}
	}
	for _, g := range privGroups {
		add("PVE"+g.cat+"Admin", g.admin, g.user, g.audit)
		add("PVEAdmin", g.admin, g.user, g.audit)
		if len(g.user) > 0 {
			add("PVE"+g.cat+"User", g.user, g.audit)
		}
		add("PVEAuditor", g.audit)
	}
	delete(roles["PVEAdmin"], "Mapping.Modify")
	return roles
}()

// Token is an API token the emulator accepts.
type Token struct {
	// ID is user@realm!name; the user exists as the token's owner.
	ID string
	// Secret is the token's secret (a lab value, never logged).
	Secret string
	// Privsep is privilege separation: the token has the privileges of
	// its own ACL entries, intersected with its user's. Without it the
	// token has exactly its user's privileges.
	Privsep bool
}

// ACL is one entry of the access control list (an "acl:" line of
// user.cfg): roles granted on a path to a user, a group or a token.
type ACL struct {
	// Path is the ACL path, e.g. "/", "/vms/100", "/storage/local",
	// "/pool/taloscluster-demo", "/sdn/zones/localnetwork/vmbr0".
	Path string
	// Exactly one of User (user@realm), Group (a group name) and Token
	// (user@realm!name) is set.
	User, Group, Token string
	// Roles are predefined roles (PVEAdmin, PVEAuditor, PVEVMUser, ...)
	// or ones of Options.Roles.
	Roles []string
	// Propagate makes the roles apply below Path too.
	Propagate bool
}

// Lab tokens.
const (
	// RestrictedTokenID is the lab's restricted API token: a
	// privilege-separated token of the user taloslab@pve (see
	// RestrictedToken and RestrictedACLs).
	RestrictedTokenID = "taloslab@pve!restricted"
	// RestrictedTokenSecret is its secret, a lab value, not a credential.
	RestrictedTokenSecret = "c0ffee00-0000-4000-8000-0000000beef0"
)

// RestrictedToken is the lab's restricted token, privilege-separated.
func RestrictedToken() Token {
	return Token{ID: RestrictedTokenID, Secret: RestrictedTokenSecret, Privsep: true}
}

// RestrictedACLs are the ACL entries of the restricted token and of its
// user: the user taloslab@pve holds PVEAdmin on / (propagated); the token
// holds PVEAuditor on / and PVEVMUser on /vms (both propagated). The
// token's privileges are the intersection: it reads everything a plan
// reads (Sys.Audit, Datastore.Audit, Pool.Audit, SDN.Audit, VM.Audit,
// VM.GuestAgent.Audit, Mapping.Audit on every path) and on /vms and below
// also holds PVEVMUser's VM.PowerMgmt, VM.Console, VM.Backup,
// VM.Config.CDROM, VM.Config.Cloudinit and the VM.GuestAgent file
// privileges; it lacks every allocation and configuration privilege
// (VM.Allocate, VM.Config.Disk/CPU/Memory/Network/HWType/Options,
// Datastore.Allocate/AllocateSpace/AllocateTemplate, Pool.Allocate,
// SDN.Use, Sys.Modify, ...) on every path.
func RestrictedACLs() []ACL {
	return []ACL{
		{Path: "/", User: "taloslab@pve", Roles: []string{"PVEAdmin"}, Propagate: true},
		{Path: "/", Token: RestrictedTokenID, Roles: []string{"PVEAuditor"}, Propagate: true},
		{Path: "/vms", Token: RestrictedTokenID, Roles: []string{"PVEVMUser"}, Propagate: true},
	}
}

// The lab's read-only token.
const (
	// AuditorTokenID is the lab's read-only API token: a
	// privilege-separated token of the user taloslab@pve holding only
	// PVEAuditor on / (see AuditorACLs).
	AuditorTokenID = "taloslab@pve!auditor"
	// AuditorTokenSecret is its secret, a lab value, not a credential.
	AuditorTokenSecret = "c0ffee00-0000-4000-8000-00000000a0d1"
)

// AuditorToken is the lab's read-only token, privilege-separated.
func AuditorToken() Token {
	return Token{ID: AuditorTokenID, Secret: AuditorTokenSecret, Privsep: true}
}

// AuditorACLs are the ACL entries of the read-only token: PVEAuditor on /
// (propagated), intersected with its user's PVEAdmin (RestrictedACLs). It
// reads everything a plan reads and changes nothing: no VM.PowerMgmt
// either, unlike the restricted token.
func AuditorACLs() []ACL {
	return []ACL{{Path: "/", Token: AuditorTokenID, Roles: []string{"PVEAuditor"}, Propagate: true}}
}

// aclNode is a node of user.cfg's ACL tree: role -> propagate, by user,
// group and token.
type aclNode struct {
	children              map[string]*aclNode
	users, groups, tokens map[string]map[string]bool
}

func newACLNode() *aclNode {
	return &aclNode{children: map[string]*aclNode{}, users: map[string]map[string]bool{},
		groups: map[string]map[string]bool{}, tokens: map[string]map[string]bool{}}
}

// access is the emulator's user.cfg: roles, groups, tokens and the ACL
// tree.
type access struct {
	roles  map[string]map[string]bool
	groups map[string]map[string]bool // group -> member users
	tokens map[string]Token
	root   *aclNode
}

var (
	realmRE    = `[A-Za-z][A-Za-z0-9\.\-_]+`
	userRE     = `[^\s:/]+`
	usernameRE = regexp.MustCompile(`^(` + userRE + `)@(` + realmRE + `)$`)
	tokenRE    = regexp.MustCompile(`^((` + userRE + `)@(` + realmRE + `))!(` + realmRE + `)$`)
	useridRE   = regexp.MustCompile(`^` + userRE + `@` + realmRE + `(?:!` + realmRE + `)?$`)
)

// splitToken is split_tokenid: the user and token name of a token ID, ok
// false for anything else.
func splitToken(id string) (user, name string, ok bool) {
	m := tokenRE.FindStringSubmatch(id)
	if m == nil {
		return "", "", false
	}
	return m[1], m[4], true
}

// newAccess builds the access configuration. primary is the token of
// Options.TokenID: not privilege-separated, and its user, unless
// root@pam (who holds every privilege without an ACL), holds
// Administrator on /.
func newAccess(o Options, primary Token) *access {
	a := &access{roles: map[string]map[string]bool{}, groups: map[string]map[string]bool{}, tokens: map[string]Token{}, root: newACLNode()}
	for name, privs := range builtinRoles {
		a.roles[name] = maps.Clone(privs)
	}
	for name, privs := range o.Roles {
		if _, ok := builtinRoles[name]; ok {
			panic(fmt.Sprintf("pve: role %s is predefined", name))
		}
		m := map[string]bool{}
		for _, p := range privs {
			if !validPrivs[p] {
				panic(fmt.Sprintf("pve: role %s: invalid privilege '%s'", name, p))
			}
			m[p] = true
		}
		a.roles[name] = m
	}
	for g, members := range o.Groups {
		a.groups[g] = map[string]bool{}
		for _, u := range members {
			a.groups[g][u] = true
		}
	}
	for _, t := range append([]Token{primary}, o.Tokens...) {
		if _, _, ok := splitToken(t.ID); !ok {
			panic(fmt.Sprintf("pve: '%s' is not a valid token ID", t.ID))
		}
		a.tokens[t.ID] = t
	}
	acls := o.ACLs
	if user, _, _ := splitToken(primary.ID); user != "root@pam" {
		acls = append([]ACL{{Path: "/", User: user, Roles: []string{"Administrator"}, Propagate: true}}, acls...)
	}
	for _, e := range acls {
		a.addACL(e)
	}
	return a
}

// addACL adds an ACL entry, as user.cfg's acl lines add to the tree.
func (a *access) addACL(e ACL) {
	for _, r := range e.Roles {
		if a.roles[r] == nil {
			panic(fmt.Sprintf("pve: ACL on %s: role '%s' does not exist", e.Path, r))
		}
	}
	n := a.node(e.Path, true)
	var m map[string]map[string]bool
	var who string
	switch {
	case e.User != "":
		m, who = n.users, e.User
	case e.Group != "":
		m, who = n.groups, e.Group
	case e.Token != "":
		m, who = n.tokens, e.Token
	default:
		panic(fmt.Sprintf("pve: ACL on %s names no user, group or token", e.Path))
	}
	if m[who] == nil {
		m[who] = map[string]bool{}
	}
	for _, r := range e.Roles {
		m[who][r] = e.Propagate
	}
}

// node finds the tree node of a path (find_acl_tree_node), creating it
// and its parents when create is set; nil when it does not exist.
func (a *access) node(path string, create bool) *aclNode {
	n := a.root
	for _, p := range strings.Split(path, "/") {
		if p == "" {
			continue
		}
		c := n.children[p]
		if c == nil {
			if !create {
				return nil
			}
			c = newACLNode()
			n.children[p] = c
		}
		n = c
	}
	return n
}

// removeVMACLs drops the ACL entries of a destroyed VM
// (AccessControl.pm remove_vm_access).
func (a *access) removeVMACLs(vmid int) {
	if vms := a.root.children["vms"]; vms != nil {
		delete(vms.children, fmt.Sprint(vmid))
	}
}

// perlSplit splits a path the way Perl's split("/", $path) does: trailing
// empty fields are dropped, and "/" gives a single empty field (roles'
// special case).
func perlSplit(path string) []string {
	if path == "/" {
		return []string{""}
	}
	parts := strings.Split(path, "/")
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// rolesOf is AccessControl.pm's roles: the roles (with their propagation
// flag) a user or token has on a path from the ACL tree alone, walking
// from / down: at each node, the token's entries, else the user's, else
// its groups' replace what was inherited, taking the propagating roles
// (and at the path itself every role). NoAccess wins. Pools are not
// considered here.
func (a *access) rolesOf(authid, path string) map[string]bool {
	if user, _, ok := splitToken(authid); ok {
		t, exists := a.tokens[authid]
		if !exists {
			return map[string]bool{}
		}
		if !t.Privsep {
			return a.rolesOf(user, path)
		}
	}
	roles := map[string]bool{}
	split := perlSplit(path)
	n := a.root
	for i, p := range split {
		final := i == len(split)-1
		if p != "" && n != nil {
			n = n.children[p]
		}
		if n == nil {
			continue
		}
		pick := func(ri map[string]bool, into map[string]bool) map[string]bool {
			for role, prop := range ri {
				if final || prop {
					if into == nil {
						into = map[string]bool{}
					}
					into[role] = prop
				}
			}
			return into
		}
		if ri, ok := n.tokens[authid]; ok {
			if nw := pick(ri, nil); nw != nil {
				roles = nw
				continue
			}
		}
		if ri, ok := n.users[authid]; ok {
			if nw := pick(ri, nil); nw != nil {
				roles = nw
				continue
			}
		}
		var nw map[string]bool
		for _, g := range slices.Sorted(maps.Keys(n.groups)) {
			if !a.groups[g][authid] {
				continue
			}
			nw = pick(n.groups[g], nw)
		}
		if nw != nil {
			roles = nw
		}
	}
	if prop, ok := roles["NoAccess"]; ok {
		return map[string]bool{"NoAccess": prop}
	}
	return roles
}

// permissions is RPCEnvironment.pm's permissions: the privileges a user
// or token holds on a path, each with its propagation flag. root@pam holds
// every privilege; a token without privilege separation holds its user's;
// a privilege-separated token holds what both it and its user hold, the
// flag set only when both flags are. The caller holds s.mu (pools).
func (s *Server) permissions(authid, path string) map[string]bool {
	if authid == "root@pam" {
		// Administrator is a built-in role, which no call changes: its
		// privileges are made once and shared (the result is read-only).
		s.rootOnce.Do(func() {
			s.rootPrivs = map[string]bool{}
			for p := range s.access.roles["Administrator"] {
				s.rootPrivs[p] = true
			}
		})
		return s.rootPrivs
	}
	if path == "" {
		return map[string]bool{}
	}
	user, _, isToken := splitToken(authid)
	if isToken {
		t, ok := s.access.tokens[authid]
		if !ok {
			return map[string]bool{}
		}
		userPerms := s.permissions(user, path)
		if !t.Privsep {
			return userPerms
		}
	} else if !usernameRE.MatchString(authid) || len(authid) < 3 || len(authid) > 64 {
		return map[string]bool{}
	}
	return s.compileACLPath(authid, path)
}

// compileACLPath is RPCEnvironment.pm's compile_acl_path: the roles from
// the ACL tree, plus the roles the user or token has on a pool for the
// pool's members (never propagated, and never over NoAccess), turned into
// privileges, and for a privilege-separated token intersected with its
// user's. The caller holds s.mu.
func (s *Server) compileACLPath(authid, path string) map[string]bool {
	// Only the pools that hold path give it roles: they are looked up
	// from path, not by listing every pool's members, so a check costs
	// the same with a thousand pools.
	poolRoles := map[string]map[string]bool{}
	for _, name := range s.poolsHolding(path) {
		pr := s.access.rolesOf(authid, "/pool/"+name)
		if len(pr) == 0 {
			continue
		}
		if poolRoles[path] == nil {
			poolRoles[path] = map[string]bool{}
		}
		for role := range pr {
			poolRoles[path][role] = true
		}
	}
	roles := s.access.rolesOf(authid, path)
	if pr := poolRoles[path]; pr != nil {
		if _, denied := roles["NoAccess"]; !denied {
			if pr["NoAccess"] {
				roles = map[string]bool{"NoAccess": false}
			} else {
				for role := range pr {
					if _, set := roles[role]; !set {
						roles[role] = false
					}
				}
			}
		}
	}
	privs := map[string]bool{}
	for role, prop := range roles {
		for p := range s.access.roles[role] {
			privs[p] = privs[p] || prop
		}
	}
	if user, _, ok := splitToken(authid); ok && user != "root@pam" {
		userPrivs := s.permissions(user, path)
		for p, prop := range privs {
			up, ok := userPrivs[p]
			if !ok {
				delete(privs, p)
				continue
			}
			privs[p] = up && prop
		}
	}
	return privs
}

// poolsHolding returns the pools that have path as a member: the pool of
// the VM /vms/<id>, or the pools of the storage /storage/<name>. The
// caller holds s.mu.
func (s *Server) poolsHolding(path string) []string {
	if id, ok := strings.CutPrefix(path, "/vms/"); ok {
		n, err := strconv.Atoi(id)
		if err != nil || strconv.Itoa(n) != id {
			return nil
		}
		if g, found := s.vms[n]; found && g.pool != "" && slices.Contains(s.poolOrder, g.pool) {
			return []string{g.pool}
		}
		return nil
	}
	st, ok := strings.CutPrefix(path, "/storage/")
	if !ok {
		return nil
	}
	var out []string
	for _, name := range s.poolOrder {
		if slices.Contains(s.pools[name].storages, st) {
			out = append(out, name)
		}
	}
	return out
}

// effectivePermissions is RPCEnvironment.pm's get_effective_permissions:
// the privileges on the top-level paths, on every path of the ACL tree
// (whoever the entries are for) and on every pool member, leaving out the
// paths where nothing is held. The caller holds s.mu.
func (s *Server) effectivePermissions(authid string) map[string]map[string]bool {
	paths := map[string]bool{"/": true, "/access": true, "/access/groups": true, "/nodes": true,
		"/pool": true, "/sdn": true, "/storage": true, "/vms": true}
	var walk func(path string, n *aclNode)
	walk = func(path string, n *aclNode) {
		paths[path] = true
		if path == "/" {
			path = ""
		}
		for _, c := range slices.Sorted(maps.Keys(n.children)) {
			walk(path+"/"+c, n.children[c])
		}
	}
	walk("/", s.access.root)
	for _, g := range s.vms {
		if g.pool != "" {
			paths[fmt.Sprintf("/vms/%d", g.id)] = true
		}
	}
	for _, p := range s.pools {
		for _, st := range p.storages {
			paths["/storage/"+st] = true
		}
	}
	out := map[string]map[string]bool{}
	for p := range paths {
		if perms := s.permissions(authid, p); len(perms) > 0 {
			out[p] = perms
		}
	}
	return out
}

// permError is raise_perm_exc: 403 "Permission check failed (<what>)", or
// without what just "Permission check failed".
func permError(what string) *apiError {
	msg := "Permission check failed"
	if what != "" {
		msg += " (" + what + ")"
	}
	return &apiError{status: 403, msg: msg}
}

// check is RPCEnvironment.pm's check: every privilege must be held on the
// path; the first one missing is named. The caller holds s.mu.
func (s *Server) check(authid, path string, privs ...string) error {
	perm := s.permissions(authid, path)
	for _, p := range privs {
		if !validPrivs[p] {
			return errorf("invalid privilege '%s'", p)
		}
		if _, ok := perm[p]; !ok {
			return permError(path + ", " + p)
		}
	}
	return nil
}

// checkAny is check_any: one of the privileges is enough; the error names
// them all, joined by '|'. The caller holds s.mu.
func (s *Server) checkAny(authid, path string, privs ...string) error {
	perm := s.permissions(authid, path)
	for _, p := range privs {
		if _, ok := perm[p]; ok {
			return nil
		}
	}
	return permError(path + ", " + strings.Join(privs, "|"))
}

func (s *Server) checkFull(authid, path string, anyOf bool, privs ...string) error {
	if anyOf {
		return s.checkAny(authid, path, privs...)
	}
	return s.check(authid, path, privs...)
}

// checkVMPerm is check_vm_perm: the privileges on the pool (when given)
// are enough, else they are checked on /vms/<vmid>. The caller holds s.mu.
func (s *Server) checkVMPerm(authid string, vmid int, pool string, anyOf bool, privs ...string) error {
	if pool != "" && s.checkFull(authid, "/pool/"+pool, anyOf, privs...) == nil {
		return nil
	}
	return s.checkFull(authid, fmt.Sprintf("/vms/%d", vmid), anyOf, privs...)
}

// checkPermModify is check_perm_modify for a member added to or removed
// from a pool. The caller holds s.mu.
func (s *Server) checkPermModify(authid, path string) error {
	privs := []string{"Permissions.Modify"}
	switch {
	case strings.HasPrefix(path, "/storage/"):
		privs = append(privs, "Datastore.Allocate")
	case strings.HasPrefix(path, "/vms/"):
		privs = append(privs, "VM.Allocate")
	case strings.HasPrefix(path, "/pool/"):
		privs = append(privs, "Pool.Allocate")
	}
	return s.checkAny(authid, path, privs...)
}

// canUseBridge is check_sdn_bridge for the local network zone: any of the
// privileges on /sdn/zones/localnetwork/<bridge>, or on one of its VLANs
// that has an ACL entry. The caller holds s.mu.
func (s *Server) canUseBridge(authid, bridge string, privs ...string) bool {
	path := "/sdn/zones/localnetwork/" + bridge
	if s.checkAny(authid, path, privs...) == nil {
		return true
	}
	if n := s.access.node(path, false); n != nil {
		for vlan := range n.children {
			if s.checkAny(authid, path+"/"+vlan, privs...) == nil {
				return true
			}
		}
	}
	return false
}

// checkVolumeAccess is pve-storage's check_volume_access for a volume of
// a VM (vmid 0 for none). The caller holds s.mu.
func (s *Server) checkVolumeAccess(authid, volid, content string, owner, vmid int) error {
	sid, _, _ := strings.Cut(volid, ":")
	if s.check(authid, "/storage/"+sid, "Datastore.Allocate") == nil {
		return nil
	}
	switch {
	case content == "iso" || content == "vztmpl" || content == "import":
		return s.checkAny(authid, "/storage/"+sid, "Datastore.AllocateSpace", "Datastore.Audit")
	case owner != 0 && vmid != 0 && owner == vmid:
		return nil
	case content == "backup" && owner != 0:
		if err := s.check(authid, "/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
			return err
		}
		return s.check(authid, fmt.Sprintf("/vms/%d", owner), "VM.Backup")
	case (content == "images" || content == "rootdir") && owner != 0:
		if err := s.check(authid, "/storage/"+sid, "Datastore.Audit"); err != nil {
			return err
		}
		return s.check(authid, fmt.Sprintf("/vms/%d", owner), "VM.Config.Disk")
	}
	return errorf("missing privileges to access %s", volid)
}
