package openstack

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// serverCreateProps are the properties of "server" in POST /servers, with
// the first microversion that accepts each (nova/api/openstack/compute/
// schemas/servers.py create .. create_v294). personality ends at 2.56.
var serverCreateProps = map[string]microversion{
	"name": {2, 1}, "imageRef": {2, 1}, "flavorRef": {2, 1}, "adminPass": {2, 1},
	"metadata": {2, 1}, "networks": {2, 1}, "OS-DCF:diskConfig": {2, 1},
	"accessIPv4": {2, 1}, "accessIPv6": {2, 1}, "personality": {2, 1},
	"availability_zone": {2, 1}, "block_device_mapping": {2, 1},
	"block_device_mapping_v2": {2, 1}, "config_drive": {2, 1}, "key_name": {2, 1},
	"min_count": {2, 1}, "max_count": {2, 1}, "return_reservation_id": {2, 1},
	"security_groups": {2, 1}, "user_data": {2, 1}, "description": {2, 19},
	"tags": {2, 52}, "trusted_image_certificates": {2, 63}, "host": {2, 74},
	"hypervisor_hostname": {2, 74}, "hostname": {2, 90},
}

// createRequest is the part of POST /servers the emulator reads.
type createRequest struct {
	Name             string            `json:"name"`
	ImageRef         string            `json:"imageRef"`
	FlavorRef        json.RawMessage   `json:"flavorRef"`
	AdminPass        string            `json:"adminPass"`
	Metadata         map[string]string `json:"metadata"`
	Networks         json.RawMessage   `json:"networks"`
	AvailabilityZone *string           `json:"availability_zone"`
	BDMv2            []bdmRequest      `json:"block_device_mapping_v2"`
	BDMLegacy        []json.RawMessage `json:"block_device_mapping"`
	ConfigDrive      *bool             `json:"config_drive"`
	KeyName          *string           `json:"key_name"`
	SecurityGroups   []struct {
		Name string `json:"name"`
	} `json:"security_groups"`
	UserData    *string  `json:"user_data"`
	Description *string  `json:"description"`
	Tags        []string `json:"tags"`
	Hostname    string   `json:"hostname"`
	AccessIPv4  string   `json:"accessIPv4"`
	AccessIPv6  string   `json:"accessIPv6"`
	DiskConfig  string   `json:"OS-DCF:diskConfig"`
}

// bdmRequest is one entry of block_device_mapping_v2.
type bdmRequest struct {
	SourceType          string          `json:"source_type"`
	DestinationType     string          `json:"destination_type"`
	UUID                string          `json:"uuid"`
	BootIndex           json.RawMessage `json:"boot_index"`
	VolumeSize          *int            `json:"volume_size"`
	DeleteOnTermination any             `json:"delete_on_termination"`
}

// networkRequest is one entry of "networks".
type networkRequest struct {
	Port    *string `json:"port"`
	UUID    *string `json:"uuid"`
	FixedIP *string `json:"fixed_ip"`
}

// errCreate is a refused create: status and Nova's message.
type errCreate struct {
	status  int
	message string
}

func (e *errCreate) Error() string { return e.message }

func novaBadRequest(msg string) error { return &errCreate{http.StatusBadRequest, msg} }

