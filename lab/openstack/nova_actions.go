package openstack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

// allowReboot are the task states a hard reboot may start from
// (nova/compute/task_states.py ALLOW_REBOOT).
var allowReboot = []string{"", "rebooting", "reboot_pending", "reboot_started", "resuming",
	"rebooting_hard", "unpausing", "pausing", "suspending"}

// invalidState is common.raise_http_conflict_for_instance_invalid_state.
func invalidState(w http.ResponseWriter, action, id, attr, state string) int {
	if state == "" {
		state = "None"
	}
	return novaFault(w, http.StatusConflict, fmt.Sprintf("Cannot '%s' instance %s while it is in %s %s", action, id, attr, state))
}

// checkState is compute.api's check_instance_state: the vm_state must be
// one of vmStates and the task_state one of taskStates. It answers the
// conflict and returns its status, or 0.
func checkState(w http.ResponseWriter, sv *server, action string, vmStates, taskStates []string) int {
	if !contains(vmStates, sv.vmState) {
		return invalidState(w, action, sv.id, "vm_state", sv.vmState)
	}
	if !contains(taskStates, sv.taskState) {
		return invalidState(w, action, sv.id, "task_state", sv.taskState)
	}
	return 0
}

// serverAction answers POST /servers/{id}/action for reboot, os-stop and
// os-start.
func (s *Server) serverAction(w http.ResponseWriter, r *http.Request) int {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return novaFault(w, http.StatusRequestEntityTooLarge, "Request is too large.")
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return novaFault(w, http.StatusBadRequest, "Malformed request body")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.lookupServer(w, r.PathValue("id"))
	if sv == nil {
		return code
	}
	var names []string
	for k := range body {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) != 1 {
		return novaFault(w, http.StatusBadRequest, "There is no such action: "+strings.Join(names, ","))
	}
	switch names[0] {
	case "reboot":
		var req struct {
			Type *string `json:"type"`
		}
		if err := json.Unmarshal(body["reboot"], &req); err != nil || req.Type == nil {
			return novaFault(w, http.StatusBadRequest, invalidField("reboot", jsonValue(body["reboot"]), "'type' is a required property"))
		}
		typ := *req.Type
		if !contains([]string{"HARD", "Hard", "hard", "SOFT", "Soft", "soft"}, typ) {
			return novaFault(w, http.StatusBadRequest, invalidField("type", typ,
				pyRepr(typ)+" is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']"))
		}
		return s.reboot(w, sv, strings.ToUpper(typ) == "HARD")
	case "os-stop":
		if c := checkState(w, sv, "stop", []string{vmActive, vmError}, []string{""}); c != 0 {
			return c
		}
		sv.taskState = taskPoweringOff
		sv.updated = s.now().UTC()
		s.serverDown(sv)
		s.after(sv, func(sv *server) {
			sv.vmState, sv.taskState, sv.powerState = vmStopped, "", powerShutdown
		})
	case "os-start":
		if c := checkState(w, sv, "start", []string{vmStopped}, []string{""}); c != 0 {
			return c
		}
		sv.taskState = taskPoweringOn
		sv.updated = s.now().UTC()
		s.after(sv, func(sv *server) {
			sv.vmState, sv.taskState, sv.powerState = vmActive, "", powerRunning
			s.serverUp(sv)
		})
	default:
		return novaFault(w, http.StatusBadRequest, "There is no such action: "+names[0])
	}
	w.WriteHeader(http.StatusAccepted)
	return http.StatusAccepted
}

// reboot starts a soft reboot (ACTIVE and no task only; status REBOOT) or
// a hard one (also from SHUTOFF and ERROR, and during a soft reboot;
// status HARD_REBOOT). The guest stops now and runs again after the
// transition delay. The caller holds s.mu.
func (s *Server) reboot(w http.ResponseWriter, sv *server, hard bool) int {
	if hard {
		if c := checkState(w, sv, "reboot", []string{vmActive, vmStopped, "paused", "suspended", vmError}, allowReboot); c != 0 {
			return c
		}
		sv.taskState = taskRebootingHard
	} else {
		if c := checkState(w, sv, "reboot", []string{vmActive}, []string{""}); c != 0 {
			return c
		}
		sv.taskState = taskRebooting
	}
	sv.updated = s.now().UTC()
	s.serverDown(sv)
	s.after(sv, func(sv *server) {
		sv.vmState, sv.taskState, sv.powerState = vmActive, "", powerRunning
		sv.fault = nil
		s.serverUp(sv)
	})
	w.WriteHeader(http.StatusAccepted)
	return http.StatusAccepted
}

