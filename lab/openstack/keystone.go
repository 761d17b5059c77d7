package openstack

import (
	"encoding/json"
	"net/http"
	"time"
)

// identityVersion is the Identity API version Keystone reports since Ussuri
// (v3.14), and its "updated" date.
const (
	identityVersion        = "v3.14"
	identityVersionUpdated = "2020-04-07T00:00:00Z"
)

// keystoneTime is the form of Keystone's token timestamps
// (keystone.common.utils.isotime with subsecond=True).
const keystoneTime = "2006-01-02T15:04:05.000000Z"

const unauthorizedMessage = "The request you have made requires authentication."

// token is an issued token.
type token struct {
	id       string
	cred     Credential
	issued   time.Time
	expires  time.Time
	auditIDs []string
}

func (s *Server) routes() {
	s.handle("GET /identity", "identity.versions", s.identityVersions)
	s.handle("GET /identity/{$}", "identity.versions", s.identityVersions)
	s.handle("GET /identity/v3", "identity.version", s.identityVersionV3)
	s.handle("GET /identity/v3/{$}", "identity.version", s.identityVersionV3)
	s.handle("POST /identity/v3/auth/tokens", "identity.token.create", s.createToken)
	s.handle("GET /identity/v3/auth/tokens", "identity.token.get", s.getToken)
	s.computeRoutes()
	s.networkRoutes()
	s.imageRoutes()
}

// v3Version is the v3 entry of the version documents.
func (s *Server) v3Version() map[string]any {
	return map[string]any{
		"id":      identityVersion,
		"status":  "stable",
		"updated": identityVersionUpdated,
		"links":   []map[string]string{{"rel": "self", "href": s.url + "/identity/v3/"}},
		"media-types": []map[string]string{{
			"base": "application/json",
			"type": "application/vnd.openstack.identity-v3+json",
		}},
	}
}

// identityVersions answers GET /identity/: 300 Multiple Choices listing v3.
func (s *Server) identityVersions(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusMultipleChoices, map[string]any{
		"versions": map[string]any{"values": []any{s.v3Version()}},
	})
}

// identityVersionV3 answers GET /identity/v3.
func (s *Server) identityVersionV3(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusOK, map[string]any{"version": s.v3Version()})
}

// authRequest is the body of POST /v3/auth/tokens, as far as the emulator
// reads it.
type authRequest struct {
	Auth struct {
		Identity struct {
			Methods               []string `json:"methods"`
			ApplicationCredential *struct {
				ID     string `json:"id"`
				Name   string `json:"name"`
				Secret string `json:"secret"`
			} `json:"application_credential"`
		} `json:"identity"`
		Scope json.RawMessage `json:"scope"`
	} `json:"auth"`
}

// createToken answers POST /identity/v3/auth/tokens for the
// application_credential method.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) int {
	var req authRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		return writeError(w, http.StatusBadRequest, "Invalid input for field 'auth': the request body is not valid JSON.", "Bad Request")
	}
	id := req.Auth.Identity
	if len(id.Methods) == 0 {
		return writeError(w, http.StatusBadRequest, "Invalid input for field 'identity': 'methods' is a required property", "Bad Request")
	}
	for _, m := range id.Methods {
		if m != "application_credential" {
			return writeError(w, http.StatusUnauthorized, "Attempted to authenticate with an unsupported method.", "Unauthorized")
		}
	}
	ac := id.ApplicationCredential
	if ac == nil || ac.Secret == "" || (ac.ID == "" && ac.Name == "") {
		return writeError(w, http.StatusBadRequest, "Invalid input for field 'application_credential'.", "Bad Request")
	}
	if len(req.Auth.Scope) > 0 && string(req.Auth.Scope) != "null" && string(req.Auth.Scope) != "{}" {
		// Keystone: "Application credentials cannot request a scope."
		return writeError(w, http.StatusUnauthorized, unauthorizedMessage, "Unauthorized")
	}
	cred, ok := s.credential(ac.ID, ac.Name, ac.Secret)
	if !ok {
		return writeError(w, http.StatusUnauthorized, unauthorizedMessage, "Unauthorized")
	}
	now := s.now().UTC()
	t := &token{
		id:       newID() + newID(),
		cred:     cred,
		issued:   now,
		expires:  now.Add(s.ttl),
		auditIDs: []string{newID()[:22]},
	}
	s.mu.Lock()
	s.tokens[t.id] = t
	s.mu.Unlock()
	w.Header().Set("X-Subject-Token", t.id)
	return writeJSON(w, http.StatusCreated, map[string]any{"token": s.tokenBody(t)})
}