// createServer answers POST /servers.
func (s *Server) createServer(w http.ResponseWriter, r *http.Request) int {
	v := requestVersion(r)
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return novaFault(w, http.StatusRequestEntityTooLarge, "Request is too large.")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return novaFault(w, http.StatusBadRequest, "Malformed request body")
	}
	for k := range top {
		if k != "server" && k != "os:scheduler_hints" && k != "OS-SCH-HNT:scheduler_hints" {
			return novaFault(w, http.StatusBadRequest, fmt.Sprintf("Additional properties are not allowed (%s was unexpected)", pyRepr(k)))
		}
	}
	body, ok := top["server"]
	if !ok {
		return novaFault(w, http.StatusBadRequest, "'server' is a required property")
	}
	var props map[string]json.RawMessage
	if err := json.Unmarshal(body, &props); err != nil {
		return novaFault(w, http.StatusBadRequest, invalidField("server", jsonValue(body), jsonValue(body)+" is not of type 'object'"))
	}
	var unexpected []string
	for k := range props {
		first, known := serverCreateProps[k]
		if !known || !v.atLeast(first.major, first.minor) || (k == "personality" && v.atLeast(2, 57)) {
			unexpected = append(unexpected, pyRepr(k))
		}
	}
	if len(unexpected) > 0 {
		sort.Strings(unexpected)
		verb := "was"
		if len(unexpected) > 1 {
			verb = "were"
		}
		return novaFault(w, http.StatusBadRequest, invalidField("server", jsonValue(body),
			fmt.Sprintf("Additional properties are not allowed (%s %s unexpected)", strings.Join(unexpected, ", "), verb)))
	}
	required := []string{"name", "flavorRef"}
	if v.atLeast(2, 37) {
		required = append(required, "networks")
	}
	for _, k := range required {
		if _, ok := props[k]; !ok {
			return novaFault(w, http.StatusBadRequest, invalidField("server", jsonValue(body), pyRepr(k)+" is a required property"))
		}
	}
	var req createRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return novaFault(w, http.StatusBadRequest, invalidField("server", jsonValue(body), err.Error()))
	}
	var hints map[string]any
	for _, k := range []string{"os:scheduler_hints", "OS-SCH-HNT:scheduler_hints"} {
		if h, ok := top[k]; ok && hints == nil {
			_ = json.Unmarshal(h, &hints)
		}
	}
	if hints == nil {
		hints = map[string]any{}
	}
	id, adminPass, err := s.create(v, &req, hints)
	if err != nil {
		var ce *errCreate
		if errors.As(err, &ce) {
			return novaFault(w, ce.status, ce.message)
		}
		return novaFault(w, http.StatusInternalServerError, err.Error())
	}
	groups := []map[string]string{}
	for _, g := range req.SecurityGroups {
		groups = append(groups, map[string]string{"name": g.Name})
	}
	if req.SecurityGroups == nil {
		groups = []map[string]string{{"name": "default"}}
	}
	links := s.computeLinks("servers", id)
	w.Header().Set("Location", links[0]["href"])
	return writeJSON(w, http.StatusAccepted, map[string]any{"server": map[string]any{
		"id": id, "links": links, "OS-DCF:diskConfig": diskConfig(req.DiskConfig),
		"security_groups": groups, "adminPass": adminPass,
	}})
}

func diskConfig(c string) string {
	if c == "AUTO" {
		return "AUTO"
	}
	return "MANUAL"
}

