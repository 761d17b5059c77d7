package talos

import (
	"errors"
	"path"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// nodeDirs are the directories of a node's root filesystem the lab knows
// of. /system/state is the STATE partition's mount point: Talos 1.12 and
// later create it empty and never attach the partition there (they mount
// STATE detached, only while they read or write it), so the saved machine
// config, /system/state/config.yaml, is not a file of the running node.
var nodeDirs = map[string]bool{
	"/":             true,
	"/system":       true,
	"/system/state": true,
}

// Read streams a file of the node like machined's Read: a path that does
// not exist answers NotFound with the error os.Stat gives, a directory
// answers "path must be a regular file". The lab's nodes have no regular
// files, so every other path answers NotFound.
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
	defer c.unlock()

	p := req.GetPath()

	if path.IsAbs(p) && nodeDirs[path.Clean(p)] {
		return errors.New("path must be a regular file")
	}

	return status.Errorf(codes.NotFound, "stat %s: no such file or directory", p)
}
