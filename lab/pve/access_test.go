package pve_test

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/lab/pve"
)

// restrictedLab is a lab with the restricted token beside the default one,
// a pool and a VM 100 in it, and a stopped VM 101 outside any pool.
func restrictedLab(t *testing.T) *lab {
	t.Helper()
	l := newLab(t, pve.Options{Tokens: []pve.Token{pve.RestrictedToken()}, ACLs: pve.RestrictedACLs()})
	if code, body := l.call(t, http.MethodPost, "/pools", url.Values{"poolid": {"taloscluster-demo"}}); code != http.StatusOK {
		t.Fatalf("creating the pool: %d %v", code, body)
	}
	for _, vm := range []url.Values{
		{"vmid": {"100"}, "name": {"demo-worker-01"}, "pool": {"taloscluster-demo"}, "scsi0": {"local-lvm:1"},
			"ide2": {"none,media=cdrom"}, "net0": {"virtio,bridge=vmbr0"}, "agent": {"1"}},
		{"vmid": {"101"}, "name": {"other"}},
	} {
		code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu", vm)
		if code != http.StatusOK {
			t.Fatalf("creating VM %s: %d %v", vm.Get("vmid"), code, body)
		}
		if st := l.waitTask(t, "pve1", body["data"].(string)); st != "OK" {
			t.Fatalf("creating VM %s: %s", vm.Get("vmid"), st)
		}
	}
	return l
}

// asRestricted calls the API with the restricted token.
func (l *lab) asRestricted(t *testing.T, method, path string, params url.Values) (int, map[string]any) {
	t.Helper()
	return l.callAuth(t, method, path, params, "PVEAPIToken="+pve.RestrictedTokenID+"="+pve.RestrictedTokenSecret)
}

