package proxmox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/Telmate/proxmox-api-go/proxmox"
)

// A VM deleted between the VM list and the read of its config is gone,
// not an error of the observation; any other failure to read it is one.
func TestVMGoneIsOnlyAMissingConfig(t *testing.T) {
	t.Parallel()
	gone := proxmox.ApiError{Code: "500", Message: "Configuration file 'nodes/pve2/qemu-server/105.conf' does not exist"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{gone, true},
		{&gone, true},
		{fmt.Errorf("reading: %w", gone), true},
		{proxmox.ApiError{Code: "500", Message: "storage 'local' does not exist"}, false},
		{proxmox.ApiError{Code: "500", Message: "got timeout"}, false},
		{errors.New("Configuration file 'x' does not exist"), false}, // not Proxmox's answer
		{nil, false},
	} {
		if got := vmGone(tc.err); got != tc.want {
			t.Errorf("vmGone(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}