// getToken answers GET /identity/v3/auth/tokens: the caller's X-Auth-Token
// must be valid, and the token in X-Subject-Token is described.
func (s *Server) getToken(w http.ResponseWriter, r *http.Request) int {
	if !s.authorized(r) {
		return s.unauthorized(w)
	}
	subject := r.Header.Get("X-Subject-Token")
	t, ok := s.validToken(subject)
	if !ok {
		return writeError(w, http.StatusNotFound, "Could not find token: "+subject+".", "Not Found")
	}
	w.Header().Set("X-Subject-Token", t.id)
	return writeJSON(w, http.StatusOK, map[string]any{"token": s.tokenBody(t)})
}

// credential finds the application credential by ID (or by name) and checks
// its secret.
func (s *Server) credential(id, name, secret string) (Credential, bool) {
	for _, c := range s.opts.Credentials {
		if (id != "" && c.ID == id) || (id == "" && c.Name == name) {
			return c, c.Secret == secret
		}
	}
	return Credential{}, false
}

// validToken returns the token with this ID if it was issued and has not
// expired.
func (s *Server) validToken(id string) (*token, bool) {
	if id == "" {
		return nil, false
	}
	s.mu.Lock()
	t := s.tokens[id]
	s.mu.Unlock()
	if t == nil || !s.now().Before(t.expires) {
		return nil, false
	}
	return t, true
}

// authorized reports whether the request carries a valid token in
// X-Auth-Token, as keystonemiddleware's auth_token checks for every service.
// A service answers 401 with unauthorized when it is false.
func (s *Server) authorized(r *http.Request) bool {
	_, ok := s.validToken(r.Header.Get("X-Auth-Token"))
	return ok
}

// unauthorized answers the 401 keystonemiddleware gives a request without a
// valid token.
func (s *Server) unauthorized(w http.ResponseWriter) int {
	w.Header().Set("WWW-Authenticate", `Keystone uri="`+s.url+`/identity"`)
	return writeError(w, http.StatusUnauthorized, unauthorizedMessage, "Unauthorized")
}

// tokenBody is the "token" object of a token answer.
func (s *Server) tokenBody(t *token) map[string]any {
	domain := map[string]string{"id": "default", "name": "Default"}
	roleNames := t.cred.Roles
	if roleNames == nil {
		roleNames = []string{"member", "reader"}
	}
	roles := make([]map[string]string, 0, len(roleNames))
	for _, n := range roleNames {
		roles = append(roles, map[string]string{"id": roleID(n), "name": n})
	}
	return map[string]any{
		"methods":    []string{"application_credential"},
		"audit_ids":  t.auditIDs,
		"issued_at":  t.issued.Format(keystoneTime),
		"expires_at": t.expires.Format(keystoneTime),
		"is_domain":  false,
		"user": map[string]any{
			"id": s.opts.UserID, "name": s.opts.UserName, "domain": domain,
			"password_expires_at": nil,
		},
		"project": map[string]any{
			"id": s.opts.ProjectID, "name": s.opts.ProjectName, "domain": domain,
		},
		"roles": roles,
		"application_credential": map[string]any{
			"id": t.cred.ID, "name": t.cred.Name, "restricted": !t.cred.Unrestricted,
		},
		"catalog": s.catalog(),
	}
}

// catalog is the service catalog: one public endpoint per service, in the
// configured region, all under this server's base URL.
func (s *Server) catalog() []map[string]any {
	services := []struct{ typ, name, path string }{
		{"identity", "keystone", "/identity"},
		{"compute", "nova", "/compute/v2.1"},
		{"network", "neutron", "/network"},
		{"image", "glance", "/image"},
	}
	out := make([]map[string]any, 0, len(services))
	for _, svc := range services {
		out = append(out, map[string]any{
			"id":   stableID("service", svc.typ),
			"type": svc.typ,
			"name": svc.name,
			"endpoints": []map[string]string{{
				"id":        stableID("endpoint", svc.typ),
				"interface": "public",
				"region":    s.opts.Region,
				"region_id": s.opts.Region,
				"url":       s.url + svc.path,
			}},
		})
	}
	return out
}

// roleID is a fixed ID per role name.
func roleID(name string) string { return stableID("role", name) }