// TestRestrictedTokenIsRefusedAsProxmoxRefuses: every call the restricted
// token lacks the privilege for answers 403 "Permission check failed
// (<path>, <privilege>)" and changes nothing; what it holds works.
func TestRestrictedTokenIsRefusedAsProxmoxRefuses(t *testing.T) {
	t.Parallel()
	l := restrictedLab(t)
	for _, tc := range []struct {
		method, path string
		params       url.Values
		want         string
	}{
		{http.MethodDelete, "/nodes/pve1/qemu/100", nil, "(/vms/100, VM.Allocate)"},
		// create_vm's VM.Allocate check names nothing (raise_perm_exc()).
		{http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"102"}, "name": {"x"}}, ""},
		{http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {"102"}, "pool": {"nope"}}, "(pool 'nope' does not exist)"},
		{http.MethodPost, "/nodes/pve1/qemu/100/config", url.Values{"cores": {"2"}}, "(/vms/100, VM.Config.CPU)"},
		{http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"memory": {"2048"}}, "(/vms/100, VM.Config.Memory)"},
		{http.MethodPut, "/nodes/pve1/qemu/100/config", url.Values{"net0": {"virtio,bridge=vmbr1"}}, "(/vms/100, VM.Config.Network)"},
		{http.MethodPut, "/nodes/pve1/qemu/100/resize", url.Values{"disk": {"scsi0"}, "size": {"+1G"}}, "(/vms/100, VM.Config.Disk)"},
		{http.MethodPut, "/nodes/pve1/qemu/100/firewall/options", url.Values{"enable": {"1"}}, "(/vms/100, VM.Config.Network)"},
		{http.MethodPost, "/nodes/pve1/qemu/100/firewall/rules", url.Values{"type": {"in"}, "action": {"ACCEPT"}}, "(/vms/100, VM.Config.Network)"},
		{http.MethodPut, "/cluster/firewall/options", url.Values{"enable": {"1"}}, "(/, Sys.Modify)"},
		{http.MethodPost, "/pools", url.Values{"poolid": {"another"}}, "(/pool/another, Pool.Allocate)"},
		{http.MethodDelete, "/pools/taloscluster-demo", nil, "(/pool/taloscluster-demo, Pool.Allocate)"},
		{http.MethodDelete, "/pools", url.Values{"poolid": {"taloscluster-demo"}}, "(/pool/taloscluster-demo, Pool.Allocate)"},
		{http.MethodGet, "/storage/local", nil, "(/storage/local, Datastore.Allocate)"},
		{http.MethodDelete, "/nodes/pve1/storage/local-lvm/content/local-lvm:vm-100-disk-0", nil, "(/storage/local-lvm, Datastore.Allocate)"},
		{http.MethodPost, "/nodes/pve1/storage/local/download-url", url.Values{"url": {"https://example.invalid/a.iso"}, "content": {"iso"}, "filename": {"a.iso"}},
			"(/storage/local, Datastore.AllocateTemplate)"},
	} {
		code, body := l.asRestricted(t, tc.method, tc.path, tc.params)
		want := "Permission check failed"
		if tc.want != "" {
			want += " " + tc.want
		}
		if code != http.StatusForbidden || body["message"] != want+"\n" {
			t.Errorf("%s %s %v = %d %v, want 403 %q", tc.method, tc.path, tc.params, code, body["message"], want)
		}
	}
	// The upload (multipart) is refused the same way.
	if err := l.newClient(t, pve.RestrictedTokenID, pve.RestrictedTokenSecret).Upload(t.Context(), "pve1", "local", "iso", "x.iso", strings.NewReader("iso")); err == nil ||
		!strings.Contains(err.Error(), "Permission check failed (/storage/local, Datastore.AllocateTemplate)") {
		t.Errorf("restricted upload: %v", err)
	}
	vms := l.srv.VMs()
	if len(vms) != 2 || vms[0].Cores != 1 || vms[0].FirewallOptions["enable"] != "" || len(l.srv.Volumes()) != 1 {
		t.Fatalf("a refused call changed something: %+v %+v", vms, l.srv.Volumes())
	}

	// What PVEVMUser holds on /vms works: power, CD-ROM media.
	code, body := l.asRestricted(t, http.MethodPost, "/nodes/pve1/qemu/100/status/start", nil)
	if code != http.StatusOK {
		t.Fatalf("restricted start: %d %v", code, body)
	}
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "OK" {
		t.Fatalf("restricted start: %s", st)
	}
	code, body = l.asRestricted(t, http.MethodPost, "/nodes/pve1/qemu/100/config", url.Values{"ide2": {"none,media=cdrom"}})
	if code != http.StatusOK {
		t.Fatalf("restricted CD-ROM change: %d %v", code, body)
	}
	if st := l.waitTask(t, "pve1", body["data"].(string)); st != "OK" {
		t.Errorf("restricted CD-ROM change: %s", st)
	}
	// A disk is not a CD-ROM: the POST passes the schema check (any
	// VM.Config.* privilege) and the qmconfig worker refuses the drive.
	code, body = l.asRestricted(t, http.MethodPost, "/nodes/pve1/qemu/100/config", url.Values{"scsi1": {"local-lvm:1"}})
	if code != http.StatusForbidden || body["message"] != "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)\n" {
		t.Errorf("restricted disk add = %d %v, want the storage refused before forking", code, body)
	}
	// Its own task is its to read; the default token's too, with
	// Sys.Audit on /nodes/pve1 (PVEAuditor on /).
	if code, body := l.asRestricted(t, http.MethodGet, "/nodes/pve1/tasks", nil); code != http.StatusOK || len(body["data"].([]any)) < 3 {
		t.Errorf("restricted task list = %d %v", code, body)
	}
}