// create validates a create request in Nova's order and makes the server.
func (s *Server) create(v microversion, req *createRequest, hints map[string]any) (id, adminPass string, err error) {
	// JSON-schema checks.
	if req.Name == "" || len([]rune(req.Name)) > 255 {
		msg := pyRepr(req.Name) + " should be non-empty"
		if req.Name != "" {
			msg = pyRepr(req.Name) + " is too long"
		}
		return "", "", novaBadRequest(invalidField("name", req.Name, msg))
	}
	if !validName(req.Name) {
		return "", "", novaBadRequest(invalidNameMessage)
	}
	var userData []byte
	if req.UserData != nil {
		ud := *req.UserData
		if len(ud) > 65535 {
			return "", "", novaBadRequest(invalidField("user_data", ud, pyRepr(ud)+" is too long"))
		}
		var ok bool
		if userData, ok = decodeUserData(ud); !ok {
			return "", "", novaBadRequest(invalidField("user_data", ud, pyRepr(ud)+" is not a 'base64'"))
		}
	}
	if req.Tags != nil {
		if msg := tagsError(req.Tags); msg != "" {
			return "", "", novaBadRequest(msg)
		}
	}
	if req.AvailabilityZone != nil && (*req.AvailabilityZone == "" || !validName(*req.AvailabilityZone)) {
		if *req.AvailabilityZone == "" {
			return "", "", novaBadRequest(invalidField("availability_zone", "", "'' should be non-empty"))
		}
		return "", "", novaBadRequest(invalidNameMessage)
	}
	nets, auto, err := parseNetworks(v, req.Networks)
	if err != nil {
		return "", "", err
	}
	if req.BDMLegacy != nil && req.BDMv2 != nil {
		return "", "", novaBadRequest("Using different block_device_mapping syntaxes is not allowed in the same request.")
	}
	if req.BDMLegacy != nil {
		return "", "", novaBadRequest("Block Device Mapping is Invalid: the legacy block_device_mapping syntax is not supported by this emulator.")
	}
	root, err := rootBDM(req)
	if err != nil {
		return "", "", err
	}
	if req.ImageRef == "" && len(req.BDMv2) == 0 {
		return "", "", novaBadRequest("Missing imageRef attribute")
	}
	flavorID := flavorRefID(req.FlavorRef)

	s.mu.Lock()
	defer s.mu.Unlock()
	flavor, ok := s.flavorByID(flavorID)
	if !ok {
		return "", "", novaBadRequest("Flavor " + flavorID + " could not be found.")
	}
	zone := s.zones()[0]
	requestedZone := ""
	if req.AvailabilityZone != nil {
		requestedZone = *req.AvailabilityZone
		if !contains(s.zones(), requestedZone) {
			return "", "", novaBadRequest("The requested availability zone is not available")
		}
		zone = requestedZone
	}
	// The image of the root disk.
	var img *glanceImage
	bootImage := req.ImageRef
	if req.ImageRef != "" {
		img = s.glance.images[imageIDFromHref(req.ImageRef)]
		if img == nil {
			return "", "", novaBadRequest("Can not find requested image")
		}
		bootImage = img.id
	} else if root != nil {
		img = s.glance.images[root.UUID]
		if img == nil {
			return "", "", novaBadRequest("Block Device Mapping is Invalid: failed to get image " + root.UUID + ".")
		}
		bootImage = img.id
	}
	if auto {
		return "", "", novaBadRequest("Unable to automatically allocate a network for project " + s.opts.ProjectID)
	}

	id = uuid.NewString()
	seam := s.portSeam()
	var ports []serverPort
	rollback := func() {
		seam.unbindPorts(id)
		for _, p := range ports {
			if p.allocated {
				seam.releasePort(p.id)
			}
		}
	}
	for _, n := range nets {
		if n.Port != nil {
			addrs, mac, err := seam.bindPort(*n.Port, id, zone)
			if err != nil {
				rollback()
				if errors.Is(err, errPortInUse) {
					return "", "", &errCreate{http.StatusConflict, "Port " + *n.Port + " is still in use."}
				}
				return "", "", novaBadRequest("Port id " + *n.Port + " could not be found.")
			}
			ports = append(ports, serverPort{id: *n.Port, network: seam.networkNameOfPort(*n.Port), addrs: addrs, mac: mac})
			continue
		}
		portID, addrs, mac, err := seam.allocatePort(*n.UUID, id, zone)
		if err != nil {
			rollback()
			return "", "", novaBadRequest("Network " + *n.UUID + " could not be found.")
		}
		ports = append(ports, serverPort{id: portID, network: seam.networkNameOfPort(portID), addrs: addrs, mac: mac, allocated: true})
	}
	for i := range ports {
		if ports[i].network == "" {
			ports[i].network = ports[i].id
		}
	}
	if root != nil && root.DestinationType == "volume" && (root.VolumeSize == nil || *root.VolumeSize == 0) {
		rollback()
		return "", "", novaBadRequest("Images with destination_type 'volume' need to have a non-zero size specified")
	}
	// _validate_flavor_image: the image must be active, then its min_ram
	// and min_disk must fit.
	if img != nil {
		imageID := "None"
		if req.ImageRef != "" {
			imageID = img.id
		}
		if img.status != "active" {
			rollback()
			return "", "", novaBadRequest("Image " + imageID + " is not active.")
		}
		if flavor.RAMMB < img.minRAM {
			rollback()
			return "", "", novaBadRequest("Flavor's memory is too small for requested image.")
		}
		minDisk := int64(img.minDisk) << 30
		if root != nil && root.DestinationType == "volume" {
			if size := int64(*root.VolumeSize) << 30; minDisk > size {
				rollback()
				return "", "", novaBadRequest(fmt.Sprintf("Volume is smaller than the minimum size specified in image metadata. Volume size is %d bytes, minimum size is %d bytes.", size, minDisk))
			}
		} else if disk := int64(flavor.DiskGB) << 30; disk != 0 {
			if img.size > disk {
				rollback()
				return "", "", novaBadRequest(fmt.Sprintf("Flavor's disk is too small for requested image. Flavor disk is %d bytes, image is %d bytes.", disk, img.size))
			}
			if minDisk > disk {
				rollback()
				return "", "", novaBadRequest(fmt.Sprintf("Flavor's disk is smaller than the minimum size specified in image metadata. Flavor disk is %d bytes, minimum size is %d bytes.", disk, minDisk))
			}
		}
	}

	now := s.now().UTC()
	sv := &server{
		id: id, name: req.Name, created: now, updated: now, flavor: flavor,
		imageRef: req.ImageRef, bootImage: bootImage, zone: zone, requestedZone: requestedZone,
		vmState: vmBuilding, taskState: taskSpawning, powerState: powerNoState,
		metadata: req.Metadata, tags: dedupTags(req.Tags), userData: userData,
		configDrive: req.ConfigDrive != nil && *req.ConfigDrive,
		accessIPv4:  req.AccessIPv4, accessIPv6: req.AccessIPv6,
		schedulerHints: hints, ports: ports,
	}
	if img != nil {
		sv.imageRef = ""
		if req.ImageRef != "" {
			sv.imageRef = img.id
		}
	}
	if req.KeyName != nil {
		sv.keyName = *req.KeyName
	}
	sv.description, sv.hasDescription = req.Name, true
	if v.atLeast(2, 19) {
		sv.hasDescription = req.Description != nil
		if req.Description != nil {
			sv.description = *req.Description
		}
	}
	sv.hostname = sanitizeHostname(req.Name, id)
	if req.Hostname != "" {
		sv.hostname = req.Hostname
	}
	for _, g := range req.SecurityGroups {
		sv.securityGroups = append(sv.securityGroups, g.Name)
	}
	if req.SecurityGroups == nil {
		sv.securityGroups = []string{"default"}
	}
	var tooSmall string
	if root != nil && root.DestinationType == "volume" {
		vol := &bootVolume{id: uuid.NewString(), image: img.id, server: id, sizeGB: *root.VolumeSize}
		imageGB := (img.size + 1<<30 - 1) >> 30
		if imageGB > int64(vol.sizeGB) {
			// Cinder refuses to create the volume; the build aborts.
			tooSmall = fmt.Sprintf("Build of instance %s aborted: Invalid input received: Invalid input received: "+
				"Size of specified image %dGB is larger than volume size %dGB. (HTTP 400) (Request-ID: req-%s)",
				id, imageGB, vol.sizeGB, uuid.NewString())
		} else {
			s.nova.volumes[vol.id] = vol
			sv.volumes = append(sv.volumes, attachedVolume{id: vol.id, deleteOnTermination: truthy(root.DeleteOnTermination)})
		}
	}
	if q := s.nova.failBuild[req.Name]; len(q) > 0 {
		sv.failMessage = q[0]
		if len(q) == 1 {
			delete(s.nova.failBuild, req.Name)
		} else {
			s.nova.failBuild[req.Name] = q[1:]
		}
	}
	if tooSmall != "" && sv.failMessage == "" {
		sv.failMessage = tooSmall
	}
	if v.atLeast(2, 52) && sv.tags == nil {
		sv.tags = []string{}
	}
	s.nova.servers[id] = sv
	s.nova.order = append(s.nova.order, id)
	s.after(sv, s.finishBuild)

	adminPass = req.AdminPass
	if adminPass == "" {
		adminPass = generatePassword()
	}
	return id, adminPass, nil
}

