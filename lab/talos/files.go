package talos

import (
	"errors"
	"path"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// bootIDPath is the procfs file holding the kernel's boot ID, a random
// UUID drawn at every boot; talosctl reads it to tell that a node rebooted
// (cmd/talosctl/pkg/talos/action/tracker.go, getBootID).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// nodeDirs are the directories of a node's root filesystem the lab knows
// of. /system/state is the STATE partition's mount point: Talos 1.12 and
// later create it empty and never attach the partition there (they mount
// STATE detached, only while they read or write it), so the saved machine
// config, /system/state/config.yaml, is not a file of the running node.
var nodeDirs = map[string]bool{
	"/":                       true,
	"/system":                 true,
	"/system/state":           true,
	"/proc":                   true,
	"/proc/sys":               true,
	"/proc/sys/kernel":        true,
	"/proc/sys/kernel/random": true,
}

// Read streams a file of the node like machined's Read: a path that does
// not exist answers NotFound with the error os.Stat gives, a directory
// answers "path must be a regular file". The only regular file of the
// lab's nodes is the boot ID (bootIDPath): the UUID of the current boot
// and a newline, as procfs gives it. Every other path answers NotFound.
//
// In particular /system/state/config.yaml answers NotFound, as it does on
// a real Talos 1.13 node (see nodeDirs): the running machine config is not
// readable with Read. RBAC needs os:admin; in maintenance mode clients
// only have os:reader, so Read is refused there, as in Talos.
func (machineServer) Read(req *machine.ReadRequest, srv machine.MachineService_ReadServer) error {
	c := callOf(srv.Context())
	if err := c.lock(); err != nil {
		return err
	}

	p := req.GetPath()
	bootID := c.node.bootID

	c.unlock()

	switch {
	case path.IsAbs(p) && nodeDirs[path.Clean(p)]:
		return errors.New("path must be a regular file")
	case path.Clean(p) == bootIDPath:
		return srv.Send(&common.Data{Bytes: []byte(bootID + "\n")})
	}

	return status.Errorf(codes.NotFound, "stat %s: no such file or directory", p)
}
