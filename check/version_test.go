package check

import (
	"slices"
	"testing"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Version
		ok   bool
	}{
		{"v1.13.8", Version{1, 13, 8, ""}, true},
		{"1.36.1", Version{1, 36, 1, ""}, true},
		{" v1.36.1 ", Version{1, 36, 1, ""}, true},
		{"v1.14.0-beta.0", Version{1, 14, 0, "beta.0"}, true},
		{"v1.38.0-alpha.1", Version{1, 38, 0, "alpha.1"}, true},
		{"v1.30.0-rc.1+build.5", Version{1, 30, 0, "rc.1"}, true},
		{"v1.30.2+k3s1", Version{1, 30, 2, ""}, true},
		{"v1.13", Version{}, false},
		{"1.13.8.1", Version{}, false},
		{"vv1.2.3", Version{}, false},
		{"v1.2.3-", Version{}, false},
		{"release-1.36", Version{}, false},
		{"", Version{}, false},
		{"v1234567890.0.0", Version{}, false},
	}
	for _, c := range cases {
		got, ok := ParseVersion(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseVersion(%q) = %+v, %v; want %+v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	if s := (Version{1, 14, 0, "beta.0"}).String(); s != "v1.14.0-beta.0" {
		t.Errorf("String = %q", s)
	}
}

// TestVersionOrder sorts a shuffled list into semantic-versioning order:
// prereleases before their release, numeric identifiers numerically.
func TestVersionOrder(t *testing.T) {
	t.Parallel()
	want := []string{
		"v1.9.9", "v1.10.0-alpha.1", "v1.10.0-alpha.2", "v1.10.0-alpha.10", "v1.10.0-alpha.beta",
		"v1.10.0-beta", "v1.10.0-beta.2", "v1.10.0-rc.1", "v1.10.0", "v1.10.1", "v1.10.10", "v2.0.0",
	}
	shuffled := []string{"v1.10.10", "v1.10.0-beta", "v2.0.0", "v1.10.0-alpha.10", "v1.10.0", "v1.9.9",
		"v1.10.0-rc.1", "v1.10.0-alpha.beta", "v1.10.0-alpha.1", "v1.10.1", "v1.10.0-beta.2", "v1.10.0-alpha.2"}
	var vs []Version
	for _, s := range shuffled {
		v, ok := ParseVersion(s)
		if !ok {
			t.Fatalf("ParseVersion(%q) failed", s)
		}
		vs = append(vs, v)
	}
	slices.SortFunc(vs, Version.Compare)
	var got []string
	for _, v := range vs {
		got = append(got, v.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("order:\n got %v\nwant %v", got, want)
	}
	a, _ := ParseVersion("1.2.3")
	b, _ := ParseVersion("v1.2.3+meta")
	if a.Compare(b) != 0 {
		t.Error("build metadata or a missing v changes the order")
	}
}

func TestParseMinorAndRange(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Minor{"v1.31": {1, 31}, "1.36": {1, 36}} {
		if got, ok := ParseMinor(in); !ok || got != want {
			t.Errorf("ParseMinor(%q) = %v, %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "v1", "v1.x", "a.b", "v-1.2"} {
		if _, ok := ParseMinor(bad); ok {
			t.Errorf("ParseMinor(%q) accepted", bad)
		}
	}
	r := Range{From: Minor{1, 31}, To: Minor{1, 36}}
	for m, in := range map[Minor]bool{{1, 30}: false, {1, 31}: true, {1, 36}: true, {1, 37}: false, {2, 33}: false, {0, 33}: false} {
		if r.Contains(m) != in {
			t.Errorf("%s contains %s = %v, want %v", r, m, !in, in)
		}
	}
}

// TestIndex: drafts, prereleases (flagged or by version) and tags that are
// not versions are left out; the rest is ordered and counted.
func TestIndex(t *testing.T) {
	t.Parallel()
	ix := NewIndex([]Release{
		{Tag: "v1.36.3"}, {Tag: "v1.36.1"}, {Tag: "v1.36.0"}, {Tag: "v1.36.2"},
		{Tag: "v1.37.0"}, {Tag: "v1.37.1"},
		{Tag: "v1.35.9"},
		{Tag: "v1.36.4", Draft: true},
		{Tag: "v1.38.0", Prerelease: true},
		{Tag: "v1.38.0-alpha.1"},
		{Tag: "v1.36.3"}, // listed twice
		{Tag: "nightly"},
	})
	var got []string
	for _, v := range ix.Versions() {
		got = append(got, v.String())
	}
	want := []string{"v1.35.9", "v1.36.0", "v1.36.1", "v1.36.2", "v1.36.3", "v1.37.0", "v1.37.1"}
	if !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	v := func(s string) Version { x, _ := ParseVersion(s); return x }
	if l, _ := ix.Latest(); l.String() != "v1.37.1" {
		t.Errorf("Latest = %s", l)
	}
	if l, _ := ix.LatestPatch(Minor{1, 36}); l.String() != "v1.36.3" {
		t.Errorf("LatestPatch(1.36) = %s", l)
	}
	if _, ok := ix.LatestPatch(Minor{1, 38}); ok {
		t.Error("LatestPatch(1.38) found a prerelease line")
	}
	if l, _ := ix.LatestWithin(Range{Minor{1, 31}, Minor{1, 36}}); l.String() != "v1.36.3" {
		t.Errorf("LatestWithin(1.31-1.36) = %s", l)
	}
	for pin, behind := range map[string]int{"v1.36.0": 3, "v1.36.1": 2, "v1.36.3": 0, "v1.36.9": 0, "v1.37.0": 1, "v1.34.0": 0, "v1.35.1": 1} {
		if n := ix.PatchesBehind(v(pin)); n != behind {
			t.Errorf("PatchesBehind(%s) = %d, want %d", pin, n, behind)
		}
	}
	if lines := ix.LinesAfter(Minor{1, 35}); !slices.Equal(lines, []Minor{{1, 36}, {1, 37}}) {
		t.Errorf("LinesAfter(1.35) = %v", lines)
	}
	if !ix.Contains(v("v1.36.2")) || ix.Contains(v("v1.36.4")) || ix.Contains(v("v1.38.0-alpha.1")) {
		t.Error("Contains is wrong")
	}
	if _, ok := (Index{}).Latest(); ok {
		t.Error("an empty index has a latest release")
	}
}
