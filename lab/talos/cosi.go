package talos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/config"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// The COSI State API (service cosi.resource.State of
// github.com/cosi-project/runtime/api/v1alpha1) as machined serves it
// (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// Register): the cosi gRPC server (pkg/state/protobuf/server) over
// machined's resource state, filtered by Talos's access policy
// (internal/app/resources/access.go, AccessPolicy). The machinery client
// reaches it as client.COSI.
//
// The lab models Get of one resource type, the machine config
// (MachineConfigs.config.talos.dev in namespace "config"), with its two IDs:
//
//   - "v1alpha1" (config.ActiveID): the config the node runs, as machined's
//     runtime sets it (SetConfig): when the config is loaded at boot, on
//     every apply that changes the running config (no-reboot, try, and the
//     rollback of try). A node in maintenance mode has none.
//   - "persistent" (config.PersistentID): the config last written for the
//     STATE partition in the current boot (SetPersistedConfig), by an apply
//     in mode no-reboot, staged or reboot. Like Talos, a node that booted
//     from its disk has none until such an apply: it then answers NotFound.
//     Outside staged and try applies it holds the same bytes as "v1alpha1".
//
// The spec travels as the bytes of the config as it was encoded when the
// node received it (user data or ApplyConfiguration), as cfg.Bytes() gives
// them back. Versions count from 1 in every boot, as machined's in-memory
// state does. Other types answer Unimplemented; the other State methods
// (List, Watch, Create, Update, Destroy) answer Unimplemented too.
type stateServer struct {
	cosiapi.UnimplementedStateServer
}

// modelledTypes are the resource definitions of the types the lab serves,
// keyed by their definition ID (the lowercased type, as AccessPolicy looks
// them up).
var modelledTypes = func() map[string]meta.ResourceDefinitionSpec {
	out := map[string]meta.ResourceDefinitionSpec{}

	for _, r := range []meta.ResourceDefinitionProvider{&configres.MachineConfig{}} {
		rd := r.ResourceDefinition()
		out[strings.ToLower(rd.Type)] = rd
	}

	return out
}()

// talosNamespaces are the namespaces machined registers in Talos 1.13.9
// (internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go): cosi's
// "meta" and Talos's own.
var talosNamespaces = map[resource.Namespace]bool{
	"meta":           true,
	"runtime":        true,
	"cluster":        true,
	"cluster-raw":    true,
	"config":         true,
	"etcd":           true,
	"files":          true,
	"hardware":       true,
	"k8s":            true,
	"controlplane":   true,
	"kubespan":       true,
	"network":        true,
	"network-config": true,
	"cri":            true,
	"secrets":        true,
	"security":       true,
	"perf":           true,
}

// accessPolicy is Talos's AccessPolicy for a read: the type must be
// registered, a sensitive type needs os:admin, and the namespace must be
// registered. Types the lab does not model answer Unimplemented where real
// Talos would go on.
func accessPolicy(roles role.Set, typ resource.Type, ns resource.Namespace) error {
	rd, ok := modelledTypes[strings.ToLower(typ)]
	if !ok {
		return status.Errorf(codes.Unimplemented, "the lab does not model resource type %q", typ)
	}

	if rd.Sensitivity == meta.Sensitive && !roles.Includes(role.Admin) {
		return errNotAuthorized
	}

	if !talosNamespaces[ns] {
		return status.Error(codes.PermissionDenied, fmt.Sprintf("namespace %q is not supported", ns))
	}

	return nil
}

// Get answers one resource the way cosi's server.State.Get does: the
// resource marshalled with protobuf.FromResource, or NotFound carrying the
// in-memory state's "resource ... doesn't exist".
func (stateServer) Get(ctx context.Context, req *cosiapi.GetRequest) (*cosiapi.GetResponse, error) {
	c := callOf(ctx)

	if err := accessPolicy(c.roles, req.GetType(), req.GetNamespace()); err != nil {
		return nil, err
	}

	if err := c.lock(); err != nil {
		return nil, err
	}

	n := c.node

	var res *configResource

	if req.GetNamespace() == configres.NamespaceName && req.GetType() == configres.MachineConfigType {
		switch req.GetId() {
		case configres.ActiveID:
			res = n.activeConfig
		case configres.PersistentID:
			res = n.persistentConfig
		}
	}

	c.unlock()

	if res == nil {
		ptr := resource.NewMetadata(req.GetNamespace(), req.GetType(), req.GetId(), resource.VersionUndefined)

		return nil, status.Error(codes.NotFound, fmt.Sprintf("resource %s doesn't exist", ptr))
	}

	msg, err := res.marshal(req.GetId())
	if err != nil {
		return nil, err
	}

	return &cosiapi.GetResponse{Resource: msg}, nil
}

// configResource is one MachineConfig resource of machined's state. It is
// replaced, never changed, so a snapshot can be marshalled without the
// world's lock.
type configResource struct {
	cfg              config.Provider
	version          uint64
	created, updated time.Time
}

// setConfig is machined's SetConfig/SetPersistedConfig into a resource
// slot: created at version 1, then updated with the version bumped.
func setConfig(cur *configResource, cfg config.Provider) *configResource {
	now := time.Now()

	if cur == nil {
		return &configResource{cfg: cfg, version: 1, created: now, updated: now}
	}

	return &configResource{cfg: cfg, version: cur.version + 1, created: cur.created, updated: now}
}

// marshal builds the resource as machined holds it (config.NewMachineConfigWithID,
// no owner, phase running) and marshals it as cosi's server does.
func (r *configResource) marshal(id resource.ID) (*cosiapi.Resource, error) {
	mc := configres.NewMachineConfigWithID(r.cfg, id)

	ver, err := resource.ParseVersion(strconv.FormatUint(r.version, 10))
	if err != nil {
		return nil, err
	}

	md := mc.Metadata()
	md.SetVersion(ver)
	md.SetCreated(r.created)
	md.SetUpdated(r.updated)

	pr, err := protobuf.FromResource(mc)
	if err != nil {
		return nil, err
	}

	return pr.Marshal()
}
