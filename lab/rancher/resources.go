package rancher

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// cluster returns the cluster of id, nil for none. The caller holds mu.
func (s *Server) cluster(id string) *Cluster {
	for _, cl := range s.clusters {
		if cl.ID == id {
			return cl
		}
	}
	return nil
}

// newCluster makes a pending imported cluster and its creator's owner
// binding, as Rancher does for the user who creates a cluster. The
// caller holds mu.
func (s *Server) newCluster(name string) *Cluster {
	cl := &Cluster{ID: "c-" + randomID(5), Name: name, State: "pending", Created: time.Now()}
	s.clusters = append(s.clusters, cl)
	s.bindings = append(s.bindings, &Binding{ID: cl.ID + ":creator-cluster-owner", ClusterID: cl.ID,
		UserPrincipalID: s.opts.Creator, RoleTemplateID: "cluster-owner"})
	return cl
}

// namespaceReady reports whether Rancher has made the cluster's backing
// namespace: NamespaceDelay after its creation.
func (s *Server) namespaceReady(cl *Cluster) bool {
	return s.opts.NamespaceDelay < 0 || cl.Created.IsZero() || time.Since(cl.Created) >= s.opts.NamespaceDelay
}

// clusterJSON is a cluster as the v3 API shows it.
func (s *Server) clusterJSON(r *http.Request, cl *Cluster) map[string]any {
	ns := "Unknown"
	if s.namespaceReady(cl) {
		ns = "True"
	}
	self := origin(r) + "/v3/clusters/" + cl.ID
	return map[string]any{
		"id": cl.ID, "type": "cluster", "baseType": "cluster", "name": cl.Name, "state": cl.State,
		"transitioning": "no", "internal": false, "driver": "",
		"created": cl.Created.UTC().Format(time.RFC3339),
		"conditions": []map[string]any{
			{"type": "BackingNamespaceCreated", "status": ns},
			{"type": "DefaultProjectCreated", "status": ns},
			{"type": "Pending", "status": "Unknown"},
		},
		"links": map[string]any{"self": self, "remove": self, "clusterRegistrationTokens": self + "/clusterregistrationtokens",
			"clusterRoleTemplateBindings": self + "/clusterroletemplatebindings"},
	}
}

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) {
	// Norman filters on the schema's fields named in the query (name=,
	// id=, state=); other parameters, such as filter=, are ignored.
	q := r.URL.Query()
	s.mu.Lock()
	var items []map[string]any
	for _, cl := range s.clusters {
		if match(q, "name", cl.Name) && match(q, "id", cl.ID) && match(q, "state", cl.State) {
			items = append(items, s.clusterJSON(r, cl))
		}
	}
	s.mu.Unlock()
	collection(w, r, "cluster", items)
}

// match reports whether value is one of the query's values of key, or
// the query has none.
func match(q map[string][]string, key, value string) bool {
	vs, ok := q[key]
	if !ok {
		return true
	}
	for _, v := range vs {
		if v == value {
			return true
		}
	}
	return false
}

func (s *Server) createCluster(w http.ResponseWriter, r *http.Request, body []byte) {
	var in struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		apiError(w, http.StatusUnprocessableEntity, "InvalidBodyContent", "Failed to parse body: "+err.Error())
		return
	}
	if in.Name == "" {
		fieldError(w, http.StatusUnprocessableEntity, "MissingRequired", "Cluster name", "")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cl := range s.clusters {
		if strings.EqualFold(cl.Name, in.Name) {
			fieldError(w, http.StatusUnprocessableEntity, "NotUnique", "Cluster name", "")
			return
		}
	}
	cl := s.newCluster(in.Name)
	// A cluster imported by its registration command gets a default
	// registration token at once.
	s.tokens = append(s.tokens, &regToken{id: cl.ID + ":default-token", clusterID: cl.ID, token: randomID(54)})
	writeJSON(w, http.StatusCreated, s.clusterJSON(r, cl))
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.cluster(id)
	if cl == nil {
		apiError(w, http.StatusNotFound, "NotFound", "clusters.management.cattle.io \""+id+"\" not found")
		return
	}
	writeJSON(w, http.StatusOK, s.clusterJSON(r, cl))
}