// finishBuild ends a server's BUILD: ACTIVE and running, or ERROR with a
// fault when the build was made to fail. The caller holds s.mu.
func (s *Server) finishBuild(sv *server) {
	if sv.failMessage != "" {
		sv.vmState, sv.taskState, sv.powerState = vmError, "", powerNoState
		sv.fault = &serverFault{code: 500, message: sv.failMessage, created: s.now().UTC()}
		s.releasePorts(sv)
		return
	}
	sv.vmState, sv.taskState, sv.powerState = vmActive, "", powerRunning
	sv.launched = s.now().UTC()
	s.serverUp(sv)
}

// releasePorts unbinds the server's ports and deletes those Nova created.
// The caller holds s.mu.
func (s *Server) releasePorts(sv *server) {
	seam := s.portSeam()
	seam.unbindPorts(sv.id)
	for _, p := range sv.ports {
		if p.allocated {
			seam.releasePort(p.id)
		}
	}
	sv.ports = nil
}

// parseNetworks checks "networks" as Nova's schema and
// _get_requested_networks do. auto is true for "auto".
func parseNetworks(v microversion, raw json.RawMessage) (nets []networkRequest, auto bool, err error) {
	if raw == nil || string(raw) == "null" {
		return nil, false, nil
	}
	var word string
	if json.Unmarshal(raw, &word) == nil {
		if v.atLeast(2, 37) && (word == "auto" || word == "none") {
			return nil, word == "auto", nil
		}
		return nil, false, novaBadRequest(invalidField("networks", word, pyRepr(word)+" is not of type 'array'"))
	}
	if err := json.Unmarshal(raw, &nets); err != nil {
		return nil, false, novaBadRequest(invalidField("networks", jsonValue(raw), jsonValue(raw)+" is not of type 'array'"))
	}
	seen := map[string]bool{}
	for _, n := range nets {
		if n.Port != nil {
			if !isUUID(*n.Port) {
				return nil, false, novaBadRequest(invalidField("port", *n.Port, pyRepr(*n.Port)+" is not valid under any of the given schemas"))
			}
			if seen[*n.Port] {
				return nil, false, novaBadRequest("Port ID '" + *n.Port + "' was specified twice: you cannot attach a port multiple times.")
			}
			if n.FixedIP != nil {
				return nil, false, novaBadRequest("Specified Fixed IP '" + *n.FixedIP + "' cannot be used with port '" + *n.Port + "': the two cannot be specified together.")
			}
			seen[*n.Port] = true
			continue
		}
		if n.UUID == nil {
			return nil, false, novaBadRequest("Bad network format: missing 'uuid'")
		}
		if !isUUID(*n.UUID) {
			if v.atLeast(2, 37) {
				return nil, false, novaBadRequest(invalidField("uuid", *n.UUID, pyRepr(*n.UUID)+" is not a 'uuid'"))
			}
			return nil, false, novaBadRequest("Bad networks format: network uuid is not in proper format (" + *n.UUID + ")")
		}
	}
	return nets, false, nil
}

