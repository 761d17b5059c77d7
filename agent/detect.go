package agent

import (
	"maps"
	"slices"
	"strings"
)

// Affected returns the cluster directories that a change touches: a path
// belongs to the deepest cluster directory that contains it (a cluster's
// includes live in its directory, so they are covered). Directories and
// paths are slash-separated and relative to the repository root; "." is
// the root.
func Affected(clusterDirs, changed []string) []string {
	set := map[string]bool{}
	for _, p := range changed {
		if d, ok := owner(p, clusterDirs); ok {
			set[d] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func owner(p string, dirs []string) (string, bool) {
	best, found := "", false
	for _, d := range dirs {
		inside := d == "." || strings.HasPrefix(p, d+"/")
		if inside && (!found || len(d) > len(best) || best == ".") {
			best, found = d, true
		}
	}
	return best, found
}

// Removed returns the cluster directories present before and gone after.
func Removed(before, after []string) []string {
	var out []string
	for _, d := range before {
		if !slices.Contains(after, d) {
			out = append(out, d)
		}
	}
	return out
}
