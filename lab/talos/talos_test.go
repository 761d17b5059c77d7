package talos_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"gopkg.in/yaml.v3"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/taloscluster/taloscluster/lab/talos"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
)

func TestVersionAndAccess(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 1)
	w := newWorld(t, talos.Options{})

	cp1, worker := tc.addrs[tc.cp(1)], tc.addrs[tc.worker(1)]

	for _, host := range []string{tc.cp(1), tc.worker(1)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	waitUp(t, w, cp1, talos.ModeRunning)
	waitUp(t, w, worker, talos.ModeRunning)

	t.Run("admin", func(t *testing.T) {
		for _, addr := range []netip.Addr{cp1, worker} {
			resp, err := tc.client(t, addr).Version(t.Context())
			if err != nil {
				t.Fatalf("version of %s: %v", addr, err)
			}

			msg := resp.GetMessages()[0]
			if got := msg.GetVersion().GetTag(); got != talosVersion {
				t.Errorf("%s: version %q, want %q", addr, got, talosVersion)
			}

			if got := msg.GetMetadata().GetHostname(); got != addr.String() {
				t.Errorf("%s: metadata hostname %q", addr, got)
			}

			if !msg.GetFeatures().GetRbac() {
				t.Errorf("%s: rbac feature not reported", addr)
			}
		}
	})

	t.Run("reader", func(t *testing.T) {
		c := tc.client(t, cp1, role.Reader)

		if _, err := c.Version(t.Context()); err != nil {
			t.Fatalf("version as reader: %v", err)
		}

		err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
		if code := client.StatusCode(err); code != codes.PermissionDenied {
			t.Fatalf("bootstrap as reader: %v (code %s), want PermissionDenied", err, code)
		}
	})

	other, err := machineconfig.NewSecrets(talosVersion)
	if err != nil {
		t.Fatal(err)
	}

	otherCert, err := other.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("another cluster's talosconfig", func(t *testing.T) {
		c := newClient(t,
			client.WithConfig(clientconfig.NewConfig("other", nil, other.Certs.OS.Crt, otherCert)),
			client.WithEndpoints(cp1.String()),
		)

		if _, err := c.Version(t.Context()); err == nil {
			t.Fatal("a client of another cluster was served")
		}
	})

	t.Run("client certificate from another CA", func(t *testing.T) {
		pair, err := tls.X509KeyPair(otherCert.Crt, otherCert.Key)
		if err != nil {
			t.Fatal(err)
		}

		// The client trusts the server, so only the server can refuse.
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(tc.bundle.Certs.OS.Crt)

		c := newClient(t,
			client.WithTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}),
			client.WithEndpoints(cp1.String()),
		)

		_, err = c.Version(t.Context())
		if code := client.StatusCode(err); code != codes.Unavailable {
			t.Fatalf("version with a foreign client certificate: %v, want Unavailable", err)
		}
	})

	t.Run("no client certificate", func(t *testing.T) {
		_, err := insecureClient(t, cp1).Version(t.Context())
		if code := client.StatusCode(err); code != codes.Unavailable {
			t.Fatalf("version without a client certificate: %v, want Unavailable", err)
		}
	})

	t.Run("latency", func(t *testing.T) {
		w.Latency(worker, time.Minute)
		defer w.Latency(worker, 0)

		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()

		_, err := tc.client(t, cp1).Version(client.WithNode(ctx, worker.String()))
		if code := client.StatusCode(err); code != codes.DeadlineExceeded {
			t.Errorf("slow call: %v, want DeadlineExceeded", err)
		}
	})

	t.Run("log", func(t *testing.T) {
		denied := slices.ContainsFunc(w.Log(), func(op talos.Op) bool {
			return op.Short() == "Bootstrap" && op.Code == codes.PermissionDenied && op.Node == cp1
		})
		if !denied {
			t.Errorf("log has no denied bootstrap: %v", w.Log())
		}
	})
}

func TestMaintenanceMode(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 2)
	w := newWorld(t, talos.Options{})

	addr := tc.addrs[tc.cp(1)]
	media := "factory.talos.dev/nocloud-installer/4a0d65c669d46663f377e7161e50cfd570c401f26fd9e7bda34a0216b6f1922b:v1.13.7"

	if err := w.Boot(t.Context(), addr, nil, talos.BootImage(media)); err != nil {
		t.Fatal(err)
	}

	st := waitUp(t, w, addr, talos.ModeMaintenance)
	if st.Version != "v1.13.7" || st.Schematic != "4a0d65c669d46663f377e7161e50cfd570c401f26fd9e7bda34a0216b6f1922b" {
		t.Errorf("maintenance node state %+v", st)
	}

	insecure := insecureClient(t, addr)

	resp, err := insecure.Version(t.Context())
	if err != nil {
		t.Fatalf("version in maintenance mode: %v", err)
	}

	if got := resp.GetMessages()[0].GetVersion().GetTag(); got != "v1.13.7" {
		t.Errorf("maintenance version %q", got)
	}

	if resp.GetMessages()[0].GetFeatures() != nil {
		t.Error("maintenance mode reports features")
	}

	for name, call := range map[string]func() error{
		"bootstrap": func() error { return insecure.Bootstrap(t.Context(), &machine.BootstrapRequest{}) },
		"reboot":    func() error { return insecure.Reboot(t.Context()) },
		"reset":     func() error { return insecure.Reset(t.Context(), true, false) },
		"upgrade": func() error {
			//lint:ignore SA1019 the engine calls the MachineService upgrade the client still offers
			_, err := insecure.Upgrade(t.Context(), media, false, false)

			return err
		},
	} {
		if code := client.StatusCode(call()); code != codes.PermissionDenied {
			t.Errorf("%s in maintenance mode: code %s, want PermissionDenied", name, code)
		}
	}

	if _, err := tc.client(t, addr).Version(t.Context()); err == nil {
		t.Error("the talosconfig client trusted the maintenance mode certificate")
	}

	dry, err := insecure.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{
		Data: tc.configs[tc.cp(1)], Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true,
	})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}

	if got := dry.GetMessages()[0].GetModeDetails(); !strings.HasPrefix(got, "Dry run summary:\n") || !strings.Contains(got, "Config diff:") {
		t.Errorf("dry run details %q", got)
	}

	if st, _ := w.Node(addr); st.Mode != talos.ModeMaintenance || st.Boots != 1 {
		t.Fatalf("dry run changed the node: %+v", st)
	}

	applied, err := insecure.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{
		Data: tc.configs[tc.cp(1)], Mode: machine.ApplyConfigurationRequest_AUTO,
	})
	if err != nil {
		t.Fatalf("insecure apply: %v", err)
	}

	if got := applied.GetMessages()[0].GetModeDetails(); got != "Applied configuration without a reboot" {
		t.Errorf("apply details %q", got)
	}

	st = waitUp(t, w, addr, talos.ModeRunning)
	if st.Version != talosVersion || st.Hostname != tc.cp(1) || st.Role != talos.RoleControlPlane || st.Cluster != tc.name {
		t.Errorf("configured node state %+v", st)
	}

	resp, err = tc.client(t, addr).Version(t.Context())
	if err != nil {
		t.Fatalf("version after install: %v", err)
	}

	if got := resp.GetMessages()[0].GetVersion().GetTag(); got != talosVersion {
		t.Errorf("installed version %q, want %q", got, talosVersion)
	}
}

