package rancher

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// The Python tool's principal resolution tests (test_rancher_client.py).
func TestPickPrincipal(t *testing.T) {
	user := func(id string) principal { return principal{ID: id, PrincipalType: "user"} }
	group := func(id string) principal { return principal{ID: id, PrincipalType: "group"} }
	for _, tc := range []struct {
		name, member string
		found        []principal
		want         string
	}{
		{"exact id match", "alice", []principal{user("ldap_user://uid=alice,ou=People,dc=x")}, "ldap_user://uid=alice,ou=People,dc=x"},
		{"the exact match wins when not first", "alice", []principal{user("ldap_user://uid=alice2,ou=People"), user("ldap_user://uid=alice,ou=People")}, "ldap_user://uid=alice,ou=People"},
		{"a user wins over a group", "alice", []principal{group("ldap_group://cn=alice,ou=Groups"), user("ldap_user://uid=alice,ou=People")}, "ldap_user://uid=alice,ou=People"},
		{"a prefix match is rejected", "ali", []principal{user("ldap_user://uid=alice,ou=People")}, ""},
		{"no match", "carol", nil, ""},
		{"misspelled", "alcie", []principal{user("ldap_user://uid=alice,ou=People")}, ""},
		{"an email suffix is stripped", "alice@example.org", []principal{user("local://alice")}, "local://alice"},
		{"principals without an id are skipped", "alice", []principal{{PrincipalType: "user"}, user("local://alice")}, "local://alice"},
		{"a local user's generated id is not its login", "bob", []principal{user("local://u-x7k2p")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pickPrincipal(memberStem(tc.member), tc.found)
			if got.ID != tc.want || ok != (tc.want != "") {
				t.Errorf("pickPrincipal(%q) = %q, %v; want %q", tc.member, got.ID, ok, tc.want)
			}
		})
	}
}

func TestPrincipalStem(t *testing.T) {
	for id, want := range map[string]string{
		"ldap://uid=alice,ou=People,dc=example,dc=org":        "alice",
		"openldap_user://uid=bob,ou=People,dc=example,dc=org": "bob",
		"local://alice": "alice",
		"activedirectory_user://CN=carol,OU=Users,DC=corp,DC=io": "carol",
		"github_user://12345": "12345",
	} {
		if got := principalStem(id); got != want {
			t.Errorf("principalStem(%q) = %q, want %q", id, got, want)
		}
	}
}

