package machineconfig

import (
	"fmt"
	"net"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
)

// macSelector returns a link selector matching the NIC whose permanent
// (hypervisor-assigned) MAC is mac. The permanent address is used so that
// VLANs or bridges which copy the MAC never match.
func macSelector(mac string) (cel.Expression, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return cel.Expression{}, fmt.Errorf("parsing MAC %q: %w", mac, err)
	}

	expr, err := cel.ParseBooleanExpression(fmt.Sprintf("mac(link.permanent_addr) == %q", hw.String()), celenv.LinkLocator())
	if err != nil {
		return cel.Expression{}, fmt.Errorf("parsing link selector: %w", err)
	}

	return expr, nil
}