func TestClusterLifecycle(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 3)
	hooks := &hookRecorder{}
	w := newWorld(t, talos.Options{Hooks: hooks})

	cp1, cp2, cp3 := tc.addrs[tc.cp(1)], tc.addrs[tc.cp(2)], tc.addrs[tc.cp(3)]
	worker := tc.addrs[tc.worker(1)]
	all := []netip.Addr{cp1, cp2, cp3, worker}

	// The first control plane and the worker boot, the cluster is
	// bootstrapped, then the other control planes boot and join.
	for _, host := range []string{tc.cp(1), tc.worker(1)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	waitUp(t, w, cp1, talos.ModeRunning)
	waitUp(t, w, worker, talos.ModeRunning)

	c := tc.client(t, cp1)

	eventually(t, "the bootstrap", func() error {
		return c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
	})

	if members := w.EtcdMembers(tc.name); len(members) != 1 || members[0].Addr != cp1 || !members[0].Started {
		t.Fatalf("members after the bootstrap: %+v", members)
	}

	eventually(t, "the worker to join before the other control planes boot", func() error {
		_, joined, _ := hooks.snapshot()
		if !slices.ContainsFunc(joined, func(n talos.Node) bool { return n.Hostname == tc.worker(1) }) {
			return errors.New("not yet")
		}

		return nil
	})

	for _, host := range []string{tc.cp(2), tc.cp(3)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	eventually(t, "three etcd members", func() error {
		if got := startedMembers(w.EtcdMembers(tc.name)); got != 3 {
			return fmt.Errorf("%d started members", got)
		}

		return nil
	})

	t.Run("second bootstrap", func(t *testing.T) {
		err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
		if code := client.StatusCode(err); code != codes.AlreadyExists || !strings.Contains(err.Error(), "etcd data directory is not empty") {
			t.Fatalf("second bootstrap: %v, want AlreadyExists", err)
		}

		if cs := w.Clusters(); len(cs) != 1 || cs[0].Bootstraps != 1 {
			t.Errorf("clusters %+v", cs)
		}
	})

	t.Run("etcd members", func(t *testing.T) {
		resp, err := c.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{QueryLocal: true})
		if err != nil {
			t.Fatal(err)
		}

		var got []string
		for _, m := range resp.GetMessages()[0].GetMembers() {
			got = append(got, fmt.Sprintf("%s/%x", m.GetHostname(), m.GetId()))
		}

		var want []string
		for _, m := range w.EtcdMembers(tc.name) {
			want = append(want, fmt.Sprintf("%s/%x", m.Hostname, m.ID))
		}

		if len(got) != 3 || !slices.Equal(got, want) {
			t.Errorf("members %v, want %v", got, want)
		}

		// Workers never join.
		_, err = c.EtcdMemberList(client.WithNode(t.Context(), worker.String()), &machine.EtcdMemberListRequest{})
		if code := client.StatusCode(err); code != codes.Unimplemented {
			t.Errorf("member list on a worker: %v, want Unimplemented", err)
		}
	})

	t.Run("hooks", func(t *testing.T) {
		eventually(t, "every node to join", func() error {
			_, joined, _ := hooks.snapshot()
			if len(joined) < 4 {
				return fmt.Errorf("%d joined", len(joined))
			}

			return nil
		})

		bootstrapped, joined, _ := hooks.snapshot()
		if len(bootstrapped) != 1 {
			t.Fatalf("bootstrapped %d times", len(bootstrapped))
		}

		b := bootstrapped[0]
		if b.Name != tc.name || b.ID != tc.bundle.Cluster.ID || b.Endpoint.String() != tc.endpoint ||
			b.KubernetesVersion != kubeVersion || b.VIP != tc.vip ||
			string(b.KubernetesCA.Cert) != string(tc.bundle.Certs.K8s.Crt) || len(b.KubernetesCA.Key) == 0 {
			t.Errorf("bootstrapped %+v", b)
		}

		byHost := map[string]talos.Node{}
		for _, n := range joined {
			byHost[n.Hostname] = n
		}

		wk := byHost[tc.worker(1)]
		if wk.Addr != worker || wk.Role != talos.RoleWorker || wk.KubeletVersion != kubeVersion ||
			wk.Labels[machineconfig.LabelRole] != "worker" || wk.TalosVersion != talosVersion {
			t.Errorf("worker joined as %+v", wk)
		}

		if _, ok := byHost[tc.cp(2)].Labels["node-role.kubernetes.io/control-plane"]; !ok {
			t.Errorf("control plane joined without the role label: %+v", byHost[tc.cp(2)])
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		data, err := c.Kubeconfig(t.Context())
		if err != nil {
			t.Fatal(err)
		}

		checkKubeconfig(t, data, tc)
	})

	t.Run("node targeting", func(t *testing.T) {
		resp, err := c.Version(client.WithNode(t.Context(), worker.String()))
		if err != nil {
			t.Fatal(err)
		}

		if got := resp.GetMessages()[0].GetMetadata().GetHostname(); got != worker.String() {
			t.Errorf("answer from %q, want %s", got, worker)
		}

		hosts, err := c.MachineClient.Hostname(client.WithNode(t.Context(), worker.String()), &emptypb.Empty{})
		if err != nil || hosts.GetMessages()[0].GetHostname() != tc.worker(1) {
			t.Errorf("hostname of the worker: %v %v", hosts, err)
		}

		var targets []string
		for _, a := range all {
			targets = append(targets, a.String())
		}

		resp, err = c.Version(client.WithNodes(t.Context(), targets...))
		if err != nil {
			t.Fatal(err)
		}

		var got []string
		for _, m := range resp.GetMessages() {
			got = append(got, m.GetMetadata().GetHostname())
		}

		if !slices.Equal(got, targets) {
			t.Errorf("answers from %v, want %v", got, targets)
		}

		proxied := slices.ContainsFunc(w.Log(), func(op talos.Op) bool {
			return op.Short() == "Version" && op.Node == worker && op.Endpoint == cp1
		})
		if !proxied {
			t.Error("the log has no proxied call")
		}
	})

	t.Run("services", func(t *testing.T) {
		resp, err := c.ServiceList(client.WithNode(t.Context(), cp2.String()))
		if err != nil {
			t.Fatal(err)
		}

		states := map[string]string{}
		for _, s := range resp.GetMessages()[0].GetServices() {
			states[s.GetId()] = fmt.Sprintf("%s/%t", s.GetState(), s.GetHealth().GetHealthy())
		}

		for _, id := range []string{"etcd", "kubelet", "apid", "trustd"} {
			if states[id] != "Running/true" {
				t.Errorf("service %s is %q", id, states[id])
			}
		}
	})

	t.Run("health", func(t *testing.T) {
		checkHealthy(t, c, []netip.Addr{cp1, cp2, cp3}, []netip.Addr{worker})
	})

	t.Run("live apply", func(t *testing.T) {
		before, _ := w.Node(worker)

		cfg := tc.generate(t, tc.machine(t, tc.worker(1)), []string{"machine:\n  nodeLabels:\n    lab/extra: \"yes\"\n"})

		resp, err := c.ApplyConfiguration(client.WithNode(t.Context(), worker.String()), &machine.ApplyConfigurationRequest{
			Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO,
		})
		if err != nil {
			t.Fatal(err)
		}

		msg := resp.GetMessages()[0]
		if msg.GetModeDetails() != "Applied configuration without a reboot" || msg.GetMode() != machine.ApplyConfigurationRequest_NO_REBOOT {
			t.Errorf("apply answered %q (%s)", msg.GetModeDetails(), msg.GetMode())
		}

		eventually(t, "the new label to register", func() error {
			_, joined, _ := hooks.snapshot()
			for _, n := range joined {
				if n.Hostname == tc.worker(1) && n.Labels["lab/extra"] == "yes" {
					return nil
				}
			}

			return errors.New("not yet")
		})

		if after, _ := w.Node(worker); after.Boots != before.Boots || !after.Up {
			t.Errorf("a live apply rebooted the node: %+v", after)
		}
	})

	t.Run("apply with a reboot", func(t *testing.T) {
		before, _ := w.Node(cp2)
		memberBefore := before.EtcdMemberID

		cfg := tc.generate(t, tc.machine(t, tc.cp(2)), []string{envPatch})

		resp, err := c.ApplyConfiguration(client.WithNode(t.Context(), cp2.String()), &machine.ApplyConfigurationRequest{
			Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO,
		})
		if err != nil {
			t.Fatal(err)
		}

		msg := resp.GetMessages()[0]
		if !strings.HasPrefix(msg.GetModeDetails(), "Applied configuration with a reboot: ") || msg.GetMode() != machine.ApplyConfigurationRequest_REBOOT {
			t.Errorf("apply answered %q (%s)", msg.GetModeDetails(), msg.GetMode())
		}

		after := waitRebooted(t, w, cp2, before.Boots)
		if after.EtcdMemberID != memberBefore {
			t.Errorf("member ID changed over a reboot: %x -> %x", memberBefore, after.EtcdMemberID)
		}

		eventually(t, "cp2 back in etcd", func() error {
			if got := startedMembers(w.EtcdMembers(tc.name)); got != 3 {
				return fmt.Errorf("%d started members", got)
			}

			return nil
		})

		_, _, left := hooks.snapshot()
		if !slices.Contains(left, tc.cp(2)) {
			t.Errorf("no NodeLeft for the rebooted node: %v", left)
		}
	})

	t.Run("upgrade", func(t *testing.T) {
		before, _ := w.Node(cp3)
		image := "factory.talos.dev/installer/0123456789abcdef:v1.13.9"

		//lint:ignore SA1019 the engine calls the MachineService upgrade the client still offers
		resp, err := c.Upgrade(client.WithNode(t.Context(), cp3.String()), image, false, false)
		if err != nil {
			t.Fatal(err)
		}

		if got := resp.GetMessages()[0].GetAck(); got != "Upgrade request received" {
			t.Errorf("upgrade ack %q", got)
		}

		after := waitRebooted(t, w, cp3, before.Boots)

		// The legacy upgrade cordons and drains before it reboots.
		calls := hooks.callsOf(tc.cp(3))
		if i := slices.Index(calls, "cordon "+tc.cp(3)); i < 0 || len(calls) < i+3 ||
			calls[i+1] != "drain "+tc.cp(3) || calls[i+2] != "left "+tc.cp(3)+" shutdown=true" {
			t.Errorf("hook calls of the upgraded node %v, want cordon, drain, left", calls)
		}

		if after.Version != "v1.13.9" || after.Schematic != "0123456789abcdef" || after.Image != image {
			t.Errorf("upgraded node %+v", after)
		}

		eventually(t, "the new version to answer", func() error {
			v, err := c.Version(client.WithNode(t.Context(), cp3.String()))
			if err != nil {
				return err
			}

			if got := v.GetMessages()[0].GetVersion().GetTag(); got != "v1.13.9" {
				return fmt.Errorf("version %q", got)
			}

			return nil
		})
	})

	t.Run("graceful reset", func(t *testing.T) {
		eventually(t, "three started members", func() error {
			if got := startedMembers(w.EtcdMembers(tc.name)); got != 3 {
				return fmt.Errorf("%d started members", got)
			}

			return nil
		})

		resp, err := c.ResetGenericWithResponse(client.WithNode(t.Context(), cp3.String()), &machine.ResetRequest{Graceful: true})
		if err != nil {
			t.Fatal(err)
		}

		if resp.GetMessages()[0].GetActorId() == "" {
			t.Error("reset answered no actor ID")
		}

		eventually(t, "cp3 to leave etcd and power off", func() error {
			members := w.EtcdMembers(tc.name)
			st, _ := w.Node(cp3)

			if len(members) != 2 || slices.ContainsFunc(members, func(m talos.Member) bool { return m.Addr == cp3 }) || st.Mode != talos.ModeOff {
				return fmt.Errorf("members %+v, node %+v", members, st)
			}

			return nil
		})

		checkHealthy(t, c, []netip.Addr{cp1, cp2}, []netip.Addr{worker})
	})
}

func TestEtcdMembership(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 4)
	w := newWorld(t, talos.Options{EtcdRetry: 20 * time.Millisecond})

	cp1, cp2, cp3 := tc.addrs[tc.cp(1)], tc.addrs[tc.cp(2)], tc.addrs[tc.cp(3)]
	c := tc.bootstrapCluster(t, w)
	c2 := tc.client(t, cp2)

	memberOf := func(addr netip.Addr) uint64 {
		for _, m := range w.EtcdMembers(tc.name) {
			if m.Addr == addr {
				return m.ID
			}
		}

		t.Fatalf("%s is not a member", addr)

		return 0
	}

	t.Run("forfeit leadership", func(t *testing.T) {
		if leader := w.Clusters()[0].Leader; leader != memberOf(cp1) {
			t.Fatalf("leader %x is not the bootstrap node", leader)
		}

		resp, err := c.EtcdForfeitLeadership(t.Context(), &machine.EtcdForfeitLeadershipRequest{})
		if err != nil {
			t.Fatal(err)
		}

		leader := w.Clusters()[0].Leader
		if leader == memberOf(cp1) || resp.GetMessages()[0].GetMember() == "" {
			t.Errorf("leadership stayed: leader %x, answer %q", leader, resp.GetMessages()[0].GetMember())
		}
	})

	if err := w.PowerOff(cp3); err != nil {
		t.Fatal(err)
	}

	t.Run("a down member stays", func(t *testing.T) {
		resp, err := c.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{})
		if err != nil {
			t.Fatal(err)
		}

		if n := len(resp.GetMessages()[0].GetMembers()); n != 3 {
			t.Errorf("%d members", n)
		}

		stream, err := c.ClusterHealthCheck(t.Context(), 300*time.Millisecond, &clusterapi.ClusterInfo{
			ControlPlaneNodes: []string{cp1.String(), cp2.String(), cp3.String()},
		})
		if err != nil {
			t.Fatal(err)
		}

		if err := drainHealth(stream); client.StatusCode(err) != codes.DeadlineExceeded {
			t.Errorf("health with a control plane down: %v, want DeadlineExceeded", err)
		}
	})

	t.Run("targeting a down node", func(t *testing.T) {
		resp, err := c.Version(client.WithNodes(t.Context(), cp1.String(), cp3.String()))
		if err == nil || resp == nil || len(resp.GetMessages()) != 1 {
			t.Fatalf("version from an up and a down node: %v, %v", resp, err)
		}

		if code := client.StatusCode(err); code != codes.Unavailable {
			t.Errorf("down node answered %v", err)
		}

		_, err = c.Version(client.WithNode(t.Context(), cp3.String()))
		if code := client.StatusCode(err); code != codes.Unavailable {
			t.Errorf("down node answered %v", err)
		}
	})

	t.Run("a live member cannot go while another is down", func(t *testing.T) {
		// etcd's mayRemoveMember: the down member still counts as started
		// (it published its name), but removing a live one would leave one
		// active member of three.
		err := c.EtcdRemoveMemberByID(t.Context(), &machine.EtcdRemoveMemberByIDRequest{MemberId: memberOf(cp2)})
		if err == nil || !strings.Contains(err.Error(), "unhealthy cluster") {
			t.Errorf("removing a live member with another down: %v, want unhealthy cluster", err)
		}
	})

	t.Run("remove by id", func(t *testing.T) {
		err := c.EtcdRemoveMemberByID(t.Context(), &machine.EtcdRemoveMemberByIDRequest{MemberId: 0xdead})
		if code := client.StatusCode(err); code != codes.NotFound {
			t.Errorf("removing an unknown member: %v, want NotFound", err)
		}

		if err := c.EtcdRemoveMemberByID(t.Context(), &machine.EtcdRemoveMemberByIDRequest{MemberId: memberOf(cp3)}); err != nil {
			t.Fatal(err)
		}

		if n := len(w.EtcdMembers(tc.name)); n != 2 {
			t.Errorf("%d members after the removal", n)
		}
	})

	t.Run("no majority", func(t *testing.T) {
		id2 := memberOf(cp2)

		if err := w.PowerOff(cp2); err != nil {
			t.Fatal(err)
		}

		if _, err := c.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{QueryLocal: true}); err == nil {
			t.Error("member list answered without a majority")
		}

		if err := c.EtcdRemoveMemberByID(t.Context(), &machine.EtcdRemoveMemberByIDRequest{MemberId: id2}); err == nil {
			t.Error("a member was removed without a majority")
		}

		// Powered on again, it boots from its disk and its member returns.
		if err := w.Boot(t.Context(), cp2, nil); err != nil {
			t.Fatal(err)
		}

		eventually(t, "a majority again", func() error {
			_, err := c.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{QueryLocal: true})

			return err
		})

		if memberOf(cp2) != id2 {
			t.Error("the member ID changed")
		}
	})

	t.Run("a replacement joins", func(t *testing.T) {
		old := len(w.EtcdMembers(tc.name))

		if err := w.Destroy(cp3); err != nil {
			t.Fatal(err)
		}

		if err := w.Boot(t.Context(), cp3, tc.configs[tc.cp(3)]); err != nil {
			t.Fatal(err)
		}

		eventually(t, "the replacement to join", func() error {
			if got := startedMembers(w.EtcdMembers(tc.name)); got != old+1 {
				return fmt.Errorf("%d started members", got)
			}

			return nil
		})
	})

	t.Run("leave", func(t *testing.T) {
		c3 := tc.client(t, cp3)

		eventually(t, "cp3 to answer", func() error {
			_, err := c3.Version(t.Context())

			return err
		})

		if err := c3.EtcdLeaveCluster(t.Context(), &machine.EtcdLeaveClusterRequest{}); err != nil {
			t.Fatal(err)
		}

		members := w.EtcdMembers(tc.name)
		if len(members) != 2 || slices.ContainsFunc(members, func(m talos.Member) bool { return m.Addr == cp3 }) {
			t.Errorf("members %+v", members)
		}

		resp, err := c3.ServiceList(t.Context())
		if err != nil {
			t.Fatal(err)
		}

		for _, s := range resp.GetMessages()[0].GetServices() {
			if s.GetId() == "etcd" && s.GetState() != "Finished" {
				t.Errorf("etcd on the node that left is %s", s.GetState())
			}
		}

		if err := c3.EtcdLeaveCluster(t.Context(), &machine.EtcdLeaveClusterRequest{}); err == nil {
			t.Error("a node left twice")
		}
	})

	t.Run("two healthy members may lose one", func(t *testing.T) {
		// The majority is counted over the members that remain
		// (IsReadyToRemoveVotingMember), and both are active.
		if err := c2.EtcdLeaveCluster(t.Context(), &machine.EtcdLeaveClusterRequest{}); err != nil {
			t.Fatalf("a member of two healthy ones leaving: %v", err)
		}

		if members := w.EtcdMembers(tc.name); len(members) != 1 || members[0].Addr != cp1 {
			t.Errorf("members %+v", members)
		}
	})

	t.Run("the last member cannot go", func(t *testing.T) {
		err := c.EtcdLeaveCluster(t.Context(), &machine.EtcdLeaveClusterRequest{})
		if err == nil || !strings.Contains(err.Error(), "not enough started members") {
			t.Errorf("the last member leaving: %v, want not enough started members", err)
		}
	})
}