// TestListingsFilterWhatTheTokenMayNotAudit: a token that may audit only
// VM 100 sees only it, no storage and no pool, and nodes without figures.
func TestListingsFilterWhatTheTokenMayNotAudit(t *testing.T) {
	t.Parallel()
	const id, secret = "viewer@pve!one", "viewer-secret"
	l := newLab(t, pve.Options{
		Tokens: []pve.Token{{ID: id, Secret: secret}},
		ACLs:   []pve.ACL{{Path: "/vms/100", User: "viewer@pve", Roles: []string{"PVEAuditor"}}},
	})
	for _, vmid := range []string{"100", "101"} {
		code, body := l.call(t, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {vmid}, "name": {"vm" + vmid}})
		if code != http.StatusOK {
			t.Fatal(body)
		}
		l.waitTask(t, "pve1", body["data"].(string))
	}
	auth := "PVEAPIToken=" + id + "=" + secret
	_, body := l.callAuth(t, http.MethodGet, "/cluster/resources", nil, auth)
	var kinds []string
	for _, e := range body["data"].([]any) {
		m := e.(map[string]any)
		kinds = append(kinds, m["id"].(string))
		if m["type"] == "node" && (m["maxmem"] != nil || m["uptime"] != nil || m["status"] != "online") {
			t.Errorf("node entry without Sys.Audit: %v", m)
		}
	}
	if want := []string{"qemu/100", "node/pve1", "node/pve2", "node/pve3"}; !slices.Equal(kinds, want) {
		t.Errorf("/cluster/resources lists %v, want %v", kinds, want)
	}
	_, body = l.callAuth(t, http.MethodGet, "/nodes/pve1/qemu", nil, auth)
	if vms := body["data"].([]any); len(vms) != 1 || vms[0].(map[string]any)["vmid"] != float64(100) {
		t.Errorf("/nodes/pve1/qemu = %v", vms)
	}
	for _, path := range []string{"/storage", "/nodes/pve1/storage", "/nodes/pve1/network", "/pools"} {
		if code, body := l.callAuth(t, http.MethodGet, path, nil, auth); code != http.StatusOK || len(body["data"].([]any)) != 0 {
			t.Errorf("%s = %d %v, want an empty list", path, code, body)
		}
	}
	if code, body := l.callAuth(t, http.MethodGet, "/nodes/pve1/qemu/101/config", nil, auth); code != http.StatusForbidden ||
		body["message"] != "Permission check failed (/vms/101, VM.Audit)\n" {
		t.Errorf("config of VM 101 = %d %v", code, body)
	}
	// Another token's task is not its to read without Sys.Audit.
	_, tasks := l.call(t, http.MethodGet, "/nodes/pve1/tasks", nil)
	upid := tasks["data"].([]any)[0].(map[string]any)["upid"].(string)
	if code, body := l.callAuth(t, http.MethodGet, "/nodes/pve1/tasks/"+upid+"/status", nil, auth); code != http.StatusForbidden ||
		body["message"] != "Permission check failed (/nodes/pve1, Sys.Audit)\n" {
		t.Errorf("another token's task = %d %v", code, body)
	}
	if code, body := l.callAuth(t, http.MethodGet, "/nodes/pve1/tasks", nil, auth); code != http.StatusOK || len(body["data"].([]any)) != 0 {
		t.Errorf("task list = %d %v, want none of the other token's tasks", code, body)
	}
}

// privs returns the privileges of one path of a /access/permissions
// answer with their flags.
func privs(t *testing.T, body map[string]any, path string) map[string]float64 {
	t.Helper()
	data, _ := body["data"].(map[string]any)
	m, ok := data[path].(map[string]any)
	if !ok {
		t.Fatalf("%s is not in the answer: %v", path, slices.Sorted(maps.Keys(data)))
	}
	out := map[string]float64{}
	for k, v := range m {
		out[k] = v.(float64)
	}
	return out
}

