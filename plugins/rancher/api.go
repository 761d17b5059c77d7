package rancher

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
)

// rcluster is a Rancher cluster as the plugin reads it.
type rcluster struct {
	ID         string      `json:"id"`
	Name       string      `json:"name"`
	State      string      `json:"state"`
	Conditions []condition `json:"conditions"`
}

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// namespaceReady reports whether Rancher made the cluster's backing
// namespace: its BackingNamespaceCreated condition is exactly "True".
func (c rcluster) namespaceReady() bool {
	return slices.ContainsFunc(c.Conditions, func(x condition) bool {
		return x.Type == "BackingNamespaceCreated" && x.Status == "True"
	})
}

// binding is a cluster role template binding: a member of a cluster.
type binding struct {
	ID               string `json:"id"`
	UserPrincipalID  string `json:"userPrincipalId"`
	GroupPrincipalID string `json:"groupPrincipalId"`
	RoleTemplateID   string `json:"roleTemplateId"`
}

// user reports whether the binding names a user principal (and no
// group): the only bindings the plugin manages.
func (b binding) user() bool { return b.UserPrincipalID != "" && b.GroupPrincipalID == "" }

// principal is what a principal search answers.
type principal struct {
	ID            string `json:"id"`
	PrincipalType string `json:"principalType"`
}

// regToken is a cluster registration token's commands.
type regToken struct {
	Command         string `json:"command"`
	InsecureCommand string `json:"insecureCommand"`
}

// collection is Rancher's list shape.
type collection[T any] struct {
	Data []T `json:"data"`
}