func TestResetFaults(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 5)
	w := newWorld(t, talos.Options{EtcdRetry: 20 * time.Millisecond})

	cp3 := tc.addrs[tc.cp(3)]
	c := tc.bootstrapCluster(t, w)
	ctx := client.WithNode(t.Context(), cp3.String())

	t.Run("failing call", func(t *testing.T) {
		w.FailCalls(cp3, "Reset", 1, codes.Internal)

		err := c.ResetGeneric(ctx, &machine.ResetRequest{Graceful: true})
		if code := client.StatusCode(err); code != codes.Internal {
			t.Fatalf("reset with an injected failure: %v, want Internal", err)
		}
	})

	t.Run("failing sequence", func(t *testing.T) {
		w.FailReset(cp3, 1)
		checkResetFails(t, w, c, tc, cp3, "injected")
	})

	t.Run("stuck member", func(t *testing.T) {
		w.StuckEtcdMember(cp3)
		checkResetFails(t, w, c, tc, cp3, "failed to leave cluster")

		var id uint64

		for _, m := range w.EtcdMembers(tc.name) {
			if m.Addr == cp3 {
				id = m.ID
			}
		}

		if err := c.EtcdRemoveMemberByID(t.Context(), &machine.EtcdRemoveMemberByIDRequest{MemberId: id}); err == nil {
			t.Error("a stuck member was removed")
		}

		w.ClearFaults(cp3)

		if err := c.ResetGeneric(ctx, &machine.ResetRequest{Graceful: true, Reboot: true}); err != nil {
			t.Fatal(err)
		}

		// Reset with a reboot: back in maintenance mode, out of etcd.
		waitUp(t, w, cp3, talos.ModeMaintenance)

		if members := w.EtcdMembers(tc.name); len(members) != 2 {
			t.Errorf("members %+v", members)
		}
	})
}