func TestAccessPermissions(t *testing.T) {
	t.Parallel()
	l := restrictedLab(t)

	// The default token (root@pam's, not separated) holds everything,
	// propagated, on every path listed: the top-level ones, the ACL
	// tree's and the pool's members.
	code, body := l.call(t, http.MethodGet, "/access/permissions", nil)
	if code != http.StatusOK {
		t.Fatal(body)
	}
	paths := slices.Sorted(maps.Keys(body["data"].(map[string]any)))
	if want := []string{"/", "/access", "/access/groups", "/nodes", "/pool", "/sdn", "/storage", "/vms", "/vms/100"}; !slices.Equal(paths, want) {
		t.Errorf("paths %v, want %v", paths, want)
	}
	root := privs(t, body, "/vms/100")
	if len(root) != 47 || root["VM.Allocate"] != 1 || root["Permissions.Modify"] != 1 || root["Sys.Modify"] != 1 {
		t.Errorf("the default token's privileges: %v", root)
	}
	_, body = l.call(t, http.MethodGet, "/access/permissions", url.Values{"path": {"/vms/123"}})
	if p := privs(t, body, "/vms/123"); len(p) != 47 || len(body["data"].(map[string]any)) != 1 {
		t.Errorf("path=/vms/123 for the default token: %v", body)
	}

	// The restricted token: PVEAuditor on / and PVEVMUser on /vms, both
	// within its user's PVEAdmin; on a pool member also the auditor
	// privileges the pool's roles give, not propagated.
	code, body = l.asRestricted(t, http.MethodGet, "/access/permissions", nil)
	if code != http.StatusOK {
		t.Fatal(body)
	}
	auditor := map[string]float64{"Datastore.Audit": 1, "Mapping.Audit": 1, "Pool.Audit": 1, "SDN.Audit": 1, "Sys.Audit": 1, "VM.Audit": 1, "VM.GuestAgent.Audit": 1}
	vmUser := map[string]float64{"VM.Audit": 1, "VM.Backup": 1, "VM.Config.CDROM": 1, "VM.Config.Cloudinit": 1, "VM.Console": 1,
		"VM.GuestAgent.Audit": 1, "VM.GuestAgent.FileRead": 1, "VM.GuestAgent.FileSystemMgmt": 1, "VM.GuestAgent.FileWrite": 1, "VM.PowerMgmt": 1}
	for _, path := range []string{"/", "/access", "/access/groups", "/nodes", "/pool", "/sdn", "/storage"} {
		if got := privs(t, body, path); !maps.Equal(got, auditor) {
			t.Errorf("%s: %v, want %v", path, got, auditor)
		}
	}
	if got := privs(t, body, "/vms"); !maps.Equal(got, vmUser) {
		t.Errorf("/vms: %v, want %v", got, vmUser)
	}
	member := maps.Clone(vmUser)
	for _, p := range []string{"Datastore.Audit", "Mapping.Audit", "Pool.Audit", "SDN.Audit", "Sys.Audit"} {
		member[p] = 0
	}
	if got := privs(t, body, "/vms/100"); !maps.Equal(got, member) {
		t.Errorf("/vms/100 (pool member): %v, want %v", got, member)
	}
	// With a path, exactly that path, held privileges or none.
	_, body = l.asRestricted(t, http.MethodGet, "/access/permissions", url.Values{"path": {"/vms/101"}})
	if got := privs(t, body, "/vms/101"); !maps.Equal(got, vmUser) || len(body["data"].(map[string]any)) != 1 {
		t.Errorf("path=/vms/101: %v", body)
	}
	_, body = l.asRestricted(t, http.MethodGet, "/access/permissions", url.Values{"path": {"/storage/local"}})
	if got := privs(t, body, "/storage/local"); !maps.Equal(got, auditor) {
		t.Errorf("path=/storage/local: %v", got)
	}
	// Its own user's permissions (Sys.Audit on /access allows it).
	_, body = l.asRestricted(t, http.MethodGet, "/access/permissions", url.Values{"userid": {"taloslab@pve"}, "path": {"/vms"}})
	if got := privs(t, body, "/vms"); got["VM.Allocate"] != 1 || got["Sys.Modify"] != 0 {
		t.Errorf("the user's privileges on /vms: %v", got)
	}
	if _, ok := privs(t, body, "/vms")["Sys.Modify"]; ok {
		t.Error("PVEAdmin holds Sys.Modify")
	}
	if code, body := l.asRestricted(t, http.MethodGet, "/access/permissions", url.Values{"userid": {"not a user"}}); code != http.StatusBadRequest {
		t.Errorf("a malformed userid = %d %v", code, body)
	}
}

