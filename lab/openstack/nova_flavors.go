package openstack

import (
	"net/http"
	"strings"
)

// flavors are the configured flavors (Options.Flavors or DefaultFlavors).
func (s *Server) flavors() []Flavor {
	if len(s.opts.Flavors) > 0 {
		return s.opts.Flavors
	}
	return DefaultFlavors
}

// flavorByID finds a flavor by its ID (never by its name, as Nova).
func (s *Server) flavorByID(id string) (Flavor, bool) {
	for _, f := range s.flavors() {
		if f.ID == id {
			return f, true
		}
	}
	return Flavor{}, false
}

// zones are the configured availability zones (Options.AvailabilityZones
// or "nova").
func (s *Server) zones() []string {
	if len(s.opts.AvailabilityZones) > 0 {
		return s.opts.AvailabilityZones
	}
	return []string{"nova"}
}

// flavorBody is a flavor of GET /flavors (basic) or /flavors/detail.
func (s *Server) flavorBody(r *http.Request, f Flavor, detail bool) map[string]any {
	v := requestVersion(r)
	body := map[string]any{"id": f.ID, "name": f.Name, "links": s.computeLinks("flavors", f.ID)}
	if v.atLeast(2, 55) {
		body["description"] = nil
	}
	if !detail {
		return body
	}
	body["ram"] = f.RAMMB
	body["disk"] = f.DiskGB
	body["vcpus"] = f.VCPUs
	body["swap"] = ""
	if v.atLeast(2, 75) {
		body["swap"] = 0
	}
	body["OS-FLV-EXT-DATA:ephemeral"] = 0
	body["OS-FLV-DISABLED:disabled"] = false
	body["os-flavor-access:is_public"] = true
	body["rxtx_factor"] = 1.0
	if v.atLeast(2, 61) {
		body["extra_specs"] = map[string]string{}
	}
	return body
}

// listFlavors answers GET /flavors and /flavors/detail, sorted by flavor ID
// as Nova's default sort_key flavorid.
func (s *Server) listFlavors(w http.ResponseWriter, r *http.Request) int {
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	out := []map[string]any{}
	for _, f := range sortedFlavors(s.flavors()) {
		out = append(out, s.flavorBody(r, f, detail))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"flavors": out})
}

// getFlavor answers GET /flavors/{id}.
func (s *Server) getFlavor(w http.ResponseWriter, r *http.Request) int {
	id := r.PathValue("id")
	f, ok := s.flavorByID(id)
	if !ok {
		return novaFault(w, http.StatusNotFound, "Flavor "+id+" could not be found.")
	}
	return writeJSON(w, http.StatusOK, map[string]any{"flavor": s.flavorBody(r, f, true)})
}

func sortedFlavors(in []Flavor) []Flavor {
	out := append([]Flavor(nil), in...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].ID < out[j-1].ID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// listAvailabilityZones answers GET /os-availability-zone: every zone
// available, hosts null (non-admin view).
func (s *Server) listAvailabilityZones(w http.ResponseWriter, _ *http.Request) int {
	out := []map[string]any{}
	for _, z := range s.zones() {
		out = append(out, map[string]any{
			"zoneName": z, "zoneState": map[string]bool{"available": true}, "hosts": nil,
		})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"availabilityZoneInfo": out})
}