// checkResetFails resets the node gracefully and checks that the reset
// sequence reports an error containing want while the node stays up and in
// etcd.
func checkResetFails(t *testing.T, w *talos.World, c *client.Client, tc *testCluster, addr netip.Addr, want string) {
	t.Helper()

	ctx := client.WithNode(t.Context(), addr.String())
	before := startedMembers(w.EtcdMembers(tc.name))

	resp, err := c.ResetGenericWithResponse(ctx, &machine.ResetRequest{Graceful: true})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}

	actor := resp.GetMessages()[0].GetActorId()
	events := make(chan client.EventResult)

	if err := c.EventsWatchV2(ctx, events, client.WithActorID(actor), client.WithTailEvents(-1)); err != nil {
		t.Fatal(err)
	}

	timeout := time.After(10 * time.Second)

	for {
		var ev client.EventResult

		select {
		case ev = <-events:
		case <-timeout:
			t.Fatal("no end of the reset sequence")
		}

		if ev.Error != nil {
			t.Fatalf("watching events: %v", ev.Error)
		}

		seq, ok := ev.Event.Payload.(*machine.SequenceEvent)
		if !ok || seq.GetSequence() != "reset" || seq.GetAction() != machine.SequenceEvent_STOP {
			continue
		}

		if seq.GetError() == nil || !strings.Contains(seq.GetError().GetMessage(), want) {
			t.Fatalf("reset ended with %v, want an error with %q", seq.GetError(), want)
		}

		break
	}

	st, _ := w.Node(addr)
	if !st.Up || st.Mode != talos.ModeRunning || st.EtcdMemberID == 0 {
		t.Errorf("node after a failed reset: %+v", st)
	}

	if got := startedMembers(w.EtcdMembers(tc.name)); got != before {
		t.Errorf("%d started members after a failed reset, %d before", got, before)
	}
}

