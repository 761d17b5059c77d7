package openstack

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/availabilityzones"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

const (
	port1 = "11111111-1111-4111-8111-111111111111"
	port2 = "22222222-2222-4222-8222-222222222222"
)

// talosImage is an active raw image of a few KiB with min_disk 2.
func (l *lab) talosImage(t *testing.T) *images.Image {
	t.Helper()
	return l.activeImage(t, images.CreateOpts{Name: "talos", DiskFormat: "raw", ContainerFormat: "bare", MinDisk: 2},
		bytes.Repeat([]byte{0x42}, 8192))
}

// bootOpts is a boot-from-volume create request as production sends it.
func bootOpts(name, image, port string, size int) servers.CreateOpts {
	return servers.CreateOpts{
		Name: name, FlavorRef: "2", AvailabilityZone: "nova",
		Networks: []servers.Network{{Port: port}},
		BlockDevice: []servers.BlockDevice{{
			SourceType: servers.SourceImage, DestinationType: servers.DestinationVolume,
			UUID: image, VolumeSize: size, BootIndex: 0, DeleteOnTermination: true,
		}},
		Tags:        []string{"cluster=lab", "role=controlplane"},
		UserData:    []byte("#talos machine config\n"),
		Metadata:    map[string]string{"cluster": "lab"},
		ConfigDrive: new(true),
	}
}

func (l *lab) waitStatus(t *testing.T, id, status string) *servers.Server {
	t.Helper()
	var got *servers.Server
	eventually(t, id+" "+status, func() bool {
		s, err := servers.Get(t.Context(), l.compute, id).Extract()
		got = s
		return err == nil && s.Status == status
	})
	return got
}

func TestServerBootFromVolumeLifecycle(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{}, port1)
	img := l.talosImage(t)
	l.compute.Microversion = "2.52"

	res := servers.Create(t.Context(), l.compute, bootOpts("cp-1", img.ID, port1, 10), nil)
	created, err := res.Extract()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.AdminPass == "" || len(created.Links) != 2 ||
		res.Header.Get("Location") != l.srv.URL()+"/compute/v2.1/servers/"+created.ID ||
		res.Header.Get("OpenStack-API-Version") != "compute 2.52" || res.Header.Get("X-OpenStack-Nova-API-Version") != "2.52" {
		t.Errorf("create answer: %+v, headers %v", created, res.Header)
	}
	building, err := servers.Get(t.Context(), l.compute, created.ID).Extract()
	if err != nil || building.Status != "BUILD" || len(building.Addresses) != 0 {
		t.Errorf("right after create: %+v, %v", building, err)
	}
	if l.ports.device(port1) != created.ID {
		t.Error("the port was not bound to the server")
	}

	sv := l.waitStatus(t, created.ID, "ACTIVE")
	if sv.Image != nil || sv.Flavor["original_name"] != "gp.medium" || sv.Tags == nil || len(*sv.Tags) != 2 ||
		len(sv.AttachedVolumes) != 1 || sv.Metadata["cluster"] != "lab" || sv.LaunchedAt.IsZero() {
		t.Errorf("active server = %+v", sv)
	}
	addrs, _ := sv.Addresses["lab-net"].([]any)
	if len(addrs) != 1 || addrs[0].(map[string]any)["addr"] != "10.0.0.10" ||
		addrs[0].(map[string]any)["OS-EXT-IPS-MAC:mac_addr"] != "fa:16:3e:00:00:01" {
		t.Errorf("addresses = %v", sv.Addresses)
	}
	eventually(t, "ServerUp", func() bool { return slices.Equal(l.machines.of(created.ID), []string{"up"}) })
	l.machines.mu.Lock()
	info := l.machines.up[created.ID]
	l.machines.mu.Unlock()
	if string(info.UserData) != "#talos machine config\n" || info.Image != img.ID || info.Flavor != "gp.medium" ||
		info.AvailabilityZone != "nova" || len(info.Addrs) != 1 || info.Addrs[0].String() != "10.0.0.10" ||
		strings.Join(info.Tags, ",") != "cluster=lab,role=controlplane" || info.Name != "cp-1" {
		t.Errorf("ServerUp info = %+v", info)
	}

	// Below 2.47 the flavor is a link, below 2.26 there are no tags.
	l.compute.Microversion = "2.25"
	old, err := servers.Get(t.Context(), l.compute, created.ID).Extract()
	if err != nil || old.Flavor["id"] != "2" || old.Tags != nil {
		t.Errorf("at 2.25: flavor %v tags %v, %v", old.Flavor, old.Tags, err)
	}
	l.compute.Microversion = "2.100"

	// Reboot: REBOOT, down and up again; a second reboot meanwhile is a 409.
	if err := servers.Reboot(t.Context(), l.compute, created.ID, servers.RebootOpts{Type: servers.SoftReboot}).ExtractErr(); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if got, _ := servers.Get(t.Context(), l.compute, created.ID).Extract(); got.Status != "REBOOT" {
		t.Errorf("rebooting status = %s", got.Status)
	}
	err = servers.Reboot(t.Context(), l.compute, created.ID, servers.RebootOpts{Type: servers.SoftReboot}).ExtractErr()
	if code, body := apiError(t, err); code != http.StatusConflict {
		t.Errorf("reboot while rebooting: %d", code)
	} else if name, msg := novaMessage(t, body); name != "conflictingRequest" ||
		msg != "Cannot 'reboot' instance "+created.ID+" while it is in task_state rebooting" {
		t.Errorf("conflict = %s %q", name, msg)
	}
	l.waitStatus(t, created.ID, "ACTIVE")
	eventually(t, "reboot hooks", func() bool { return slices.Equal(l.machines.of(created.ID), []string{"up", "down", "up"}) })

	// Delete: deleting, then gone with its port unbound and volume deleted.
	if err := servers.Delete(t.Context(), l.compute, created.ID).ExtractErr(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got, err := servers.Get(t.Context(), l.compute, created.ID).Extract(); err == nil && got.TaskState != "deleting" {
		t.Errorf("task_state after delete = %q", got.TaskState)
	}
	eventually(t, "gone", func() bool {
		_, err := servers.Get(t.Context(), l.compute, created.ID).Extract()
		return gophercloud.ResponseCodeIs(err, http.StatusNotFound)
	})
	_, err = servers.Get(t.Context(), l.compute, created.ID).Extract()
	if _, body := apiError(t, err); !strings.Contains(body, `"itemNotFound"`) || !strings.Contains(body, "Instance "+created.ID+" could not be found.") {
		t.Errorf("404 body = %s", body)
	}
	eventually(t, "delete hooks", func() bool {
		return slices.Equal(l.machines.of(created.ID), []string{"up", "down", "up", "down", "deleted"})
	})
	l.srv.mu.Lock()
	volumes := len(l.srv.nova.volumes)
	l.srv.mu.Unlock()
	if l.ports.device(port1) != "" || volumes != 0 {
		t.Errorf("after delete: port device %q, %d volumes", l.ports.device(port1), volumes)
	}
}

