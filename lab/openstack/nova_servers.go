package openstack

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// novaTime is utils.isotime, the form of Nova's created/updated.
const novaTime = "2006-01-02T15:04:05Z"

// novaHost is the compute host every server runs on; only its hash
// (hostId) is visible to a project.
const novaHost = "lab-compute-1"

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// serverBody is a server as GET /servers/{id} and /servers/detail show it
// to a project member at microversion v (views/servers.py show). The
// caller holds s.mu.
func (s *Server) serverBody(v microversion, sv *server, list bool) map[string]any {
	b := map[string]any{
		"id": sv.id, "name": sv.name, "status": sv.status(),
		"tenant_id": s.opts.ProjectID, "user_id": s.opts.UserID,
		"metadata": orEmpty(sv.metadata), "hostId": hostID(s.opts.ProjectID),
		"created": sv.created.Format(novaTime), "updated": sv.updated.Format(novaTime),
		"addresses":  s.addresses(sv),
		"accessIPv4": sv.accessIPv4, "accessIPv6": sv.accessIPv6,
		"links":                       s.computeLinks("servers", sv.id),
		"OS-DCF:diskConfig":           "MANUAL",
		"OS-EXT-AZ:availability_zone": sv.zone,
		"config_drive":                "",
		"key_name":                    nullable(sv.keyName),
		"OS-SRV-USG:launched_at":      nil,
		"OS-SRV-USG:terminated_at":    nil,
		"OS-EXT-STS:vm_state":         sv.vmState,
		"OS-EXT-STS:task_state":       nullable(sv.taskState),
		"OS-EXT-STS:power_state":      sv.powerState,
	}
	if sv.configDrive {
		b["config_drive"] = "True"
	}
	if !sv.launched.IsZero() {
		b["OS-SRV-USG:launched_at"] = sv.launched.Format("2006-01-02T15:04:05.000000")
	}
	b["image"] = ""
	if sv.imageRef != "" {
		img := map[string]any{"id": sv.imageRef, "links": []map[string]string{{
			"rel": "bookmark", "href": s.url + "/compute/images/" + sv.imageRef,
		}}}
		if v.atLeast(2, 98) {
			img["properties"] = s.imageProperties(sv.imageRef)
		}
		b["image"] = img
	}
	if v.atLeast(2, 47) {
		b["flavor"] = map[string]any{
			"vcpus": sv.flavor.VCPUs, "ram": sv.flavor.RAMMB, "disk": sv.flavor.DiskGB,
			"ephemeral": 0, "swap": 0, "original_name": sv.flavor.Name,
			"extra_specs": map[string]string{},
		}
	} else {
		b["flavor"] = map[string]any{"id": sv.flavor.ID, "links": []map[string]string{{
			"rel": "bookmark", "href": s.url + "/compute/flavors/" + sv.flavor.ID,
		}}}
	}
	switch st := sv.status(); st {
	case "ERROR":
		if sv.fault != nil {
			b["fault"] = map[string]any{"code": sv.fault.code, "message": sv.fault.message, "created": sv.fault.created.Format(novaTime)}
		}
	case "ACTIVE", "BUILD":
		b["progress"] = 0
	}
	if v.atLeast(2, 96) {
		b["pinned_availability_zone"] = nullable(sv.requestedZone)
	}
	if v.atLeast(2, 100) {
		b["scheduler_hints"] = sv.schedulerHints
	}
	if len(sv.ports) > 0 && sv.vmState != vmBuilding {
		groups := []map[string]string{}
		for _, g := range sv.securityGroups {
			groups = append(groups, map[string]string{"name": g})
		}
		b["security_groups"] = groups
	}
	vols := []map[string]any{}
	for _, a := range sv.volumes {
		vol := map[string]any{"id": a.id}
		if v.atLeast(2, 3) {
			vol["delete_on_termination"] = a.deleteOnTermination
		}
		vols = append(vols, vol)
	}
	b["os-extended-volumes:volumes_attached"] = vols
	if v.atLeast(2, 9) {
		b["locked"] = false
	}
	if v.atLeast(2, 73) {
		b["locked_reason"] = nil
	}
	if v.atLeast(2, 19) {
		if sv.hasDescription {
			b["description"] = sv.description
		} else {
			b["description"] = nil
		}
	}
	if v.atLeast(2, 26) {
		b["tags"] = append([]string{}, sv.tags...)
	}
	if v.atLeast(2, 63) {
		b["trusted_image_certificates"] = nil
	}
	if v.atLeast(2, 90) {
		b["OS-EXT-SRV-ATTR:hostname"] = sv.hostname
	}
	if v.atLeast(2, 71) && !list {
		b["server_groups"] = []string{}
	}
	return b
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// hostID is utils.generate_hostid: SHA-224 of project ID and host.
func hostID(project string) string {
	sum := sha256.Sum224([]byte(project + novaHost))
	return hex.EncodeToString(sum[:])
}

// addresses is the server's "addresses": fixed IPs by network name,
// hidden while it builds.
func (s *Server) addresses(sv *server) map[string]any {
	out := map[string]any{}
	if sv.vmState == vmBuilding {
		return out
	}
	for _, p := range sv.ports {
		list, _ := out[p.network].([]map[string]any)
		for _, a := range p.addrs {
			version := 4
			if a.Is6() && !a.Is4In6() {
				version = 6
			}
			list = append(list, map[string]any{
				"version": version, "addr": a.String(),
				"OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": p.mac,
			})
		}
		out[p.network] = list
	}
	return out
}

// lookupServer finds a server or answers Nova's 404. The caller holds
// s.mu.
func (s *Server) lookupServer(w http.ResponseWriter, id string) (*server, int) {
	sv := s.nova.servers[id]
	if sv == nil {
		return nil, novaFault(w, http.StatusNotFound, "Instance "+id+" could not be found.")
	}
	return sv, 0
}

// getServer answers GET /servers/{id}.
func (s *Server) getServer(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.lookupServer(w, r.PathValue("id"))
	if sv == nil {
		return code
	}
	return writeJSON(w, http.StatusOK, map[string]any{"server": s.serverBody(requestVersion(r), sv, false)})
}

// listServers answers GET /servers and /servers/detail, newest first
// (Nova's default sort created_at desc), with the filters a project
// member may use: name (a regular expression searched case-insensitively,
// as MySQL's REGEXP), status, tags, tags-any, not-tags, not-tags-any, and
// limit/marker paging.
func (s *Server) listServers(w http.ResponseWriter, r *http.Request) int {
	v := requestVersion(r)
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	q := r.URL.Query()
	last := func(k string) (string, bool) {
		vals, ok := q[k]
		if !ok || len(vals) == 0 {
			return "", false
		}
		return vals[len(vals)-1], true
	}
	var nameRE *regexp.Regexp
	if name, ok := last("name"); ok {
		re, err := regexp.Compile("(?i)" + name)
		if err != nil {
			return novaFault(w, http.StatusBadRequest, "Invalid input for query parameters name. Value: "+name+". "+pyRepr(name)+" is not a 'regex'")
		}
		nameRE = re
	}
	var statuses []string
	if _, ok := q["status"]; ok {
		for _, st := range q["status"] {
			if !contains([]string{"ACTIVE", "BUILD", "SHUTOFF", "ERROR", "REBOOT", "HARD_REBOOT", "PASSWORD", "REBUILD", "MIGRATING", "RESIZE", "VERIFY_RESIZE", "REVERT_RESIZE", "PAUSED", "SUSPENDED", "RESCUE", "DELETED", "SOFT_DELETED", "SHELVED", "SHELVED_OFFLOADED", "UNKNOWN"}, strings.ToUpper(st)) {
				continue
			}
			statuses = append(statuses, strings.ToUpper(st))
		}
		if len(statuses) == 0 {
			if v.atLeast(2, 38) {
				return novaFault(w, http.StatusBadRequest, "Invalid status value")
			}
			return writeJSON(w, http.StatusOK, map[string]any{"servers": []any{}})
		}
	}
	tagFilter := map[string][]string{}
	if v.atLeast(2, 26) {
		for _, k := range []string{"tags", "tags-any", "not-tags", "not-tags-any"} {
			if val, ok := last(k); ok {
				tagFilter[k] = strings.Split(val, ",")
			}
		}
	}
	limit := 1000
	if l, ok := last("limit"); ok {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return novaFault(w, http.StatusBadRequest, "Invalid input for query parameters limit. Value: "+l+". "+pyRepr(l)+" does not match '^[0-9]*$'")
		}
		limit = min(n, 1000)
	}
	marker, hasMarker := last("marker")

	s.mu.Lock()
	defer s.mu.Unlock()
	var matched []*server
	for i := len(s.nova.order) - 1; i >= 0; i-- {
		sv := s.nova.servers[s.nova.order[i]]
		if sv == nil {
			continue
		}
		if nameRE != nil && !nameRE.MatchString(sv.name) {
			continue
		}
		if statuses != nil && !contains(statuses, sv.status()) {
			continue
		}
		if !tagsMatch(sv.tags, tagFilter) {
			continue
		}
		matched = append(matched, sv)
	}
	if hasMarker {
		at := -1
		for i, sv := range matched {
			if sv.id == marker {
				at = i
			}
		}
		if at < 0 {
			return novaFault(w, http.StatusBadRequest, "marker ["+marker+"] not found")
		}
		matched = matched[at+1:]
	}
	if len(matched) > limit {
		matched = matched[:limit]
	}
	out := []map[string]any{}
	for _, sv := range matched {
		if detail {
			out = append(out, s.serverBody(v, sv, true))
		} else {
			out = append(out, map[string]any{"id": sv.id, "name": sv.name, "links": s.computeLinks("servers", sv.id)})
		}
	}
	body := map[string]any{"servers": out}
	if len(matched) > 0 && len(matched) == limit {
		next := url.Values{}
		for k, vals := range q {
			next[k] = vals
		}
		next.Set("limit", strconv.Itoa(limit))
		next.Set("marker", matched[len(matched)-1].id)
		path := "/servers"
		if detail {
			path += "/detail"
		}
		body["servers_links"] = []map[string]string{{"rel": "next", "href": s.url + computePrefix + path + "?" + next.Encode()}}
	}
	return writeJSON(w, http.StatusOK, body)
}