func TestApplyModes(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 6)
	w := newWorld(t, talos.Options{})

	addr := tc.addrs[tc.worker(1)]
	cp1 := tc.addrs[tc.cp(1)]

	for _, host := range []string{tc.cp(1), tc.worker(1)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	waitUp(t, w, addr, talos.ModeRunning)
	waitUp(t, w, cp1, talos.ModeRunning)

	c := tc.client(t, addr)
	m := tc.machine(t, tc.worker(1))
	labelled := tc.generate(t, m, []string{"machine:\n  nodeLabels:\n    lab/extra: \"yes\"\n"})
	newImage := tc.generate(t, m, []string{"machine:\n  install:\n    image: factory.talos.dev/installer/0123456789abcdef:v1.13.9\n"})
	envChange := tc.generate(t, m, []string{envPatch})

	apply := func(data []byte, mode machine.ApplyConfigurationRequest_Mode, dry bool) (*machine.ApplyConfiguration, error) {
		resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: data, Mode: mode, DryRun: dry})
		if err != nil {
			return nil, err
		}

		return resp.GetMessages()[0], nil
	}

	t.Run("no reboot refuses a reboot", func(t *testing.T) {
		for _, mode := range []machine.ApplyConfigurationRequest_Mode{machine.ApplyConfigurationRequest_NO_REBOOT, machine.ApplyConfigurationRequest_TRY} {
			_, err := apply(envChange, mode, false)
			if code := client.StatusCode(err); code != codes.InvalidArgument || !strings.Contains(err.Error(), "can't be applied in immediate mode") {
				t.Fatalf("%s apply of an env change: %v", mode, err)
			}
		}
	})

	t.Run("dry run", func(t *testing.T) {
		msg, err := apply(envChange, machine.ApplyConfigurationRequest_AUTO, true)
		if err != nil {
			t.Fatal(err)
		}

		if got := msg.GetModeDetails(); !strings.HasPrefix(got, "Dry run summary:\nApplied configuration with a reboot (skipped in dry-run).\nConfig diff:") ||
			!strings.Contains(got, "+        https_proxy: http://127.0.0.1:3128") {
			t.Errorf("dry run details %q", got)
		}

		// .machine.install applies live in 1.13 (CanApplyImmediate copies it).
		msg, err = apply(newImage, machine.ApplyConfigurationRequest_AUTO, true)
		if err != nil {
			t.Fatal(err)
		}

		if got := msg.GetModeDetails(); !strings.HasPrefix(got, "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:") ||
			!strings.Contains(got, "+        image: factory.talos.dev/installer/0123456789abcdef:v1.13.9") {
			t.Errorf("dry run details of an install change %q", got)
		}

		msg, err = apply(tc.configs[tc.worker(1)], machine.ApplyConfigurationRequest_AUTO, true)
		if err != nil {
			t.Fatal(err)
		}

		if got := msg.GetModeDetails(); !strings.HasSuffix(got, "No changes.") {
			t.Errorf("dry run of the same config %q", got)
		}
	})

	t.Run("staged", func(t *testing.T) {
		msg, err := apply(labelled, machine.ApplyConfigurationRequest_STAGED, false)
		if err != nil {
			t.Fatal(err)
		}

		if got := msg.GetModeDetails(); got != "Staged configuration to be applied after the next reboot" {
			t.Errorf("staged details %q", got)
		}

		// The staged config is not running: applying it live is no change.
		msg, err = apply(tc.configs[tc.worker(1)], machine.ApplyConfigurationRequest_NO_REBOOT, true)
		if err != nil || !strings.HasSuffix(msg.GetModeDetails(), "No changes.") {
			t.Errorf("running config changed by a staged apply: %v %v", msg, err)
		}
	})

	t.Run("try", func(t *testing.T) {
		resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{
			Data: labelled, Mode: machine.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(50 * time.Millisecond),
		})
		if err != nil {
			t.Fatal(err)
		}

		if got := resp.GetMessages()[0].GetModeDetails(); !strings.HasPrefix(got, "Applied configuration without a reboot\nThe config is applied in 'try' mode") {
			t.Errorf("try details %q", got)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		_, err := apply([]byte("machine: [\n"), machine.ApplyConfigurationRequest_AUTO, false)
		if code := client.StatusCode(err); code != codes.InvalidArgument {
			t.Errorf("apply of garbage: %v", err)
		}
	})

	t.Run("install change applies live", func(t *testing.T) {
		before, _ := w.Node(addr)

		msg, err := apply(newImage, machine.ApplyConfigurationRequest_AUTO, false)
		if err != nil {
			t.Fatal(err)
		}

		if msg.GetModeDetails() != "Applied configuration without a reboot" || msg.GetMode() != machine.ApplyConfigurationRequest_NO_REBOOT {
			t.Errorf("install change answered %q (%s)", msg.GetModeDetails(), msg.GetMode())
		}

		time.Sleep(100 * time.Millisecond)

		if after, _ := w.Node(addr); after.Boots != before.Boots || !after.Up || after.Version != before.Version {
			t.Errorf("an install change rebooted or upgraded the node: %+v", after)
		}
	})

	t.Run("auto with a reboot", func(t *testing.T) {
		before, _ := w.Node(addr)

		msg, err := apply(envChange, machine.ApplyConfigurationRequest_AUTO, false)
		if err != nil {
			t.Fatal(err)
		}

		if !strings.HasPrefix(msg.GetModeDetails(), "Applied configuration with a reboot: this config change can't be applied in immediate mode") {
			t.Errorf("details %q", msg.GetModeDetails())
		}

		// The install image is used by the next upgrade; the running
		// version does not change.
		after := waitRebooted(t, w, addr, before.Boots)
		if after.Version != talosVersion {
			t.Errorf("version after the reboot %q", after.Version)
		}
	})
}