// rootBDM checks block_device_mapping_v2 and returns its boot device
// (boot_index 0), or nil without one.
func rootBDM(req *createRequest) (*bdmRequest, error) {
	var root *bdmRequest
	var indexes []int
	for i := range req.BDMv2 {
		b := &req.BDMv2[i]
		switch b.SourceType {
		case "image", "":
		case "volume", "snapshot", "blank":
			return nil, novaBadRequest("Block Device Mapping is Invalid: source_type " + b.SourceType + " is not supported by this emulator.")
		default:
			return nil, novaBadRequest(invalidField("source_type", b.SourceType, pyRepr(b.SourceType)+" is not one of ['volume', 'image', 'snapshot', 'blank']"))
		}
		if b.DestinationType != "" && b.DestinationType != "local" && b.DestinationType != "volume" {
			return nil, novaBadRequest(invalidField("destination_type", b.DestinationType, pyRepr(b.DestinationType)+" is not one of ['local', 'volume']"))
		}
		if b.UUID == "" {
			return nil, novaBadRequest("Block Device Mapping is Invalid: Missing device UUID.")
		}
		idx, ok := bootIndex(b.BootIndex)
		if ok && idx >= 0 {
			indexes = append(indexes, idx)
			if idx == 0 {
				root = b
			}
		}
	}
	if req.ImageRef != "" && root == nil {
		indexes = append(indexes, 0)
	}
	sort.Ints(indexes)
	valid := len(indexes) > 0
	for i, idx := range indexes {
		if idx != i {
			valid = false
		}
	}
	if len(req.BDMv2) > 0 && !valid {
		return nil, novaBadRequest("Boot sequence for the instance and image/block device mapping combination is not valid.")
	}
	return root, nil
}

func bootIndex(raw json.RawMessage) (int, bool) {
	if raw == nil || string(raw) == "null" {
		return 0, false
	}
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return n, true
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		if n, err := strconv.Atoi(str); err == nil {
			return n, true
		}
	}
	return 0, false
}

// truthy is oslo's bool_from_string for delete_on_termination.
func truthy(v any) bool {
	switch t := v.(type) {
	case bool:
		return t
	case string:
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "1", "t", "true", "on", "y", "yes":
			return true
		}
	}
	return false
}

// flavorRefID is common.get_id_from_href: the last path segment.
func flavorRefID(raw json.RawMessage) string {
	var str string
	if json.Unmarshal(raw, &str) != nil {
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			return n.String()
		}
		return string(raw)
	}
	return imageIDFromHref(str)
}

// imageIDFromHref is the last path segment of an href or the ID itself.
func imageIDFromHref(href string) string {
	if u, err := url.Parse(href); err == nil && u.Path != "" {
		href = u.Path
	}
	if i := strings.LastIndex(href, "/"); i >= 0 {
		return href[i+1:]
	}
	return href
}

func dedupTags(tags []string) []string {
	if tags == nil {
		return nil
	}
	out := []string{}
	for _, t := range tags {
		if !contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// generatePassword is a 12-character admin password from Nova's alphabet
// without ambiguous characters (nova.utils.generate_password).
func generatePassword() string {
	const symbols = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
	out := make([]byte, 12)
	for i := range out {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(symbols))))
		out[i] = symbols[n.Int64()]
	}
	return string(out)
}