// tagsMatch applies Nova's tag filters: tags (all), tags-any (one),
// not-tags (not all), not-tags-any (none).
func tagsMatch(tags []string, f map[string][]string) bool {
	has := func(t string) bool { return contains(tags, t) }
	if want, ok := f["tags"]; ok {
		for _, t := range want {
			if !has(t) {
				return false
			}
		}
	}
	if want, ok := f["tags-any"]; ok {
		any := false
		for _, t := range want {
			any = any || has(t)
		}
		if !any {
			return false
		}
	}
	if want, ok := f["not-tags"]; ok {
		all := true
		for _, t := range want {
			all = all && has(t)
		}
		if all {
			return false
		}
	}
	if want, ok := f["not-tags-any"]; ok {
		for _, t := range want {
			if has(t) {
				return false
			}
		}
	}
	return true
}

// deleteServer answers DELETE /servers/{id}: 204, task_state deleting
// (the guest stops: ServerDown), then after the transition delay the
// server is gone with its ports unbound and its delete_on_termination
// volumes (ServerDeleted).
func (s *Server) deleteServer(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.lookupServer(w, r.PathValue("id"))
	if sv == nil {
		return code
	}
	if sv.taskState != taskDeleting {
		sv.taskState = taskDeleting
		sv.updated = s.now().UTC()
		s.serverDown(sv)
		s.after(sv, s.removeServer)
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// removeServer ends a delete. The caller holds s.mu.
func (s *Server) removeServer(sv *server) {
	s.releasePorts(sv)
	for _, a := range sv.volumes {
		if a.deleteOnTermination {
			delete(s.nova.volumes, a.id)
		}
	}
	delete(s.nova.servers, sv.id)
	for i, id := range s.nova.order {
		if id == sv.id {
			s.nova.order = append(s.nova.order[:i:i], s.nova.order[i+1:]...)
			break
		}
	}
	id := sv.id
	s.notify(func(m MachineHooks) { m.ServerDeleted(id) })
}