func TestServerCreateRefusals(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{}, port1, port2)
	img := l.talosImage(t)
	queued, err := images.Create(t.Context(), l.image, images.CreateOpts{Name: "queued", DiskFormat: "raw", ContainerFormat: "bare"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	// port2 belongs to another server.
	if _, _, err := l.ports.bindPort(port2, "someone-else", "nova"); err != nil {
		t.Fatal(err)
	}
	base := func(edit func(o *servers.CreateOpts)) servers.CreateOpts {
		o := bootOpts("refused", img.ID, port1, 10)
		edit(&o)
		return o
	}
	for _, c := range []struct {
		name         string
		microversion string
		opts         servers.CreateOpts
		status       int
		message      string
	}{
		{"flavor by name", "2.52", base(func(o *servers.CreateOpts) { o.FlavorRef = "gp.medium" }), 400,
			"Flavor gp.medium could not be found."},
		{"unknown zone", "2.52", base(func(o *servers.CreateOpts) { o.AvailabilityZone = "az-9" }), 400,
			"The requested availability zone is not available"},
		{"image not active", "2.52", base(func(o *servers.CreateOpts) { o.BlockDevice[0].UUID = queued.ID }), 400,
			"Image None is not active."},
		{"unknown image", "2.52", base(func(o *servers.CreateOpts) { o.BlockDevice[0].UUID = port2 }), 400,
			"Block Device Mapping is Invalid: failed to get image " + port2 + "."},
		{"volume under min_disk", "2.52", base(func(o *servers.CreateOpts) { o.BlockDevice[0].VolumeSize = 1 }), 400,
			"Volume is smaller than the minimum size specified in image metadata. Volume size is 1073741824 bytes, minimum size is 2147483648 bytes."},
		{"unknown port", "2.52", base(func(o *servers.CreateOpts) {
			o.Networks = []servers.Network{{Port: "33333333-3333-4333-8333-333333333333"}}
		}), 400,
			"Port id 33333333-3333-4333-8333-333333333333 could not be found."},
		{"port in use", "2.52", base(func(o *servers.CreateOpts) { o.Networks = []servers.Network{{Port: port2}} }), 409,
			"Port " + port2 + " is still in use."},
		{"tags before 2.52", "2.51", base(func(o *servers.CreateOpts) {}), 400,
			"Additional properties are not allowed ('tags' was unexpected)"},
		{"too many tags", "2.52", base(func(o *servers.CreateOpts) { o.Tags = make([]string, 51) }), 400,
			"is too long"},
		{"tag with a comma", "2.52", base(func(o *servers.CreateOpts) { o.Tags = []string{"a,b"} }), 400,
			"'a,b' does not match '^[^,/]*$'"},
		{"no image at all", "2.52", base(func(o *servers.CreateOpts) { o.BlockDevice = nil }), 400,
			"Missing imageRef attribute"},
	} {
		l.compute.Microversion = c.microversion
		_, err := servers.Create(t.Context(), l.compute, c.opts, nil).Extract()
		if err == nil {
			t.Errorf("%s: created", c.name)
			continue
		}
		code, body := apiError(t, err)
		name, msg := novaMessage(t, body)
		if code != c.status || !strings.Contains(msg, c.message) || (code == 400 && name != "badRequest") {
			t.Errorf("%s: %d %s %q, want %d %q", c.name, code, name, msg, c.status, c.message)
		}
	}
	// gophercloud encodes user data that is not base64; a raw client may not.
	resp, body := l.raw(t, http.MethodPost, "/compute/v2.1/servers", map[string]string{"Content-Type": "application/json"},
		`{"server": {"name": "x", "flavorRef": "1", "imageRef": "`+img.ID+`", "user_data": "not base64!"}}`, false)
	if _, msg := novaMessage(t, body); resp.StatusCode != 400 ||
		msg != "Invalid input for field/attribute user_data. Value: not base64!. 'not base64!' is not a 'base64'" {
		t.Errorf("bad base64: %d %s", resp.StatusCode, body)
	}
	if l.ports.device(port1) != "" {
		t.Error("a refused create left its port bound")
	}
	l.srv.mu.Lock()
	n := len(l.srv.nova.servers)
	l.srv.mu.Unlock()
	if n != 0 {
		t.Errorf("%d servers exist after refusals", n)
	}
}

func TestServerBuildFailures(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{}, port1, port2)
	img := l.talosImage(t)
	l.compute.Microversion = "2.100"

	l.srv.FailBuild("doomed", "No valid host was found. ")
	sv, err := servers.Create(t.Context(), l.compute, bootOpts("doomed", img.ID, port1, 10), nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	failed := l.waitStatus(t, sv.ID, "ERROR")
	if failed.Fault.Code != 500 || failed.Fault.Message != "No valid host was found. " || failed.Fault.Created.IsZero() ||
		len(failed.Addresses) != 0 {
		t.Errorf("failed server = %+v", failed)
	}
	if l.ports.device(port1) != "" {
		t.Error("the failed build kept its port")
	}

	// An image larger than the volume: Cinder refuses the volume, the
	// build aborts.
	big := l.activeImage(t, images.CreateOpts{Name: "big", DiskFormat: "raw", ContainerFormat: "bare"}, []byte("small"))
	l.srv.mu.Lock()
	l.srv.glance.images[big.ID].size = 1<<30 + 1 // as if 1 GiB and a byte were uploaded
	l.srv.mu.Unlock()
	sv2, err := servers.Create(t.Context(), l.compute, bootOpts("big", big.ID, port2, 1), nil).Extract()
	if err == nil {
		failed = l.waitStatus(t, sv2.ID, "ERROR")
		if !strings.HasPrefix(failed.Fault.Message, "Build of instance "+sv2.ID+" aborted: Invalid input received: Invalid input received: Size of specified image 2GB is larger than volume size 1GB.") {
			t.Errorf("fault = %q", failed.Fault.Message)
		}
	} else {
		t.Errorf("create with a small volume: %v", err)
	}
	if got := l.machines.of(sv.ID); len(got) != 0 {
		t.Errorf("hooks of a failed build: %v", got)
	}
}

func TestServerListFilters(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{AvailabilityZones: []string{"az-1", "az-2"}})
	img := l.talosImage(t)
	l.compute.Microversion = "2.52"
	ids := map[string]string{}
	for _, c := range []struct {
		name string
		tags []string
	}{{"lab-cp-1", []string{"cp", "lab"}}, {"lab-worker-1", []string{"worker", "lab"}}, {"other", []string{"other"}}} {
		o := servers.CreateOpts{Name: c.name, FlavorRef: "1", ImageRef: img.ID, Tags: c.tags, Networks: "none"}
		sv, err := servers.Create(t.Context(), l.compute, o, nil).Extract()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ids[c.name] = sv.ID
	}
	l.waitStatus(t, ids["other"], "ACTIVE")
	l.srv.FailBuild("broken", "boom")
	broken, _ := servers.Create(t.Context(), l.compute, servers.CreateOpts{Name: "broken", FlavorRef: "1", ImageRef: img.ID, Networks: "none"}, nil).Extract()
	l.waitStatus(t, broken.ID, "ERROR")
	for _, c := range []struct {
		name string
		opts servers.ListOpts
		want string
	}{
		{"all, newest first", servers.ListOpts{}, "broken,other,lab-worker-1,lab-cp-1"},
		{"name regex", servers.ListOpts{Name: "^lab-.*-1$"}, "lab-worker-1,lab-cp-1"},
		{"name substring, any case", servers.ListOpts{Name: "CP"}, "lab-cp-1"},
		{"tags (all)", servers.ListOpts{Tags: "lab,cp"}, "lab-cp-1"},
		{"tags-any", servers.ListOpts{TagsAny: "cp,other"}, "other,lab-cp-1"},
		{"not-tags-any", servers.ListOpts{NotTagsAny: "lab"}, "broken,other"},
		{"status", servers.ListOpts{Status: "ERROR"}, "broken"},
		{"paged", servers.ListOpts{Limit: 1}, "broken,other,lab-worker-1,lab-cp-1"},
	} {
		pages, err := servers.List(l.compute, c.opts).AllPages(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		all, err := servers.ExtractServers(pages)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range all {
			names = append(names, s.Name)
		}
		if got := strings.Join(names, ","); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if _, err := servers.List(l.compute, servers.ListOpts{Name: "("}).AllPages(t.Context()); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("bad regex: %v", err)
	}
}

func TestComputeDiscoveryFlavorsZonesAndMicroversions(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{AvailabilityZones: []string{"az-1", "az-2"}})
	pages, err := flavors.ListDetail(l.compute, nil).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fl, _ := flavors.ExtractFlavors(pages)
	if len(fl) != 4 || fl[1].Name != "gp.medium" || fl[1].VCPUs != 2 || fl[1].RAM != 4096 || fl[1].Disk != 40 {
		t.Errorf("flavors = %+v", fl)
	}
	if f, err := flavors.Get(t.Context(), l.compute, "3").Extract(); err != nil || f.Name != "gp.large" {
		t.Errorf("flavor 3 = %+v, %v", f, err)
	}
	_, err = flavors.Get(t.Context(), l.compute, "gp.large").Extract()
	if code, body := apiError(t, err); code != 404 || !strings.Contains(body, "Flavor gp.large could not be found.") {
		t.Errorf("flavor by name: %d %s", code, body)
	}
	zp, err := availabilityzones.List(l.compute).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	zones, _ := availabilityzones.ExtractAvailabilityZones(zp)
	if len(zones) != 2 || zones[0].ZoneName != "az-1" || !zones[1].ZoneState.Available {
		t.Errorf("zones = %+v", zones)
	}

	for _, c := range []struct {
		name, header, value string
		status              int
		want                string
	}{
		{"none", "", "", 200, "2.1"},
		{"legacy", "X-OpenStack-Nova-API-Version", "2.96", 200, "2.96"},
		{"new header", "OpenStack-API-Version", "compute 2.100", 200, "2.100"},
		{"latest", "OpenStack-API-Version", "compute latest", 200, "2.100"},
		{"too new", "OpenStack-API-Version", "compute 2.101", 406, "Version 2.101 is not supported by the API. Minimum is 2.1 and maximum is 2.100."},
		{"malformed", "X-OpenStack-Nova-API-Version", "2.x", 400, "API Version String 2.x is of invalid format. Must be of format MajorNum.MinorNum."},
	} {
		h := map[string]string{}
		if c.header != "" {
			h[c.header] = c.value
		}
		resp, body := l.raw(t, http.MethodGet, "/compute/v2.1/flavors", h, "", false)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
			continue
		}
		if c.status == 200 && resp.Header.Get("X-OpenStack-Nova-API-Version") != c.want {
			t.Errorf("%s: version %q", c.name, resp.Header.Get("X-OpenStack-Nova-API-Version"))
		}
		if c.status != 200 && !strings.Contains(body, c.want) {
			t.Errorf("%s: body %s", c.name, body)
		}
	}
	resp, body := l.raw(t, http.MethodGet, "/compute/", nil, "", true)
	if resp.StatusCode != 200 || !strings.Contains(body, `"version":"2.100"`) || !strings.Contains(body, `"min_version":"2.1"`) {
		t.Errorf("GET /compute/: %d %s", resp.StatusCode, body)
	}
	if resp, _ := l.raw(t, http.MethodGet, "/compute/v2.1/", nil, "", true); resp.StatusCode != 200 {
		t.Errorf("GET /compute/v2.1/: %d", resp.StatusCode)
	}

	l.srv.FailNext("compute.server.list", 1, http.StatusServiceUnavailable)
	_, err = servers.List(l.compute, nil).AllPages(t.Context())
	if code, body := apiError(t, err); code != 503 || !strings.Contains(body, `"serviceUnavailable"`) {
		t.Errorf("injected failure: %d %s", code, body)
	}
}