// deleteCluster removes the cluster with its tokens and bindings, and
// answers it in state removing, as Rancher answers a delete it started.
func (s *Server) deleteCluster(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.cluster(id)
	if cl == nil {
		apiError(w, http.StatusNotFound, "NotFound", "clusters.management.cattle.io \""+id+"\" not found")
		return
	}
	keep := s.clusters[:0]
	for _, c := range s.clusters {
		if c.ID != id {
			keep = append(keep, c)
		}
	}
	s.clusters = keep
	var bindings []*Binding
	for _, b := range s.bindings {
		if b.ClusterID != id {
			bindings = append(bindings, b)
		}
	}
	s.bindings = bindings
	var tokens []*regToken
	for _, t := range s.tokens {
		if t.clusterID != id {
			tokens = append(tokens, t)
		}
	}
	s.tokens = tokens
	out := s.clusterJSON(r, cl)
	out["state"], out["transitioning"] = "removing", "yes"
	writeJSON(w, http.StatusOK, out)
}

// tokenJSON is a registration token as the v3 API shows it, with the
// commands Rancher's formatter adds: they name the import manifest at
// the server URL.
func (s *Server) tokenJSON(r *http.Request, t *regToken) map[string]any {
	base := s.opts.ServerURL
	if base == "" {
		base = origin(r)
	}
	manifest := strings.TrimRight(base, "/") + "/v3/import/" + t.token + "_" + t.clusterID + ".yaml"
	return map[string]any{
		"id": t.id, "type": "clusterRegistrationToken", "baseType": "clusterRegistrationToken",
		"clusterId": t.clusterID, "name": t.id[strings.Index(t.id, ":")+1:], "state": "active",
		"token": t.token, "manifestUrl": manifest,
		"command":         "kubectl apply -f " + manifest,
		"insecureCommand": "curl --insecure -sfL " + manifest + " | kubectl apply -f -",
	}
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, body []byte) {
	var in struct {
		ClusterID string `json:"clusterId"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		apiError(w, http.StatusUnprocessableEntity, "InvalidBodyContent", "Failed to parse body: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.ClusterID == "" {
		fieldError(w, http.StatusUnprocessableEntity, "MissingRequired", "clusterId", "")
		return
	}
	if s.cluster(in.ClusterID) == nil {
		fieldError(w, http.StatusUnprocessableEntity, "InvalidReference", "clusterId", "")
		return
	}
	t := &regToken{id: in.ClusterID + ":crt-" + randomID(5), clusterID: in.ClusterID, token: randomID(54)}
	s.tokens = append(s.tokens, t)
	writeJSON(w, http.StatusCreated, s.tokenJSON(r, t))
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, clusterID string) {
	s.mu.Lock()
	if s.cluster(clusterID) == nil {
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, "NotFound", "clusters.management.cattle.io \""+clusterID+"\" not found")
		return
	}
	var items []map[string]any
	for _, t := range s.tokens {
		if t.clusterID == clusterID {
			items = append(items, s.tokenJSON(r, t))
		}
	}
	s.mu.Unlock()
	collection(w, r, "clusterRegistrationToken", items)
}

// searchPrincipals finds the users and groups whose login or display
// name starts with the name searched, without regard to case, as an
// LDAP search on a name prefix does.
func (s *Server) searchPrincipals(w http.ResponseWriter, body []byte) {
	var in struct {
		Name          string `json:"name"`
		PrincipalType string `json:"principalType"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		apiError(w, http.StatusUnprocessableEntity, "InvalidBodyContent", "Failed to parse body: "+err.Error())
		return
	}
	name := strings.ToLower(in.Name)
	s.mu.Lock()
	var items []map[string]any
	for _, p := range s.principals {
		if in.PrincipalType != "" && p.Type != in.PrincipalType {
			continue
		}
		if name == "" || !strings.HasPrefix(strings.ToLower(p.Login), name) && !strings.HasPrefix(strings.ToLower(p.Name), name) {
			continue
		}
		items = append(items, map[string]any{"id": p.ID, "type": "principal", "baseType": "principal",
			"principalType": p.Type, "name": p.Name, "loginName": p.Login, "provider": p.Provider,
			"me": p.ID == s.opts.Creator, "memberOf": false})
	}
	s.mu.Unlock()
	if items == nil {
		items = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"type": "collection", "resourceType": "principal", "data": items})
}

