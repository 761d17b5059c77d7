package kube

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestJSONPatch(t *testing.T) {
	t.Parallel()
	doc := `{"a":{"b":1,"c/d":2,"e~f":3},"l":[1,2,3]}`
	cases := []struct {
		name, patch, want string
		fails             bool
	}{
		{"add member", `[{"op":"add","path":"/a/x","value":"y"}]`, `{"a":{"b":1,"c/d":2,"e~f":3,"x":"y"},"l":[1,2,3]}`, false},
		{"add to array", `[{"op":"add","path":"/l/1","value":9}]`, `{"a":{"b":1,"c/d":2,"e~f":3},"l":[1,9,2,3]}`, false},
		{"append", `[{"op":"add","path":"/l/-","value":4}]`, `{"a":{"b":1,"c/d":2,"e~f":3},"l":[1,2,3,4]}`, false},
		{"escaped keys", `[{"op":"remove","path":"/a/c~1d"},{"op":"replace","path":"/a/e~0f","value":0}]`, `{"a":{"b":1,"e~f":0},"l":[1,2,3]}`, false},
		{"remove element", `[{"op":"remove","path":"/l/0"}]`, `{"a":{"b":1,"c/d":2,"e~f":3},"l":[2,3]}`, false},
		{"move", `[{"op":"move","from":"/a/b","path":"/z"}]`, `{"a":{"c/d":2,"e~f":3},"l":[1,2,3],"z":1}`, false},
		{"copy", `[{"op":"copy","from":"/l","path":"/m"}]`, `{"a":{"b":1,"c/d":2,"e~f":3},"l":[1,2,3],"m":[1,2,3]}`, false},
		{"test passes", `[{"op":"test","path":"/a/b","value":1}]`, doc, false},
		{"test fails", `[{"op":"test","path":"/a/b","value":2}]`, "", true},
		{"replace missing", `[{"op":"replace","path":"/a/q","value":2}]`, "", true},
		{"remove missing", `[{"op":"remove","path":"/l/7"}]`, "", true},
		{"bad pointer", `[{"op":"add","path":"a","value":1}]`, "", true},
		{"unknown op", `[{"op":"frob","path":"/a"}]`, "", true},
		{"no value", `[{"op":"add","path":"/a/x"}]`, "", true},
		{"not a list", `{"op":"add"}`, "", true},
	}
	for _, tc := range cases {
		ops, err := decodeJSONPatch([]byte(tc.patch))
		var out []byte
		if err == nil {
			out, err = applyJSONPatch([]byte(doc), ops)
		}
		if tc.fails {
			if err == nil {
				t.Errorf("%s: applied, want an error", tc.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !jsonEqual(t, out, []byte(tc.want)) {
			t.Errorf("%s: got %s, want %s", tc.name, out, tc.want)
		}
	}
}

func TestMergePatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, patch, want string }{
		{`{"a":1,"b":{"c":2,"d":3}}`, `{"b":{"c":null,"e":4}}`, `{"a":1,"b":{"d":3,"e":4}}`},
		{`{"a":[1,2]}`, `{"a":[3]}`, `{"a":[3]}`},
		{`{"a":1}`, `{"a":{"b":null}}`, `{"a":{}}`},
		{`{"spec":{}}`, `{"spec":{"unschedulable":true}}`, `{"spec":{"unschedulable":true}}`},
	} {
		out, err := mergePatch([]byte(tc.doc), []byte(tc.patch))
		if err != nil || !jsonEqual(t, out, []byte(tc.want)) {
			t.Errorf("merging %s into %s: %s, %v; want %s", tc.patch, tc.doc, out, err, tc.want)
		}
	}
	if _, err := mergePatch([]byte(`{}`), []byte(`{`)); err == nil {
		t.Errorf("a malformed merge patch applied")
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	t.Parallel()
	for image, want := range map[string]string{
		"i": "Always", "repo/app:latest": "Always", "registry:5000/app": "Always",
		"registry:5000/app:v1": "IfNotPresent", "app@sha256:abc": "IfNotPresent", "app:1.2": "IfNotPresent",
	} {
		if got := string(defaultPullPolicy(image)); got != want {
			t.Errorf("defaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("decoding %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}