func TestRebootAndDownNodes(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 7)
	w := newWorld(t, talos.Options{RebootDelay: 300 * time.Millisecond, ServicesDelay: 300 * time.Millisecond})

	cp1, cp2, cp3 := tc.addrs[tc.cp(1)], tc.addrs[tc.cp(2)], tc.addrs[tc.cp(3)]
	worker := tc.addrs[tc.worker(1)]

	w.NeverBoot(cp3)

	for _, host := range []string{tc.cp(3), tc.cp(1), tc.worker(1)} {
		if err := w.Boot(t.Context(), tc.addrs[host], tc.configs[host]); err != nil {
			t.Fatal(err)
		}
	}

	waitUp(t, w, cp1, talos.ModeRunning)

	c := tc.client(t, cp1)

	t.Run("bootstrap before the services are up", func(t *testing.T) {
		err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
		if code := client.StatusCode(err); code != codes.FailedPrecondition {
			t.Fatalf("early bootstrap: %v, want FailedPrecondition", err)
		}
	})

	t.Run("kubeconfig before bootstrap", func(t *testing.T) {
		// machined generates it from the machine config, bootstrapped or not.
		data, err := c.Kubeconfig(t.Context())
		if err != nil {
			t.Fatalf("kubeconfig before bootstrap: %v", err)
		}

		checkKubeconfig(t, data, tc)

		if cl := w.Clusters(); len(cl) != 1 || cl[0].Bootstrapped {
			t.Fatalf("the cluster was bootstrapped meanwhile: %+v", cl)
		}
	})

	t.Run("never boots", func(t *testing.T) {
		if st, _ := w.Node(cp3); st.Up || st.Mode != talos.ModeBooting {
			t.Errorf("node that never boots: %+v", st)
		}
	})

	t.Run("never booted", func(t *testing.T) {
		_, err := tc.client(t, cp2).Version(t.Context())
		if code := client.StatusCode(err); code != codes.Unavailable {
			t.Errorf("version of a machine that is off: %v, want Unavailable", err)
		}
	})

	t.Run("bootstrap on a worker", func(t *testing.T) {
		waitUp(t, w, worker, talos.ModeRunning)

		eventually(t, "the worker's services", func() error {
			err := c.Bootstrap(client.WithNode(t.Context(), worker.String()), &machine.BootstrapRequest{})
			if code := client.StatusCode(err); code != codes.Unimplemented {
				return fmt.Errorf("bootstrap on a worker: %w", err)
			}

			return nil
		})
	})

	t.Run("kubeconfig on a worker", func(t *testing.T) {
		waitUp(t, w, worker, talos.ModeRunning)

		_, err := c.Kubeconfig(client.WithNode(t.Context(), worker.String()))
		if code := client.StatusCode(err); code != codes.Unimplemented ||
			!strings.Contains(err.Error(), "kubeconfig is only available on control plane nodes") {
			t.Fatalf("kubeconfig on a worker: %v, want Unimplemented", err)
		}
	})

	t.Run("reboot", func(t *testing.T) {
		eventually(t, "the bootstrap", func() error {
			return c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
		})

		before, _ := w.Node(cp1)

		if err := c.Reboot(t.Context()); err != nil {
			t.Fatal(err)
		}

		eventually(t, "the node to go down", func() error {
			if st, _ := w.Node(cp1); st.Up {
				return errors.New("still up")
			}

			return nil
		})

		conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(cp1, talos.APIPort).String(), time.Second)
		if err == nil {
			conn.Close()

			if st, _ := w.Node(cp1); !st.Up {
				t.Error("a down node accepted a connection")
			}
		}

		if _, err := c.Version(t.Context()); client.StatusCode(err) != codes.Unavailable {
			if st, _ := w.Node(cp1); !st.Up {
				t.Errorf("a down node answered: %v", err)
			}
		}

		waitRebooted(t, w, cp1, before.Boots)

		eventually(t, "the rebooted node to answer", func() error {
			_, err := c.Version(t.Context())

			return err
		})
	})

	t.Run("destroy and boot a new machine", func(t *testing.T) {
		if err := w.Destroy(worker); err != nil {
			t.Fatal(err)
		}

		if _, ok := w.Node(worker); ok {
			t.Fatal("a destroyed node is still known")
		}

		if err := w.Boot(t.Context(), worker, nil); err != nil {
			t.Fatal(err)
		}

		if st := waitUp(t, w, worker, talos.ModeMaintenance); st.Boots != 1 {
			t.Errorf("new machine %+v", st)
		}

		if err := w.Boot(t.Context(), worker, nil); err == nil {
			t.Error("a running node booted again")
		}
	})
}