func bindingJSON(b *Binding) map[string]any {
	out := map[string]any{"id": b.ID, "type": "clusterRoleTemplateBinding", "baseType": "clusterRoleTemplateBinding",
		"name": b.ID[strings.Index(b.ID, ":")+1:], "namespaceId": nil, "clusterId": b.ClusterID,
		"roleTemplateId": b.RoleTemplateID, "userPrincipalId": nil, "groupPrincipalId": nil, "userId": nil, "groupId": nil}
	if b.UserPrincipalID != "" {
		out["userPrincipalId"] = b.UserPrincipalID
	}
	if b.GroupPrincipalID != "" {
		out["groupPrincipalId"] = b.GroupPrincipalID
	}
	return out
}

func (s *Server) listBindings(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	var items []map[string]any
	for _, b := range s.bindings {
		if s.opts.UnfilteredBindings || match(q, "clusterId", b.ClusterID) && match(q, "roleTemplateId", b.RoleTemplateID) {
			items = append(items, bindingJSON(b))
		}
	}
	s.mu.Unlock()
	collection(w, r, "clusterRoleTemplateBinding", items)
}

// roleTemplates are the cluster role templates Rancher ships that a
// binding may name.
var roleTemplates = []string{"cluster-owner", "cluster-member", "projects-create", "projects-view", "nodes-manage", "nodes-view",
	"clusterroletemplatebindings-manage", "clusterroletemplatebindings-view", "clustercatalogs-manage", "clustercatalogs-view"}

func (s *Server) createBinding(w http.ResponseWriter, body []byte) {
	var in struct {
		ClusterID        string `json:"clusterId"`
		UserPrincipalID  string `json:"userPrincipalId"`
		GroupPrincipalID string `json:"groupPrincipalId"`
		RoleTemplateID   string `json:"roleTemplateId"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		apiError(w, http.StatusUnprocessableEntity, "InvalidBodyContent", "Failed to parse body: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case in.ClusterID == "":
		fieldError(w, http.StatusUnprocessableEntity, "MissingRequired", "clusterId", "")
	case in.RoleTemplateID == "":
		fieldError(w, http.StatusUnprocessableEntity, "MissingRequired", "roleTemplateId", "")
	case s.cluster(in.ClusterID) == nil:
		fieldError(w, http.StatusUnprocessableEntity, "InvalidReference", "clusterId", "")
	case !slices.Contains(roleTemplates, in.RoleTemplateID):
		fieldError(w, http.StatusUnprocessableEntity, "InvalidReference", "roleTemplateId", "")
	case (in.UserPrincipalID == "") == (in.GroupPrincipalID == ""):
		apiError(w, http.StatusUnprocessableEntity, "InvalidFormat", "binding must target either a user [userId]/[userPrincipalId] OR a group [groupId]/[groupPrincipalId]")
	default:
		b := &Binding{ID: in.ClusterID + ":crtb-" + randomID(5), ClusterID: in.ClusterID, UserPrincipalID: in.UserPrincipalID,
			GroupPrincipalID: in.GroupPrincipalID, RoleTemplateID: in.RoleTemplateID}
		s.bindings = append(s.bindings, b)
		writeJSON(w, http.StatusCreated, bindingJSON(b))
	}
}

func (s *Server) deleteBinding(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range s.bindings {
		if b.ID == id {
			s.bindings = append(s.bindings[:i], s.bindings[i+1:]...)
			writeJSON(w, http.StatusOK, bindingJSON(b))
			return
		}
	}
	apiError(w, http.StatusNotFound, "NotFound", "clusterroletemplatebindings.management.cattle.io \""+id+"\" not found")
}