// findCluster returns the cluster named name, nil for none. The query
// carries the Python tool's filter=name=<name> and Rancher's own name
// filter; the answer is matched by exact name all the same.
func (c *v3) findCluster(ctx context.Context, name string) (*rcluster, error) {
	var list collection[rcluster]
	q := url.Values{"filter": {"name=" + name}, "name": {name}}
	if err := c.call(ctx, "GET", "/v3/clusters", q, nil, &list); err != nil {
		return nil, err
	}
	var found []rcluster
	for _, cl := range list.Data {
		if cl.Name == name {
			found = append(found, cl)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return &found[0], nil
	}
	ids := make([]string, len(found))
	for i, cl := range found {
		ids[i] = cl.ID
	}
	return nil, fmt.Errorf("multiple Rancher clusters named '%s' (%s); rename one to disambiguate", name, strings.Join(ids, ", "))
}

// createImportCluster registers an imported cluster named name.
func (c *v3) createImportCluster(ctx context.Context, name string) (*rcluster, error) {
	var cl rcluster
	if err := c.call(ctx, "POST", "/v3/clusters", nil, map[string]any{"type": "cluster", "name": name}, &cl); err != nil {
		return nil, err
	}
	if cl.ID == "" {
		return nil, fmt.Errorf("POST /v3/clusters answered a cluster without an id")
	}
	return &cl, nil
}

func (c *v3) getCluster(ctx context.Context, id string) (*rcluster, error) {
	var cl rcluster
	if err := c.call(ctx, "GET", "/v3/clusters/"+url.PathEscape(id), nil, nil, &cl); err != nil {
		return nil, err
	}
	return &cl, nil
}

func (c *v3) deleteCluster(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v3/clusters/"+url.PathEscape(id), nil, nil, nil)
}

// waitNamespace polls the cluster until Rancher made its backing
// namespace, at most timeout.
func (c *v3) waitNamespace(ctx context.Context, id string, timeout, poll time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cl, err := c.getCluster(ctx, id)
		if err != nil {
			return err
		}
		if cl.namespaceReady() {
			return nil
		}
		if time.Now().Add(poll).After(deadline) {
			return fmt.Errorf("timed out waiting for namespace of cluster %s to be created", id)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// registrationToken makes a registration token for the cluster and
// returns the last one Rancher lists for it.
func (c *v3) registrationToken(ctx context.Context, id string) (regToken, error) {
	body := map[string]any{"type": "clusterRegistrationToken", "clusterId": id}
	if err := c.call(ctx, "POST", "/v3/clusterRegistrationTokens", nil, body, nil); err != nil {
		return regToken{}, err
	}
	var list collection[regToken]
	if err := c.call(ctx, "GET", "/v3/clusters/"+url.PathEscape(id)+"/clusterRegistrationTokens", nil, nil, &list); err != nil {
		return regToken{}, err
	}
	if len(list.Data) == 0 {
		return regToken{}, fmt.Errorf("no registration token for cluster %s", id)
	}
	return list.Data[len(list.Data)-1], nil
}

// manifestURL is the import manifest's URL in a registration command:
// its first word that, without trailing quotes, starts with https:// and
// ends with .yaml; "" when there is none.
func manifestURL(command string) string {
	for _, word := range strings.Fields(command) {
		word = strings.TrimRight(word, `'"`)
		if strings.HasPrefix(word, "https://") && strings.HasSuffix(word, ".yaml") {
			return word
		}
	}
	return ""
}

// importManifest returns the import manifest of the cluster: its
// registration token's command names where Rancher serves it, which must
// be the configured Rancher's origin. The URL holds the registration
// token: it is never shown.
func (c *v3) importManifest(ctx context.Context, id string) ([]byte, error) {
	tok, err := c.registrationToken(ctx, id)
	if err != nil {
		return nil, err
	}
	raw := manifestURL(tok.Command)
	if raw == "" {
		raw = manifestURL(tok.InsecureCommand)
	}
	if raw == "" {
		return nil, fmt.Errorf("the registration token of cluster %s names no import manifest URL", id)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("the registration token of cluster %s names an import manifest URL that does not parse", id)
	}
	if !origin(u, c.base) {
		return nil, fmt.Errorf("the import manifest of cluster %s is served at %s://%s, not by the Rancher at %s; refusing to fetch it with the token",
			id, u.Scheme, u.Host, c.base.Host)
	}
	// The path holds the registration token: errors name a placeholder.
	data, err := c.send(ctx, "GET", u.EscapedPath(), nil, nil, maxManifest)
	if err != nil {
		text := strings.ReplaceAll(err.Error(), u.EscapedPath(), "/v3/import/<token>.yaml")
		if file := path.Base(u.Path); len(file) > len(".yaml") {
			text = strings.ReplaceAll(text, strings.TrimSuffix(file, ".yaml"), "<token>")
		}
		return nil, fmt.Errorf("fetching the import manifest of cluster %s failed: %s", id, text)
	}
	return data, nil
}

// principalStem is the user name a principal id carries: after the last
// "//", before the first ",", after the last "=". ldap://uid=alice,ou=x
// and local://alice both give alice.
func principalStem(id string) string {
	if i := strings.LastIndex(id, "//"); i >= 0 {
		id = id[i+2:]
	}
	if i := strings.Index(id, ","); i >= 0 {
		id = id[:i]
	}
	if i := strings.LastIndex(id, "="); i >= 0 {
		id = id[i+1:]
	}
	return id
}

// memberStem is the name searched for a configured member: what comes
// before any "@" (alice@example.org is alice).
func memberStem(name string) string {
	if i := strings.Index(name, "@"); i >= 0 {
		return name[:i]
	}
	return name
}

// pickPrincipal returns the first user principal with an id whose stem is
// exactly stem: prefix matches, groups and principals without an id
// never count.
func pickPrincipal(stem string, found []principal) (principal, bool) {
	for _, p := range found {
		if p.PrincipalType == "user" && p.ID != "" && principalStem(p.ID) == stem {
			return p, true
		}
	}
	return principal{}, false
}

// resolvePrincipal searches Rancher for the member's user principal; ok
// is false when none matches exactly.
func (c *v3) resolvePrincipal(ctx context.Context, member string) (string, bool, error) {
	stem := memberStem(member)
	var list collection[principal]
	if err := c.call(ctx, "POST", "/v3/principals?action=search", nil, map[string]any{"name": stem}, &list); err != nil {
		return "", false, err
	}
	p, ok := pickPrincipal(stem, list.Data)
	return p.ID, ok, nil
}

func (c *v3) listBindings(ctx context.Context, clusterID string) ([]binding, error) {
	var list collection[binding]
	if err := c.call(ctx, "GET", "/v3/clusterroletemplatebindings", url.Values{"clusterId": {clusterID}}, nil, &list); err != nil {
		return nil, err
	}
	return list.Data, nil
}

func (c *v3) addMember(ctx context.Context, clusterID, principalID, role string) error {
	body := map[string]any{"clusterId": clusterID, "userPrincipalId": principalID, "roleTemplateId": role}
	return c.call(ctx, "POST", "/v3/clusterroletemplatebindings", nil, body, nil)
}

func (c *v3) removeBinding(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v3/clusterroletemplatebindings/"+url.PathEscape(id), nil, nil, nil)
}
