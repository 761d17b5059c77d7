package forge_test

import (
	"slices"
	"testing"
)

func TestOperations(t *testing.T) {
	t.Parallel()
	f := newWorld(t).f
	ops := f.Operations()
	for _, op := range []string{"pulls.get", "comments.create", "statuses.create", "status.combined", "ratelimit.get", "git.upload-pack.refs", "git.receive-pack"} {
		if !slices.Contains(ops, op) {
			t.Errorf("Operations() lacks %s: %v", op, ops)
		}
	}
	if !slices.IsSorted(ops) || len(slices.Compact(slices.Clone(ops))) != len(ops) {
		t.Errorf("Operations() not sorted and unique: %v", ops)
	}
	for pattern, want := range map[string]bool{
		"pulls.get": true, "comments.*": true, "*": true, "git.*": true,
		"pull.get": false, "comments": false, "[": false, "": false,
	} {
		if got := f.MatchesOperation(pattern); got != want {
			t.Errorf("MatchesOperation(%q) = %v, want %v", pattern, got, want)
		}
	}
}