// The Python tool's _error_detail tests, every detail cut to 300
// characters.
func TestErrorDetail(t *testing.T) {
	long := strings.Repeat("x", 400)
	cut := long[:299] + "…"
	for _, tc := range []struct{ name, body, want string }{
		{"a string message kept whole", `{"message":"cluster name not unique: a long explanation"}`, "cluster name not unique: a long explanation"},
		{"a long string message is cut", `{"message":"` + long + `"}`, cut},
		{"a long list message is cut", `{"message":["` + long[:200] + `","` + long[:200] + `"]}`, (long[:200] + "; " + long[:200])[:299] + "…"},
		{"long errors are cut", `{"errors":[{"message":"` + long + `"}]}`, cut},
		{"a message of exactly 300 characters is whole", `{"message":"` + long[:300] + `"}`, long[:300]},
		{"characters, not bytes", `{"message":"` + strings.Repeat("é", 400) + `"}`, strings.Repeat("é", 299) + "…"},
		{"a list message joined", `{"message":["a","","b"]}`, "a; b"},
		{"errors dicts joined", `{"errors":[{"message":"x"},{"message":""},{"message":"y"}]}`, "x; y"},
		{"an empty object is its text", `{}`, "{}"},
		{"a non-JSON body is its text", "Bad Gateway", "Bad Gateway"},
		{"a long body is cut to 300 characters", long, cut},
		{"Rancher's error shape", `{"type":"error","status":"404","code":"NotFound","message":"clusters \"c-1\" not found"}`, `clusters "c-1" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := detail([]byte(tc.body), nil); got != tc.want {
				t.Errorf("detail(%q) = %q, want %q", tc.body, got, tc.want)
			}
		})
	}
	// A secret where the cut falls is redacted whole before the cut.
	secret := "s3cr3t-registration-token"
	body := `{"message":"` + long[:285] + secret + `"}`
	if got := detail([]byte(body), []string{"", secret}); strings.Contains(got, "s3cr3t") || got != long[:285]+"<redacted>" {
		t.Errorf("a secret at the cut: %q", got)
	}
}

// Another cluster's rows in a binding list that was not filtered are
// dropped, and so are rows naming no cluster.
func TestBindingsOf(t *testing.T) {
	list := []binding{{ID: "c-1:a", ClusterID: "c-1"}, {ID: "c-2:b", ClusterID: "c-2"}, {ID: "x"}, {ID: "c-1:c", ClusterID: "c-1"}, {ID: "c-10:d", ClusterID: "c-10"}}
	var got []string
	for _, b := range bindingsOf("c-1", list) {
		got = append(got, b.ID)
	}
	if want := []string{"c-1:a", "c-1:c"}; !slices.Equal(got, want) {
		t.Errorf("bindingsOf = %v, want %v", got, want)
	}
}

// Where the import manifest is fetched: Rancher's origin (under its
// path prefix too) or another https origin; never plain http, another
// scheme, or a URL with a user. Errors and names never show the
// registration token.
func TestManifestTarget(t *testing.T) {
	base, _ := url.Parse("https://rancher.example.org/rancher")
	const file = "tok3n5ecret0123456789_c-abc12.yaml"
	for _, tc := range []struct {
		name, raw string
		same      bool
		refused   string
		shown     string
	}{
		{"same origin", "https://rancher.example.org/v3/import/" + file, true, "", "/v3/import/<token>.yaml"},
		{"same origin under a prefix, kept as is", "https://rancher.example.org/rancher/v3/import/" + file, true, "", "/rancher/v3/import/<token>.yaml"},
		{"the default port is the same origin", "https://RANCHER.example.org:443/v3/import/" + file, true, "", "/v3/import/<token>.yaml"},
		{"another name", "https://rancher.internal/v3/import/" + file, false, "", "https://rancher.internal/v3/import/<token>.yaml"},
		{"another port", "https://rancher.example.org:8443/v3/import/" + file, false, "", "https://rancher.example.org:8443/v3/import/<token>.yaml"},
		{"plain http", "http://rancher.example.org/v3/import/" + file, false, "not https", ""},
		{"another scheme", "ftp://rancher.internal/v3/import/" + file, false, "not https", ""},
		{"a user", "https://u:p@rancher.internal/v3/import/" + file, false, "with a user", ""},
		{"no host", "https:///v3/import/" + file, false, "without a host", ""},
		{"does not parse", "https://rancher.internal/%zz/" + file, false, "does not parse", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, same, err := manifestTarget(tc.raw, base)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) || strings.Contains(err.Error(), "tok3n") {
					t.Fatalf("manifestTarget(%s) = %v, want a refusal saying %q", tc.raw, err, tc.refused)
				}
				return
			}
			if err != nil || same != tc.same || u.String() != tc.raw {
				t.Fatalf("manifestTarget(%s) = %v, %v, %v", tc.raw, u, same, err)
			}
			if got := manifestName(u, same); got != tc.shown {
				t.Errorf("manifestName = %q, want %q", got, tc.shown)
			}
			if secrets := manifestSecrets(u); !slices.Contains(secrets, "tok3n5ecret0123456789") || !slices.Contains(secrets, "tok3n5ecret0123456789_c-abc12") {
				t.Errorf("manifestSecrets = %v", secrets)
			}
		})
	}
}

// The agent's identity: the id its credentials name, else the id of the
// Rancher cluster of the name one of whose registration tokens is the
// agent's, else none.
func TestAgentIdentity(t *testing.T) {
	reg := []string{"tok-default-0123456789", "tok-crt-abcdefghij"}
	for _, tc := range []struct {
		name      string
		creds     agentCreds
		clusterID string
		regTokens []string
		want      string
	}{
		{"namespace set", agentCreds{id: "c-abc12"}, "c-abc12", reg, "c-abc12"},
		{"namespace set, another cluster's", agentCreds{id: "c-other"}, "c-abc12", reg, "c-other"},
		{"namespace set, tokens too: the namespace wins", agentCreds{id: "c-other", tokens: []string{"tok-crt-abcdefghij"}}, "c-abc12", reg, "c-other"},
		{"empty namespace, matching token", agentCreds{tokens: []string{"tok-crt-abcdefghij"}}, "c-abc12", reg, "c-abc12"},
		{"empty namespace, one of several tokens matches", agentCreds{tokens: []string{"tok-gone", "tok-default-0123456789"}}, "c-abc12", reg, "c-abc12"},
		{"empty namespace, no token matches", agentCreds{tokens: []string{"tok-other-cluster"}}, "c-abc12", reg, ""},
		{"empty namespace, a token's prefix is no match", agentCreds{tokens: []string{"tok-crt-abcdefghi"}}, "c-abc12", reg, ""},
		{"empty namespace, no Rancher cluster of the name", agentCreds{tokens: []string{"tok-crt-abcdefghij"}}, "", nil, ""},
		{"empty namespace, the cluster has no tokens", agentCreds{tokens: []string{"tok-crt-abcdefghij"}}, "c-abc12", nil, ""},
		{"empty namespace, empty tokens never match", agentCreds{tokens: []string{""}}, "c-abc12", []string{""}, ""},
		{"empty namespace, no token", agentCreds{}, "c-abc12", reg, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentIdentity(tc.creds, tc.clusterID, tc.regTokens); got != tc.want {
				t.Errorf("agentIdentity = %q, want %q", got, tc.want)
			}
		})
	}
}

// The Python tool's ensure_cluster decisions, and destroy's.
func TestDecideCluster(t *testing.T) {
	ours := &rcluster{ID: "c-abc12", Name: "example", State: "active"}
	pending := &rcluster{ID: "c-pend1", Name: "example", State: "pending"}
	for _, tc := range []struct {
		name    string
		found   *rcluster
		agentID string
		want    decision
		says    []string
	}{
		{"no cluster, no agent: register", nil, "", register, nil},
		{"ids match: reuse", ours, "c-abc12", reuse, nil},
		{"another id: refuse", ours, "c-other", refuse, []string{"does not match the downstream", "c-abc12", "c-other"}},
		{"pending without agent: recover", pending, "", reuse, nil},
		{"active without agent: refuse", ours, "", refuse, []string{"already exists", "c-abc12", "no Rancher agent"}},
		{"agent without cluster: orphan", nil, "c-old", refuse, []string{"no Rancher cluster named 'example'", "c-old", "cattle-system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := decideCluster("example", tc.found, tc.agentID)
			if got != tc.want {
				t.Fatalf("decision %v, want %v (%s)", got, tc.want, reason)
			}
			for _, s := range tc.says {
				if !strings.Contains(reason, s) {
					t.Errorf("the reason %q does not say %q", reason, s)
				}
			}
		})
	}
}

func TestCheckMembers(t *testing.T) {
	ok := []member{{Name: "alice", Tier: "admins", Principal: "p://alice"}, {Name: "bob", Tier: "users", Principal: "p://bob"}}
	if err := checkMembers(ok); err != nil {
		t.Errorf("resolved members: %v", err)
	}
	missing := []member{{Name: "alice", Tier: "admins", Principal: "p://alice"}, {Name: "carol", Tier: "users"}, {Name: "dave", Tier: "admins"}}
	if err := checkMembers(missing); err == nil || !strings.Contains(err.Error(), "could not resolve Rancher principals") ||
		!strings.Contains(err.Error(), "'carol' (tier users)") || !strings.Contains(err.Error(), "'dave' (tier admins)") {
		t.Errorf("unresolved members: %v", err)
	}
	alias := []member{{Name: "alice", Tier: "admins", Principal: "p://alice"}, {Name: "alice@example.org", Tier: "users", Principal: "p://alice"}}
	if err := checkMembers(alias); err == nil || !strings.Contains(err.Error(), "both resolve to the same Rancher principal") {
		t.Errorf("one principal in two tiers: %v", err)
	}
}

func TestMembersOf(t *testing.T) {
	got := membersOf(map[string]any{"admins": []any{" alice ", "", "alice"}, "users": []any{"bob", "alice"}})
	var names []string
	for _, m := range got {
		names = append(names, m.Name+"/"+m.Role)
	}
	if want := []string{"alice/cluster-owner", "bob/cluster-member", "alice/cluster-member"}; !slices.Equal(names, want) {
		t.Errorf("membersOf = %v, want %v", names, want)
	}
}

// The Python tool's ensure_members tests: adds, stale removals, role
// corrections; group and creator-owner bindings are never touched.
func TestReconcileBindings(t *testing.T) {
	const cid = "c-abc12"
	owner := binding{ID: cid + ":creator-cluster-owner", UserPrincipalID: "local://u-admin", RoleTemplateID: RoleOwner}
	group := binding{ID: cid + ":crtb-g", GroupPrincipalID: "ldap_group://ops", RoleTemplateID: RoleMember}
	alice := member{Name: "alice", Tier: "admins", Role: RoleOwner, Principal: "ldap_user://alice"}
	carol := member{Name: "carol", Tier: "users", Role: RoleMember, Principal: "ldap_user://carol"}
	aliceOwner := binding{ID: cid + ":crtb-a", UserPrincipalID: "ldap_user://alice", RoleTemplateID: RoleOwner}
	dave := binding{ID: cid + ":crtb-d", UserPrincipalID: "ldap_user://dave", RoleTemplateID: RoleMember}
	carolOwner := binding{ID: cid + ":crtb-c", UserPrincipalID: "ldap_user://carol", RoleTemplateID: RoleOwner}
	describe := func(chs []memberChange) []string {
		var out []string
		for _, ch := range chs {
			switch {
			case ch.Add:
				out = append(out, "add "+ch.Member.Name+" "+ch.Member.Role)
			case ch.Correct:
				out = append(out, "correct "+ch.Binding.ID)
			default:
				out = append(out, "remove "+ch.Binding.ID)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		members  []member
		bindings []binding
		want     []string
	}{
		{"a new member is added, nothing removed", []member{alice, carol}, []binding{owner, aliceOwner}, []string{"add carol cluster-member"}},
		{"everything matches", []member{alice, carol}, []binding{owner, group, aliceOwner, {ID: "x", UserPrincipalID: "ldap_user://carol", RoleTemplateID: RoleMember}}, nil},
		{"a stale member is removed", []member{alice}, []binding{owner, group, aliceOwner, dave}, []string{"remove " + dave.ID}},
		{"the owner binding is never pruned", []member{alice, carol}, []binding{owner}, []string{"add alice cluster-owner", "add carol cluster-member"}},
		{"a wrong role is corrected", []member{alice, carol}, []binding{owner, aliceOwner, carolOwner}, []string{"add carol cluster-member", "correct " + carolOwner.ID}},
		{"a creator who is an admin needs no binding", []member{{Name: "admin", Role: RoleOwner, Principal: "local://u-admin"}}, []binding{owner}, nil},
		{"a fresh cluster: only adds", []member{alice, carol}, nil, []string{"add alice cluster-owner", "add carol cluster-member"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(reconcileBindings(cid, tc.members, tc.bindings)); !slices.Equal(got, tc.want) {
				t.Errorf("changes %v, want %v", got, tc.want)
			}
		})
	}
}

func TestManifestURL(t *testing.T) {
	for cmd, want := range map[string]string{
		"kubectl apply -f https://r.example/v3/import/tok_c-1.yaml":                          "https://r.example/v3/import/tok_c-1.yaml",
		"curl --insecure -sfL https://r.example/v3/import/tok_c-1.yaml | kubectl apply -f -": "https://r.example/v3/import/tok_c-1.yaml",
		`kubectl apply -f "https://r.example/v3/import/tok_c-1.yaml"`:                        "",
		"kubectl apply -f https://r.example/v3/import/tok_c-1.yaml'":                         "https://r.example/v3/import/tok_c-1.yaml",
		"kubectl apply -f http://r.example/v3/import/tok_c-1.yaml":                           "",
		"": "",
	} {
		if got := manifestURL(cmd); got != want {
			t.Errorf("manifestURL(%q) = %q, want %q", cmd, got, want)
		}
	}
}

// The Python tool's destroy tests (test_rancher_destroy.py), and a
// registration of the name on a cluster never built.
func TestPlanTeardown(t *testing.T) {
	ours := &rcluster{ID: "c-abc12", Name: "example", State: "active"}
	for _, tc := range []struct {
		name string
		st   state
		want []string
		says string
	}{
		{"ids match: the cluster, then the agent", state{cluster: ours, kubeconfig: true, agentID: "c-abc12"},
			[]string{"delete rancher-cluster", "delete rancher-agent"}, ""},
		{"another id: refused", state{cluster: ours, kubeconfig: true, agentID: "c-other"},
			[]string{"wait rancher-cluster"}, "does not match the downstream cluster (c-other)"},
		{"no agent: refused", state{cluster: ours, kubeconfig: true},
			[]string{"wait rancher-cluster"}, "no cattle-cluster-agent"},
		{"never built: kept", state{cluster: ours},
			[]string{"refuse rancher-cluster"}, "never built"},
		{"an orphaned agent: only the agent", state{kubeconfig: true, agentID: "c-old"},
			[]string{"delete rancher-agent"}, "c-old"},
		{"nothing registered", state{kubeconfig: true}, nil, ""},
		{"agent unreadable, machines gone: kept", state{cluster: ours, kubeconfig: true, agentUnknown: "connection refused"},
			[]string{"refuse rancher-cluster"}, "Rancher cluster 'example' (c-abc12) is kept: the cluster's Rancher agent could not be read (connection refused) and the cluster has no machines left"},
		{"agent unreadable, machines left: fails", state{cluster: ours, kubeconfig: true, agentUnknown: "connection refused", machines: 3},
			[]string{"wait rancher-cluster"}, "could not be read (connection refused)"},
		{"agent unreadable, nothing registered, machines gone", state{kubeconfig: true, agentUnknown: "connection refused"}, nil, ""},
		{"agent unreadable, nothing registered, machines left: fails", state{kubeconfig: true, agentUnknown: "connection refused", machines: 1},
			[]string{"wait rancher-agent"}, "could not be read (connection refused)"},
		{"never built, whatever the machine count: kept", state{cluster: ours, machines: 2},
			[]string{"refuse rancher-cluster"}, "never built"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			st.name = "example"
			chs, err := (&Plugin{}).PlanTeardown(nil, &st)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ch := range chs {
				got = append(got, string(ch.Action)+" "+string(ch.Resource.Kind))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("steps %v, want %v", got, tc.want)
			}
			if len(chs) == 0 {
				return
			}
			if tc.says != "" && !strings.Contains(chs[0].Reason, tc.says) {
				t.Errorf("the reason %q does not say %q", chs[0].Reason, tc.says)
			}
			if op, ok := chs[0].Op.(failTeardown); ok {
				if _, err := (&Plugin{}).Apply(t.Context(), reconcile.PluginEnv{Cluster: &spec.Cluster{}}, chs[0]); err == nil || !strings.Contains(err.Error(), op.reason) {
					t.Errorf("the refused teardown's step: %v", err)
				}
			}
		})
	}
}
