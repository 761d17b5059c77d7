package lab

import (
	"fmt"
	"net/http"
	"time"
)

// openStackOpHelp says what op a fault on the OpenStack emulator takes.
const openStackOpHelp = "an OpenStack operation such as compute.server.create, network.port.create, image.image.upload or identity.token.create, " +
	"a service such as compute or network.* for every operation of it, or * for any"

// injectOpenStack applies an openstack-* fault to the OpenStack emulator.
// Op is an operation name of its log (openstack.Op.Name) or a pattern of
// them: a service ("compute", "network.*"), a deeper prefix
// ("compute.server.*") or "*".
func (l *Lab) injectOpenStack(f Fault) error {
	switch f.Kind {
	case "openstack-fail", "openstack-latency", "openstack-hang":
	default:
		return unknownKind(f.Kind)
	}
	if err := needOp(f, openStackOpHelp); err != nil {
		return err
	}
	switch f.Kind {
	case "openstack-fail":
		status := f.Status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		if status < 400 || status > 599 {
			return fmt.Errorf("fault %s: status %d is not an HTTP error status (400 to 599)", f.Kind, status)
		}
		l.OpenStack.FailNext(f.Op, f.N, status)
	case "openstack-latency":
		if f.Millis < 0 {
			return fmt.Errorf("fault %s: millis must not be negative", f.Kind)
		}
		l.OpenStack.Latency(f.Op, time.Duration(f.Millis)*time.Millisecond)
	case "openstack-hang":
		l.OpenStack.Hang(f.Op, f.N)
	}
	return nil
}