// TestPermissionResolution covers how Proxmox VE resolves ACLs: a
// privilege-separated token gets what both it and its user hold, with
// propagation only where both propagate; a non-propagating entry applies
// to its path only and does not hide what comes from above; a nearer
// propagating entry replaces what comes from above; NoAccess wins; groups
// count for users; an unknown token holds nothing.
func TestPermissionResolution(t *testing.T) {
	t.Parallel()
	l := newLab(t, pve.Options{
		Tokens: []pve.Token{
			{ID: "ops@pve!sep", Secret: "a", Privsep: true},
			{ID: "ops@pve!full", Secret: "b"},
		},
		Roles:  map[string][]string{"Starter": {"VM.PowerMgmt", "VM.Audit"}},
		Groups: map[string][]string{"operators": {"ops@pve"}},
		ACLs: []pve.ACL{
			{Path: "/", Group: "operators", Roles: []string{"PVEAuditor"}, Propagate: true},
			{Path: "/vms", User: "ops@pve", Roles: []string{"PVEVMAdmin"}, Propagate: true},
			{Path: "/vms/200", User: "ops@pve", Roles: []string{"NoAccess"}, Propagate: true},
			{Path: "/storage", User: "ops@pve", Roles: []string{"PVEDatastoreAdmin"}},
			{Path: "/", Token: "ops@pve!sep", Roles: []string{"Administrator"}, Propagate: true},
			{Path: "/vms/300", Token: "ops@pve!sep", Roles: []string{"Starter"}},
		},
	})
	get := func(id, secret, path string) map[string]float64 {
		t.Helper()
		code, body := l.callAuth(t, http.MethodGet, "/access/permissions", url.Values{"path": {path}}, "PVEAPIToken="+id+"="+secret)
		if code != http.StatusOK {
			t.Fatalf("%s %s: %d %v", id, path, code, body)
		}
		return privs(t, body, path)
	}
	full, sep := func(p string) map[string]float64 { return get("ops@pve!full", "b", p) }, func(p string) map[string]float64 { return get("ops@pve!sep", "a", p) }

	// The unseparated token is its user: the group's PVEAuditor on /.
	if p := full("/"); p["Sys.Audit"] != 1 || len(p) != 7 {
		t.Errorf("full on /: %v", p)
	}
	// /vms replaces it with PVEVMAdmin for everything below.
	if p := full("/vms/123"); p["VM.Allocate"] != 1 || p["VM.PowerMgmt"] != 1 {
		t.Errorf("full on /vms/123: %v", p)
	}
	if _, ok := full("/vms/123")["Sys.Audit"]; ok {
		t.Error("the /vms entry does not replace / below it")
	}
	if p := full("/vms/200"); len(p) != 0 {
		t.Errorf("NoAccess on /vms/200: %v", p)
	}
	// A non-propagating entry: on /storage itself (flag 0), not below.
	if p := full("/storage"); p["Datastore.Allocate"] != 0 {
		t.Errorf("full on /storage: %v", p)
	}
	if p := full("/storage/local"); p["Datastore.Audit"] != 1 {
		t.Errorf("full on /storage/local: %v", p)
	}
	if _, ok := full("/storage/local")["Datastore.Allocate"]; ok {
		t.Error("a non-propagating entry applies below its path")
	}
	// The separated token: Administrator on / intersected with the user.
	if p := sep("/vms/123"); p["VM.Allocate"] != 1 || len(p) != len(full("/vms/123")) {
		t.Errorf("sep on /vms/123: %v", p)
	}
	if p := sep("/storage"); p["Datastore.Allocate"] != 0 || p["Datastore.Audit"] != 0 {
		t.Errorf("sep on /storage (user flag 0): %v", p)
	}
	if p := sep("/vms/300"); !maps.Equal(p, map[string]float64{"VM.PowerMgmt": 0, "VM.Audit": 0}) {
		t.Errorf("sep on /vms/300: %v", p)
	}
	code, body := l.callAuth(t, http.MethodDelete, "/nodes/pve1/qemu/300", nil, "PVEAPIToken=ops@pve!sep=a")
	if code != http.StatusForbidden || body["message"] != "Permission check failed (/vms/300, VM.Allocate)\n" {
		t.Errorf("sep deleting VM 300 = %d %v", code, body)
	}
	// Asking for another token's privileges needs Sys.Audit on /access.
	code, body = l.callAuth(t, http.MethodGet, "/access/permissions", url.Values{"userid": {"root@pam"}}, "PVEAPIToken=ops@pve!sep=a")
	if code != http.StatusOK {
		t.Errorf("sep reading root's privileges (it has Sys.Audit on /access) = %d %v", code, body)
	}
	_, body = l.call(t, http.MethodGet, "/access/permissions", url.Values{"userid": {"nobody@pve!none"}, "path": {"/"}})
	if p := privs(t, body, "/"); len(p) != 0 {
		t.Errorf("an unknown token: %v", p)
	}
	// The answer without a path lists the ACL tree's paths.
	_, body = l.callAuth(t, http.MethodGet, "/access/permissions", nil, "PVEAPIToken=ops@pve!full=b")
	for _, p := range []string{"/vms/300", "/storage"} {
		privs(t, body, p)
	}
	if _, ok := body["data"].(map[string]any)["/vms/200"]; ok {
		t.Error("a path where nothing is held is listed")
	}
}