// Server tags (nova/api/openstack/compute/server_tags.py), from 2.26.

// tagsServer finds the server of a tags request, checking the microversion
// and, for changes, the vm_state. It answers and returns nil on failure.
func (s *Server) tagsServer(w http.ResponseWriter, r *http.Request, action string) (*server, int) {
	if !requestVersion(r).atLeast(2, 26) {
		return nil, novaFault(w, http.StatusNotFound, "The resource could not be found.")
	}
	sv, code := s.lookupServer(w, r.PathValue("id"))
	if sv == nil {
		return nil, code
	}
	if action != "" && !contains([]string{vmActive, "paused", "suspended", vmStopped}, sv.vmState) {
		return nil, invalidState(w, action, sv.id, "vm_state", sv.vmState)
	}
	return sv, 0
}

func (s *Server) listServerTags(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.tagsServer(w, r, "")
	if sv == nil {
		return code
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tags": append([]string{}, sv.tags...)})
}

func (s *Server) checkServerTag(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.tagsServer(w, r, "")
	if sv == nil {
		return code
	}
	tag := r.PathValue("tag")
	if !contains(sv.tags, tag) {
		return novaFault(w, http.StatusNotFound, fmt.Sprintf("Server %s has no tag '%s'", sv.id, tag))
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

func (s *Server) replaceServerTags(w http.ResponseWriter, r *http.Request) int {
	var body struct {
		Tags *[]string `json:"tags"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil || body.Tags == nil {
		return novaFault(w, http.StatusBadRequest, "'tags' is a required property")
	}
	if msg := tagsError(*body.Tags); msg != "" {
		return novaFault(w, http.StatusBadRequest, msg)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.tagsServer(w, r, "update tags")
	if sv == nil {
		return code
	}
	sv.tags = dedupTags(*body.Tags)
	return writeJSON(w, http.StatusOK, map[string]any{"tags": append([]string{}, sv.tags...)})
}

func (s *Server) clearServerTags(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.tagsServer(w, r, "delete tags")
	if sv == nil {
		return code
	}
	sv.tags = []string{}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

func (s *Server) addServerTag(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.tagsServer(w, r, "update tag")
	if sv == nil {
		return code
	}
	tag := r.PathValue("tag")
	if msg := tagError("tag", tag); msg != "" {
		reason := msg[strings.LastIndex(msg, ". ")+2:]
		return novaFault(w, http.StatusBadRequest, fmt.Sprintf(
			"Tag '%s' is invalid. It must be a non empty string without characters '/' and ','. Validation error message: %s", tag, reason))
	}
	if contains(sv.tags, tag) {
		w.WriteHeader(http.StatusNoContent)
		return http.StatusNoContent
	}
	if len(sv.tags) >= maxServerTags {
		return novaFault(w, http.StatusBadRequest, fmt.Sprintf("The number of tags exceeded the per-server limit %d", maxServerTags))
	}
	sv.tags = append(sv.tags, tag)
	w.Header().Set("Location", s.url+computePrefix+"/servers/"+sv.id+"/tags/"+tag)
	w.WriteHeader(http.StatusCreated)
	return http.StatusCreated
}

func (s *Server) deleteServerTag(w http.ResponseWriter, r *http.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, code := s.tagsServer(w, r, "delete tag")
	if sv == nil {
		return code
	}
	tag := r.PathValue("tag")
	i := -1
	for j, t := range sv.tags {
		if t == tag {
			i = j
		}
	}
	if i < 0 {
		return novaFault(w, http.StatusNotFound, fmt.Sprintf("Instance %s has no tag '%s'", sv.id, tag))
	}
	sv.tags = append(sv.tags[:i:i], sv.tags[i+1:]...)
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// GuestStopped records that a running server's guest powered itself off
// (a Talos reset that powers off): the hypervisor reports the domain shut
// off, and Nova's power-state sync (the libvirt lifecycle event's
// handle_lifecycle_event, then _sync_instance_power_state calling the stop
// API for an active instance that stopped by itself) makes it SHUTOFF,
// vm_state stopped, power_state 4, with no API call by anyone.
func (s *Server) GuestStopped(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nova == nil {
		return
	}
	sv, ok := s.nova.servers[id]
	if !ok || sv.vmState != vmActive {
		return
	}
	sv.vmState, sv.taskState, sv.powerState = vmStopped, "", powerShutdown
	sv.updated = s.now().UTC()
	s.serverDown(sv)
}
