package check

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Version is a release version major.minor.patch with an optional
// prerelease (v1.14.0-beta.0). Build metadata (+...) is dropped.
type Version struct {
	Major, Minor, Patch int
	// Pre is the prerelease part without its "-", empty for a full
	// release.
	Pre string
}

var versionRE = regexp.MustCompile(`^v?(\d{1,9})\.(\d{1,9})\.(\d{1,9})(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$`)

// ParseVersion reads v1.2.3, 1.2.3, v1.2.3-rc.1 or v1.2.3+build.
func ParseVersion(s string) (Version, bool) {
	m := versionRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Version{}, false
	}
	var n [3]int
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1]) // at most nine digits: always fits
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Pre: m[4]}, true
}

// String writes the version with a leading "v".
func (v Version) String() string {
	s := fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	return s
}

// Prerelease reports whether v is a prerelease (alpha, beta, rc, ...).
func (v Version) Prerelease() bool { return v.Pre != "" }

// Line is the version's minor release line.
func (v Version) Line() Minor { return Minor{v.Major, v.Minor} }

// Compare orders versions the semantic-versioning way: by major, minor and
// patch, a prerelease before its release, prereleases by their
// dot-separated identifiers (numeric ones numerically, and before
// alphanumeric ones). It returns -1, 0 or +1.
func (v Version) Compare(w Version) int {
	if c := v.Line().Compare(w.Line()); c != 0 {
		return c
	}
	if v.Patch != w.Patch {
		return cmpInt(v.Patch, w.Patch)
	}
	switch {
	case v.Pre == w.Pre:
		return 0
	case v.Pre == "":
		return 1
	case w.Pre == "":
		return -1
	}
	a, b := strings.Split(v.Pre, "."), strings.Split(w.Pre, ".")
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := comparePreIdent(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmpInt(len(a), len(b))
}

func comparePreIdent(a, b string) int {
	na, aNum := numeric(a)
	nb, bNum := numeric(b)
	switch {
	case aNum && bNum:
		return cmpInt(na, nb)
	case aNum:
		return -1
	case bNum:
		return 1
	}
	return strings.Compare(a, b)
}

func numeric(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, _ := strconv.Atoi(s)
	return n, true
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Minor is a minor release line, such as 1.36.
type Minor struct{ Major, Minor int }

// ParseMinor reads v1.36 or 1.36.
func ParseMinor(s string) (Minor, bool) {
	major, minor, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".")
	if !ok {
		return Minor{}, false
	}
	a, errA := strconv.Atoi(major)
	b, errB := strconv.Atoi(minor)
	if errA != nil || errB != nil || a < 0 || b < 0 {
		return Minor{}, false
	}
	return Minor{a, b}, true
}

// String writes the line as v1.36.
func (m Minor) String() string { return fmt.Sprintf("v%d.%d", m.Major, m.Minor) }

// Compare orders release lines; it returns -1, 0 or +1.
func (m Minor) Compare(o Minor) int {
	if m.Major != o.Major {
		return cmpInt(m.Major, o.Major)
	}
	return cmpInt(m.Minor, o.Minor)
}

// Range is an inclusive range of release lines.
type Range struct{ From, To Minor }

// Contains reports whether the line m is inside the range.
func (r Range) Contains(m Minor) bool { return r.From.Compare(m) <= 0 && m.Compare(r.To) <= 0 }

// String writes the range as "v1.31 to v1.36".
func (r Range) String() string { return r.From.String() + " to " + r.To.String() }

// Index is the full releases of one component, oldest first, each once.
// Drafts, prereleases and tags that are not versions are not in it.
type Index struct {
	versions []Version
}

// NewIndex builds the index of a repository's releases.
func NewIndex(releases []Release) Index {
	var out []Version
	for _, r := range releases {
		if r.Draft || r.Prerelease {
			continue
		}
		v, ok := ParseVersion(r.Tag)
		if !ok || v.Prerelease() {
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, Version.Compare)
	return Index{versions: slices.Compact(out)}
}

// IndexOf builds an index from version strings, as NewIndex does from
// releases (for tests and callers that only have tags).
func IndexOf(tags ...string) Index {
	rels := make([]Release, len(tags))
	for i, t := range tags {
		rels[i] = Release{Tag: t}
	}
	return NewIndex(rels)
}

// Versions returns the releases, oldest first.
func (ix Index) Versions() []Version { return slices.Clone(ix.versions) }

// Len is the number of releases.
func (ix Index) Len() int { return len(ix.versions) }

// Contains reports whether v was released.
func (ix Index) Contains(v Version) bool {
	_, found := slices.BinarySearchFunc(ix.versions, v, Version.Compare)
	return found
}

// Latest returns the newest release.
func (ix Index) Latest() (Version, bool) {
	if len(ix.versions) == 0 {
		return Version{}, false
	}
	return ix.versions[len(ix.versions)-1], true
}

// LatestPatch returns the newest release of the line m.
func (ix Index) LatestPatch(m Minor) (Version, bool) {
	return ix.LatestWhere(func(v Version) bool { return v.Line() == m })
}

// LatestWithin returns the newest release whose line is inside r.
func (ix Index) LatestWithin(r Range) (Version, bool) {
	return ix.LatestWhere(func(v Version) bool { return r.Contains(v.Line()) })
}

// LatestWhere returns the newest release for which keep holds.
func (ix Index) LatestWhere(keep func(Version) bool) (Version, bool) {
	for i := len(ix.versions) - 1; i >= 0; i-- {
		if keep(ix.versions[i]) {
			return ix.versions[i], true
		}
	}
	return Version{}, false
}

// PatchesBehind counts the releases of v's line that are newer than v:
// 0 when v is the newest patch of its line (or newer than every release).
func (ix Index) PatchesBehind(v Version) int {
	n := 0
	for _, r := range ix.versions {
		if r.Line() == v.Line() && r.Compare(v) > 0 {
			n++
		}
	}
	return n
}

// LinesAfter returns the release lines newer than m, oldest first.
func (ix Index) LinesAfter(m Minor) []Minor {
	var out []Minor
	for _, v := range ix.versions {
		if l := v.Line(); l.Compare(m) > 0 && (len(out) == 0 || out[len(out)-1] != l) {
			out = append(out, l)
		}
	}
	return out
}
