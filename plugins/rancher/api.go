package rancher

import (
	"context"
	"errors"
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
	ClusterID        string `json:"clusterId"`
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

// regToken is a cluster registration token's commands and its value
// (the token field): a secret, never shown.
type regToken struct {
	Command         string `json:"command"`
	InsecureCommand string `json:"insecureCommand"`
	Token           string `json:"token"`
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

// registrationTokens returns the values (the token field) of the
// cluster's registration tokens. They are secrets: never shown.
func (c *v3) registrationTokens(ctx context.Context, id string) ([]string, error) {
	var list collection[regToken]
	if err := c.call(ctx, "GET", "/v3/clusters/"+url.PathEscape(id)+"/clusterRegistrationTokens", nil, nil, &list); err != nil {
		return nil, fmt.Errorf("reading the registration tokens of Rancher cluster %s: %w", id, err)
	}
	var out []string
	for _, t := range list.Data {
		if t.Token != "" {
			out = append(out, t.Token)
		}
	}
	return out, nil
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
// registration token's command names where Rancher serves it. At
// Rancher's own origin it is fetched as the API is; at another (Rancher's
// server-url naming another name than rancher.url) it is fetched without
// the token, which it does not need: the registration token in its path
// is the credential. The URL holds that registration token: it is never
// shown.
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
	u, same, err := manifestTarget(raw, c.base)
	if err != nil {
		return nil, fmt.Errorf("the registration token of cluster %s names %w", id, err)
	}
	r := request{method: "GET", name: manifestName(u, same), target: u, limit: maxManifest, secrets: manifestSecrets(u)}
	hc := c.http
	if same {
		r.bearer = true
	} else {
		hc = c.elsewhere()
	}
	data, err := c.do(ctx, hc, r)
	if err != nil {
		return nil, fmt.Errorf("fetching the import manifest of cluster %s failed: %w", id, err)
	}
	return data, nil
}

// manifestTarget parses the import manifest's URL and says whether it is
// at base's origin. Only an https URL is fetched. Errors never quote the
// URL: it holds the registration token.
func manifestTarget(raw string, base *url.URL) (*url.URL, bool, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, false, errors.New("an import manifest URL that does not parse")
	}
	if !strings.EqualFold(u.Scheme, "https") {
		return nil, false, fmt.Errorf("an import manifest URL that is not https (%q); refusing to fetch it", u.Scheme)
	}
	if u.Host == "" || u.User != nil {
		return nil, false, errors.New("an import manifest URL without a host, or with a user; refusing to fetch it")
	}
	u.Fragment = ""
	return u, origin(u, base), nil
}

// manifestName is how errors name the manifest's URL: its path with the
// file that holds the registration token replaced, and its origin when
// it is not Rancher's.
func manifestName(u *url.URL, same bool) string {
	name := strings.TrimSuffix(path.Dir(u.Path), "/") + "/<token>.yaml"
	if same {
		return name
	}
	return "https://" + u.Host + name
}

// manifestSecrets are the parts of the manifest's URL errors must not
// show: its file's name (<token>_<cluster id>) and the registration
// token in it.
func manifestSecrets(u *url.URL) []string {
	stem := strings.TrimSuffix(path.Base(u.Path), ".yaml")
	out := []string{stem}
	if i := strings.LastIndex(stem, "_"); i > 0 {
		out = append(out, stem[:i])
	}
	if esc := strings.TrimSuffix(path.Base(u.EscapedPath()), ".yaml"); esc != stem {
		out = append(out, esc)
	}
	return out
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

// listBindings returns the cluster's bindings. Rancher filters the list
// by clusterId; it is filtered here again, so that a Rancher or proxy
// that drops the filter never shows another cluster's bindings as stale.
func (c *v3) listBindings(ctx context.Context, clusterID string) ([]binding, error) {
	var list collection[binding]
	if err := c.call(ctx, "GET", "/v3/clusterroletemplatebindings", url.Values{"clusterId": {clusterID}}, nil, &list); err != nil {
		return nil, err
	}
	return bindingsOf(clusterID, list.Data), nil
}

// bindingsOf returns the bindings whose clusterId is exactly clusterID;
// one without a clusterId is left out too.
func bindingsOf(clusterID string, list []binding) []binding {
	var out []binding
	for _, b := range list {
		if b.ClusterID == clusterID {
			out = append(out, b)
		}
	}
	return out
}

func (c *v3) addMember(ctx context.Context, clusterID, principalID, role string) error {
	body := map[string]any{"clusterId": clusterID, "userPrincipalId": principalID, "roleTemplateId": role}
	return c.call(ctx, "POST", "/v3/clusterroletemplatebindings", nil, body, nil)
}

func (c *v3) removeBinding(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v3/clusterroletemplatebindings/"+url.PathEscape(id), nil, nil, nil)
}
