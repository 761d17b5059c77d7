package proxmox

import (
	"maps"
	"slices"
	"testing"
)

// TestPendingList reads GET .../pending items as Proxmox VE lists them
// (config_with_pending_array): current values, pending values, keys only
// pending, pending deletes; only size changes wait for a restart.
func TestPendingList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		items     []any
		effective map[string]string
		restart   []string
	}{{
		name: "resize",
		items: []any{
			map[string]any{"key": "digest", "value": "abc"},
			map[string]any{"key": "cores", "value": float64(2), "pending": float64(4)},
			map[string]any{"key": "memory", "value": "4096", "pending": "current=8192"},
			map[string]any{"key": "sockets", "pending": float64(2)},
			map[string]any{"key": "name", "value": "cp01"},
		},
		effective: map[string]string{"digest": "abc", "cores": "4", "memory": "current=8192", "sockets": "2", "name": "cp01"},
		restart:   []string{"cores 2 -> 4", "sockets 1 -> 2", "memory 4 GB -> 8 GB"},
	}, {
		name: "deletes and other keys",
		items: []any{
			map[string]any{"key": "cores", "value": float64(4), "delete": float64(1)},
			map[string]any{"key": "ide3", "value": "local:iso/x.iso,media=cdrom", "delete": float64(1)},
			map[string]any{"key": "memory", "value": float64(1536), "pending": float64(1536)},
			map[string]any{"key": "net0", "value": "virtio=AA,bridge=vmbr0", "pending": "virtio=AA,bridge=vmbr1"},
		},
		effective: map[string]string{"memory": "1536", "net0": "virtio=AA,bridge=vmbr1"},
		restart:   []string{"cores 4 -> 1"},
	}, {
		name:      "nothing pending",
		items:     []any{map[string]any{"key": "memory", "value": float64(1536)}},
		effective: map[string]string{"memory": "1536"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := parsePending(tc.items)
			if got := c.effective(); !maps.Equal(got, tc.effective) {
				t.Errorf("effective = %v, want %v", got, tc.effective)
			}
			if got := c.restartPending(); !slices.Equal(got, tc.restart) {
				t.Errorf("restart pending = %q, want %q", got, tc.restart)
			}
		})
	}
	if got := memoryText("1536"); got != "1536 MB" {
		t.Errorf("memoryText(1536) = %q", got)
	}
}