func TestUpgrade(t *testing.T) {
	t.Parallel()

	tc := newTestCluster(t, 8)
	w := newWorld(t, talos.Options{})

	cp1 := tc.addrs[tc.cp(1)]

	if err := w.Boot(t.Context(), cp1, tc.configs[tc.cp(1)]); err != nil {
		t.Fatal(err)
	}

	waitUp(t, w, cp1, talos.ModeRunning)

	c := tc.client(t, cp1)

	eventually(t, "the bootstrap", func() error {
		return c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
	})

	upgrade := func(image string) talos.NodeState {
		t.Helper()

		before, _ := w.Node(cp1)

		//lint:ignore SA1019 the engine calls the MachineService upgrade the client still offers
		if _, err := c.Upgrade(t.Context(), image, false, false); err != nil {
			t.Fatal(err)
		}

		return waitRebooted(t, w, cp1, before.Boots)
	}

	t.Run("invalid image", func(t *testing.T) {
		//lint:ignore SA1019 the engine calls the MachineService upgrade the client still offers
		if _, err := c.Upgrade(t.Context(), "ghcr.io/siderolabs/installer:latest", false, false); err == nil {
			t.Error("upgrade to an image without a version")
		}
	})

	t.Run("upgrade", func(t *testing.T) {
		st := upgrade("factory.talos.dev/installer/abcdef:v1.13.9")
		if st.Version != "v1.13.9" || st.Schematic != "abcdef" {
			t.Errorf("after the upgrade %+v", st)
		}
	})

	t.Run("rollback", func(t *testing.T) {
		w.RollbackUpgrade(cp1, 1)

		st := upgrade("factory.talos.dev/installer/abcdef:v1.14.0")
		if st.Version != "v1.13.9" {
			t.Errorf("after a failed upgrade %+v", st)
		}
	})

	t.Run("lifecycle service", func(t *testing.T) {
		image := "factory.talos.dev/installer/fedcba:v1.14.0"

		// talosctl upgrade pulls the installer into the same store first.
		if _, err := pull(t.Context(), c, talos.InMemoryImages, image); err != nil {
			t.Fatal(err)
		}

		stream, err := c.LifecycleClient.Upgrade(t.Context(), &machine.LifecycleServiceUpgradeRequest{
			Containerd: &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_SYSTEM},
			Source:     &machine.InstallArtifactsSource{ImageName: image},
		})
		if err != nil {
			t.Fatal(err)
		}

		exit := int32(-1)

		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}

			if err != nil {
				t.Fatal(err)
			}

			if code, ok := resp.GetProgress().GetResponse().(*machine.LifecycleServiceInstallProgress_ExitCode); ok {
				exit = code.ExitCode
			}
		}

		if exit != 0 {
			t.Fatalf("exit code %d", exit)
		}

		if st, _ := w.Node(cp1); st.Version != "v1.13.9" {
			t.Errorf("the install changed the running version: %+v", st)
		}

		before, _ := w.Node(cp1)

		if err := c.Reboot(t.Context()); err != nil {
			t.Fatal(err)
		}

		if st := waitRebooted(t, w, cp1, before.Boots); st.Version != "v1.14.0" || st.Schematic != "fedcba" {
			t.Errorf("after the reboot %+v", st)
		}
	})
}