func TestServerStopStartAndTags(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{})
	img := l.talosImage(t)
	l.compute.Microversion = "2.52"
	sv, err := servers.Create(t.Context(), l.compute, servers.CreateOpts{
		Name: "s", FlavorRef: "1", ImageRef: img.ID, Networks: "none", ConfigDrive: new(true),
		UserData: []byte(base64.StdEncoding.EncodeToString([]byte("already encoded"))),
	}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	err = servers.Reboot(t.Context(), l.compute, sv.ID, servers.RebootOpts{Type: servers.HardReboot}).ExtractErr()
	if code, body := apiError(t, err); code != 409 || !strings.Contains(body, "while it is in vm_state building") {
		t.Errorf("reboot while building: %d %s", code, body)
	}
	l.waitStatus(t, sv.ID, "ACTIVE")
	resp, body := l.raw(t, http.MethodPost, "/compute/v2.1/servers/"+sv.ID+"/action", map[string]string{"Content-Type": "application/json"}, `{"os-stop": null}`, false)
	if resp.StatusCode != 202 {
		t.Fatalf("os-stop: %d %s", resp.StatusCode, body)
	}
	l.waitStatus(t, sv.ID, "SHUTOFF")
	resp, _ = l.raw(t, http.MethodPost, "/compute/v2.1/servers/"+sv.ID+"/action", nil, `{"os-start": null}`, false)
	if resp.StatusCode != 202 {
		t.Fatalf("os-start: %d", resp.StatusCode)
	}
	l.waitStatus(t, sv.ID, "ACTIVE")
	eventually(t, "stop/start hooks", func() bool { return slices.Equal(l.machines.of(sv.ID), []string{"up", "down", "up"}) })
	l.machines.mu.Lock()
	ud := string(l.machines.up[sv.ID].UserData)
	l.machines.mu.Unlock()
	if ud != "already encoded" {
		t.Errorf("user data = %q", ud)
	}

	h := map[string]string{"X-OpenStack-Nova-API-Version": "2.26", "Content-Type": "application/json"}
	if resp, _ := l.raw(t, http.MethodPut, "/compute/v2.1/servers/"+sv.ID+"/tags/role=worker", h, "", false); resp.StatusCode != 201 {
		t.Errorf("add tag: %d", resp.StatusCode)
	}
	if resp, body := l.raw(t, http.MethodGet, "/compute/v2.1/servers/"+sv.ID+"/tags", h, "", false); resp.StatusCode != 200 || body != `{"tags":["role=worker"]}` {
		t.Errorf("tags: %d %s", resp.StatusCode, body)
	}
	if resp, body := l.raw(t, http.MethodDelete, "/compute/v2.1/servers/"+sv.ID+"/tags/nope", h, "", false); resp.StatusCode != 404 ||
		!strings.Contains(body, "Instance "+sv.ID+" has no tag 'nope'") {
		t.Errorf("delete missing tag: %d %s", resp.StatusCode, body)
	}
	if resp, _ := l.raw(t, http.MethodGet, "/compute/v2.1/servers/"+sv.ID+"/tags", nil, "", false); resp.StatusCode != 404 {
		t.Errorf("tags at 2.1: %d", resp.StatusCode)
	}
}
