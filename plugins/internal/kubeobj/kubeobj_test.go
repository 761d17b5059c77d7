package kubeobj

import (
	"slices"
	"testing"
)

func TestDifferences(t *testing.T) {
	t.Parallel()
	have := map[string]any{"spec": map[string]any{"a": 1}, "data": map[string]any{"k": "dg=="},
		"metadata": map[string]any{"labels": map[string]any{"x": "1"}, "resourceVersion": "7"}, "status": map[string]any{"ready": true}}
	same := map[string]any{"spec": map[string]any{"a": 1}, "data": map[string]any{"k": "dg=="},
		"metadata": map[string]any{"labels": map[string]any{"x": "1"}, "resourceVersion": "8"}}
	if got := Differences(have, same); len(got) != 0 {
		t.Errorf("what the server keeps for itself counted: %v", got)
	}
	other := map[string]any{"spec": map[string]any{"a": 2}, "type": "Opaque",
		"metadata": map[string]any{"labels": map[string]any{"x": "1"}, "annotations": map[string]any{"n": "v"}}}
	if got := Differences(have, other); !slices.Equal(got, []string{"spec", "data", "type", "metadata.annotations"}) {
		t.Errorf("differences %v", got)
	}
}