// checkKubeconfig checks an admin kubeconfig for the cluster.
func checkKubeconfig(t *testing.T, data []byte, tc *testCluster) {
	t.Helper()

	var kc struct {
		Clusters []struct {
			Name    string `yaml:"name"`
			Cluster struct {
				Server string `yaml:"server"`
				CA     string `yaml:"certificate-authority-data"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
		Users []struct {
			Name string `yaml:"name"`
			User struct {
				Cert string `yaml:"client-certificate-data"`
				Key  string `yaml:"client-key-data"`
			} `yaml:"user"`
		} `yaml:"users"`
		Contexts []struct {
			Name    string `yaml:"name"`
			Context struct {
				Cluster string `yaml:"cluster"`
				User    string `yaml:"user"`
			} `yaml:"context"`
		} `yaml:"contexts"`
		CurrentContext string `yaml:"current-context"`
	}

	if err := yaml.Unmarshal(data, &kc); err != nil {
		t.Fatalf("parsing the kubeconfig: %v", err)
	}

	if len(kc.Clusters) != 1 || len(kc.Users) != 1 || len(kc.Contexts) != 1 || kc.CurrentContext != kc.Contexts[0].Name ||
		kc.Contexts[0].Context.User != kc.Users[0].Name || kc.Contexts[0].Context.Cluster != kc.Clusters[0].Name {
		t.Fatalf("kubeconfig shape:\n%s", data)
	}

	if kc.Clusters[0].Cluster.Server != tc.endpoint {
		t.Errorf("server %q, want %q", kc.Clusters[0].Cluster.Server, tc.endpoint)
	}

	caPEM, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
	if err != nil || string(caPEM) != string(tc.bundle.Certs.K8s.Crt) {
		t.Fatalf("the kubeconfig CA is not the cluster's Kubernetes CA (%v)", err)
	}

	certPEM, err := base64.StdEncoding.DecodeString(kc.Users[0].User.Cert)
	if err != nil {
		t.Fatal(err)
	}

	keyPEM, err := base64.StdEncoding.DecodeString(kc.Users[0].User.Key)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("client key pair: %v", err)
	}

	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no client certificate")
	}

	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not chain to the cluster CA: %v", err)
	}

	if !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("client certificate organisations %v", cert.Subject.Organization)
	}
}

// checkHealthy runs the server-side health check and expects it to pass.
func checkHealthy(t *testing.T, c *client.Client, cps, workers []netip.Addr) {
	t.Helper()

	info := &clusterapi.ClusterInfo{}
	for _, a := range cps {
		info.ControlPlaneNodes = append(info.ControlPlaneNodes, a.String())
	}

	for _, a := range workers {
		info.WorkerNodes = append(info.WorkerNodes, a.String())
	}

	stream, err := c.ClusterHealthCheck(t.Context(), 10*time.Second, info)
	if err != nil {
		t.Fatal(err)
	}

	var lines []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatalf("health check: %v\n%s", err, strings.Join(lines, "\n"))
		}

		lines = append(lines, msg.GetMessage())
	}

	for _, want := range []string{"waiting for etcd to be healthy: OK", "waiting for all k8s nodes to report ready: OK"} {
		if !slices.Contains(lines, want) {
			t.Errorf("health check output lacks %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

// drainHealth reads a health check stream to its end.
func drainHealth(stream clusterapi.ClusterService_HealthCheckClient) error {
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return err
		}
	}
}
