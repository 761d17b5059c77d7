package pve

import (
	"context"
	"crypto/md5"  //nolint:gosec // Proxmox VE offers md5 as a download checksum algorithm.
	"crypto/sha1" //nolint:gosec // Proxmox VE offers sha1 as a download checksum algorithm.
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Storage is a Proxmox VE storage definition.
type Storage struct {
	// Name is the storage ID, e.g. "local".
	Name string
	// Type is the storage plugin: dir, lvmthin, lvm, nfs, cifs, cephfs,
	// rbd or zfspool.
	Type string
	// Content lists the content types: iso, vztmpl, snippets, backup,
	// images, rootdir, import.
	Content []string
	// Shared storages hold one set of volumes seen by every node; the
	// others hold a separate set per node.
	Shared bool
	// Nodes restricts the storage to some nodes; empty means every node.
	Nodes []string
	// Path is the mount point of file-based storages.
	Path string
	// CapacityBytes is the reported size; zero means 1 TiB.
	CapacityBytes int64
}

// DefaultStorages returns the storages of a typical cluster: "local" (dir,
// node-local; iso, vztmpl, snippets, backup), "local-lvm" (lvmthin,
// node-local; images, rootdir) and "shared" (nfs, shared; images, iso).
func DefaultStorages() []Storage {
	return []Storage{
		{Name: "local", Type: "dir", Path: "/var/lib/vz", Content: []string{"iso", "vztmpl", "snippets", "backup"}},
		{Name: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
		{Name: "shared", Type: "nfs", Path: "/mnt/pve/shared", Content: []string{"images", "iso"}, Shared: true},
	}
}

func (st *Storage) onNode(node string) bool {
	return len(st.Nodes) == 0 || slices.Contains(st.Nodes, node)
}

func (st *Storage) has(content string) bool { return slices.Contains(st.Content, content) }

func (st *Storage) fileBased() bool {
	switch st.Type {
	case "dir", "nfs", "cifs", "cephfs", "glusterfs", "btrfs":
		return true
	}
	return false
}

func (st *Storage) capacity() int64 {
	if st.CapacityBytes > 0 {
		return st.CapacityBytes
	}
	return 1 << 40
}

func (st *Storage) contentString() string {
	c := slices.Clone(st.Content)
	slices.Sort(c)
	return strings.Join(c, ",")
}

// volKey locates a volume: node is empty for shared storages.
type volKey struct{ node, volid string }

type volume struct {
	volid, storage, content, format string
	size                            int64
	vmid                            int
	data                            []byte
	ctime                           int64
}

// findStorage returns the storage with the given ID. The caller holds s.mu.
func (s *Server) findStorage(name string) *Storage {
	for i := range s.storages {
		if s.storages[i].Name == name {
			return &s.storages[i]
		}
	}
	return nil
}

// nodeStorage returns a storage available on a node.
func (s *Server) nodeStorage(nodeName, name string) (*Storage, error) {
	st := s.findStorage(name)
	if st == nil {
		return nil, errorf("storage '%s' does not exist", name)
	}
	if !st.onNode(nodeName) {
		return nil, errorf("storage '%s' is not available on node '%s'", name, nodeName)
	}
	return st, nil
}

func (s *Server) volKeyFor(st *Storage, nodeName, volid string) volKey {
	if st.Shared {
		return volKey{volid: volid}
	}
	return volKey{node: nodeName, volid: volid}
}

// volumesOf lists a storage's volumes as seen from a node, sorted by volid.
func (s *Server) volumesOf(st *Storage, nodeName string) []*volume {
	var out []*volume
	for k, v := range s.volumes {
		if v.storage != st.Name {
			continue
		}
		if !st.Shared && k.node != nodeName {
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *volume) int { return strings.Compare(a.volid, b.volid) })
	return out
}

func (s *Server) usedBytes(st *Storage, nodeName string) int64 {
	var used int64
	for _, v := range s.volumesOf(st, nodeName) {
		used += v.size
	}
	return used
}

// lookupVolume finds a volume by volid as seen from a node.
func (s *Server) lookupVolume(nodeName, volid string) (*volume, *Storage, error) {
	storeName, _, ok := strings.Cut(volid, ":")
	if !ok {
		return nil, nil, errorf("unable to parse volume ID '%s'", volid)
	}
	st, err := s.nodeStorage(nodeName, storeName)
	if err != nil {
		return nil, nil, err
	}
	v, ok := s.volumes[s.volKeyFor(st, nodeName, volid)]
	if !ok {
		return nil, st, errorf("volume '%s' does not exist", volid)
	}
	return v, st, nil
}

func contentOfVolname(name string) string {
	for _, c := range []string{"iso", "vztmpl", "snippets", "import"} {
		if strings.HasPrefix(name, c+"/") {
			return c
		}
	}
	return "images"
}

func volumePath(st *Storage, volid string) string {
	_, name, _ := strings.Cut(volid, ":")
	switch {
	case st.fileBased():
		switch c := contentOfVolname(name); c {
		case "iso", "vztmpl":
			return st.Path + "/template/" + name
		case "snippets", "import":
			return st.Path + "/" + name
		default:
			return st.Path + "/images/" + name
		}
	case st.Type == "lvmthin" || st.Type == "lvm":
		return "/dev/pve/" + name
	default:
		return st.Type + ":" + name
	}
}

func (s *Server) storageRoutes() {
	s.route("GET", "/storage", "storage.config.list", s.listStorageConfig)
	s.route("GET", "/storage/{storage}", "storage.config.get", s.getStorageConfig)
	s.route("GET", "/nodes/{node}/storage", "storage.list", s.listNodeStorage)
	s.route("GET", "/nodes/{node}/storage/{storage}", "storage.get", s.getNodeStorage)
	s.route("GET", "/nodes/{node}/storage/{storage}/status", "storage.status", s.getStorageStatus)
	s.route("GET", "/nodes/{node}/storage/{storage}/content", "storage.content.list", s.listContent)
	s.route("GET", "/nodes/{node}/storage/{storage}/content/{volume...}", "storage.content.get", s.getContent)
	s.route("DELETE", "/nodes/{node}/storage/{storage}/content/{volume...}", "storage.content.delete", s.deleteContent)
	s.route("POST", "/nodes/{node}/storage/{storage}/upload", "storage.upload", s.upload)
	s.route("POST", "/nodes/{node}/storage/{storage}/download-url", "storage.download", s.downloadURL)
}

func (s *Server) storageConfig(st *Storage) map[string]any {
	m := map[string]any{
		"storage": st.Name,
		"type":    st.Type,
		"content": st.contentString(),
		"digest":  digestOf(st.Name + st.Type + st.contentString()),
	}
	if st.Path != "" {
		m["path"] = st.Path
	}
	if st.fileBased() || st.Type == "lvm" {
		m["shared"] = boolInt(st.Shared)
	}
	if st.Type == "lvmthin" {
		m["thinpool"] = "data"
		m["vgname"] = "pve"
	}
	if st.Type == "nfs" {
		m["server"] = "192.0.2.10"
		m["export"] = "/export/" + st.Name
	}
	if len(st.Nodes) > 0 {
		m["nodes"] = strings.Join(st.Nodes, ",")
	}
	return m
}

func (s *Server) listStorageConfig(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for i := range s.storages {
		st := &s.storages[i]
		if t := q.Get("type"); t != "" && t != st.Type {
			continue
		}
		// Config.pm index: only storages the caller may audit or allocate on.
		if s.checkAny(caller(r), "/storage/"+st.Name, "Datastore.Audit", "Datastore.AllocateSpace") != nil {
			continue
		}
		out = append(out, s.storageConfig(st))
	}
	return out, nil
}

func (s *Server) getStorageConfig(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	st := s.findStorage(r.PathValue("storage"))
	if st == nil {
		return nil, errorf("storage '%s' does not exist", r.PathValue("storage"))
	}
	return s.storageConfig(st), nil
}

func (s *Server) storageStatus(st *Storage, nodeName string) map[string]any {
	used := s.usedBytes(st, nodeName)
	total := st.capacity()
	return map[string]any{
		"storage":       st.Name,
		"type":          st.Type,
		"content":       st.contentString(),
		"active":        1,
		"enabled":       1,
		"shared":        boolInt(st.Shared),
		"total":         total,
		"used":          used,
		"avail":         total - used,
		"used_fraction": float64(used) / float64(total),
	}
}

func (s *Server) listNodeStorage(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for i := range s.storages {
		st := &s.storages[i]
		if !st.onNode(nodeName) {
			continue
		}
		// Status.pm index: only storages the caller may audit or allocate on.
		if s.checkAny(caller(r), "/storage/"+st.Name, "Datastore.Audit", "Datastore.AllocateSpace") != nil {
			continue
		}
		if v := q.Get("storage"); v != "" && v != st.Name {
			continue
		}
		if v := q.Get("content"); v != "" {
			match := false
			for _, c := range strings.Split(v, ",") {
				if st.has(c) {
					match = true
				}
			}
			if !match {
				continue
			}
		}
		out = append(out, s.storageStatus(st, nodeName))
	}
	return out, nil
}

func (s *Server) getNodeStorage(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	if _, err := s.nodeStorage(nodeName, r.PathValue("storage")); err != nil {
		return nil, err
	}
	return []map[string]string{
		{"subdir": "content"}, {"subdir": "download-url"}, {"subdir": "status"}, {"subdir": "upload"},
	}, nil
}

func (s *Server) getStorageStatus(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	st, err := s.nodeStorage(nodeName, r.PathValue("storage"))
	if err != nil {
		return nil, err
	}
	m := s.storageStatus(st, nodeName)
	delete(m, "storage")
	delete(m, "used_fraction")
	return m, nil
}

func (s *Server) listContent(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	st, err := s.nodeStorage(nodeName, r.PathValue("storage"))
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, v := range s.volumesOf(st, nodeName) {
		if c := q.Get("content"); c != "" && c != v.content {
			continue
		}
		if id := q.Get("vmid"); id != "" && id != strconv.Itoa(v.vmid) {
			continue
		}
		// Content.pm index: a volume the caller may not access is left out
		// (check_volume_access).
		if s.checkVolumeAccess(caller(r), v.volid, v.content, v.vmid, 0) != nil {
			continue
		}
		m := map[string]any{
			"volid":   v.volid,
			"content": v.content,
			"format":  v.format,
			"size":    v.size,
			"ctime":   v.ctime,
		}
		if v.vmid != 0 {
			m["vmid"] = v.vmid
			m["used"] = v.size
		}
		out = append(out, m)
	}
	return out, nil
}

// volumeParam returns the volume ID named by the request path, accepting
// both "local:iso/x.iso" and "iso/x.iso".
func volumeParam(r *http.Request) string {
	v := r.PathValue("volume")
	if !strings.Contains(v, ":") {
		v = r.PathValue("storage") + ":" + v
	}
	return v
}

func (s *Server) getContent(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	v, st, err := s.lookupVolume(nodeName, volumeParam(r))
	if err != nil {
		return nil, err
	}
	if err := s.checkVolumeAccess(caller(r), v.volid, v.content, v.vmid, 0); err != nil {
		return nil, err
	}
	return map[string]any{"path": volumePath(st, v.volid), "size": v.size, "used": v.size, "format": v.format}, nil
}

// deleteContent is pve-storage's content delete: the volume is freed by an
// imgdel task's worker (vdisk_free), so it is listed until the task ends.
// Like free_image, a missing file on a file-based storage is only a warning;
// on other storages the worker fails.
func (s *Server) deleteContent(r *http.Request) (any, error) {
	s.lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	volid := volumeParam(r)
	storeName, _, _ := strings.Cut(volid, ":")
	if storeName != r.PathValue("storage") {
		return nil, paramErr("volume", fmt.Sprintf("volume '%s' is not on storage '%s'", volid, r.PathValue("storage")))
	}
	st, err := s.nodeStorage(nodeName, storeName)
	if err != nil {
		return nil, err
	}
	id := st.Name
	v, _, err := s.lookupVolume(nodeName, volid)
	if err == nil && v.vmid != 0 {
		id = strconv.Itoa(v.vmid) + "@" + st.Name
	}
	// Content.pm delete: Datastore.Allocate on the storage, or for a
	// VM's backup Datastore.AllocateSpace and VM.Backup on the VM.
	authid := caller(r)
	if err == nil && v.content == "backup" && v.vmid != 0 {
		if err := s.check(authid, "/storage/"+st.Name, "Datastore.AllocateSpace"); err != nil {
			return nil, err
		}
		if err := s.check(authid, "/vms/"+strconv.Itoa(v.vmid), "VM.Backup"); err != nil {
			return nil, err
		}
	} else if err := s.check(authid, "/storage/"+st.Name, "Datastore.Allocate"); err != nil {
		return nil, err
	}
	key := s.volKeyFor(st, nodeName, volid)
	t := s.newTask(r, nodeName, "imgdel", id)
	t.work = func(t *task) error {
		if _, ok := s.volumes[key]; !ok {
			if st.fileBased() {
				t.warnf("disk image '%s' does not exist", volumePath(st, volid))
				return nil
			}
			return fmt.Errorf("volume '%s' does not exist", volid)
		}
		delete(s.volumes, key)
		t.logf("Removed volume '%s'", volid)
		return nil
	}
	s.launch(t)
	return t.upid, nil
}

var unsafeFileChars = regexp.MustCompile(`[^a-zA-Z0-9_.\-]`)

// normalizeContentFilename is pve-storage's normalize_content_filename:
// directories are dropped and unsafe characters become '_'.
func normalizeContentFilename(name string) string {
	name = strings.TrimRight(name, "\n")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return unsafeFileChars.ReplaceAllString(name, "_")
}

// checkContentFilename checks a file name against the content type the way
// the upload and download-url calls do; notAllowed is the message each
// gives for another content type.
func checkContentFilename(content, name, notAllowed string) error {
	lower := strings.ToLower(name)
	switch content {
	case "iso":
		if !strings.HasSuffix(lower, ".iso") && !strings.HasSuffix(lower, ".img") {
			return paramErr("filename", "wrong file extension")
		}
	case "vztmpl":
		ok := false
		for _, ext := range []string{".tar", ".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"} {
			if strings.HasSuffix(lower, ext) {
				ok = true
			}
		}
		if !ok {
			return paramErr("filename", "wrong file extension")
		}
	default:
		return paramErr("content", fmt.Sprintf(notAllowed, content))
	}
	return nil
}

func checksumHash(algo string) (hash.Hash, error) {
	switch algo {
	case "md5":
		return md5.New(), nil //nolint:gosec // a supported Proxmox VE algorithm
	case "sha1":
		return sha1.New(), nil //nolint:gosec // a supported Proxmox VE algorithm
	case "sha224":
		return sha256.New224(), nil
	case "sha256":
		return sha256.New(), nil
	case "sha384":
		return sha512.New384(), nil
	case "sha512":
		return sha512.New(), nil
	}
	return nil, paramErr("checksum-algorithm", fmt.Sprintf("value '%s' does not have a value in the enumeration 'md5, sha1, sha224, sha256, sha384, sha512'", algo))
}

func fileHash(data []byte, algo string) string {
	h, err := checksumHash(algo)
	if err != nil {
		return ""
	}
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// checkChecksumParams validates checksum and checksum-algorithm like the
// API schema: the algorithm is an enumeration and a checksum needs one.
func checkChecksumParams(algo, sum string) error {
	if algo != "" {
		if _, err := checksumHash(algo); err != nil {
			return err
		}
	}
	if sum != "" && algo == "" {
		return paramErr("checksum-algorithm", "parameter is required when 'checksum' is set")
	}
	return nil
}

// fileTarget is where an upload or download-url puts a file: the checks
// pve-storage makes before forking, in its order (storage enabled on the
// node, file-based, file name and content type, content allowed). The
// caller holds s.mu.
func (s *Server) fileTarget(r *http.Request, content, filename string, download bool) (string, *Storage, string, error) {
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return "", nil, "", err
	}
	st, err := s.nodeStorage(nodeName, r.PathValue("storage"))
	if err != nil {
		return "", nil, "", err
	}
	if !st.fileBased() {
		if download {
			return "", nil, "", errorf("can't upload to storage type '%s', not a file based storage!", st.Type)
		}
		return "", nil, "", errorf("can't upload to storage type '%s'", st.Type)
	}
	name := normalizeContentFilename(filename)
	if download {
		if !st.has(content) {
			return "", nil, "", errorf("storage '%s' is not configured for content-type '%s'", st.Name, content)
		}
		if err := checkContentFilename(content, name, "upload content-type '%s' is not allowed"); err != nil {
			return "", nil, "", err
		}
	} else {
		if err := checkContentFilename(content, name, "upload content type '%s' not allowed"); err != nil {
			return "", nil, "", err
		}
		if !st.has(content) {
			return "", nil, "", errorf("storage '%s' does not support '%s' content", st.Name, content)
		}
	}
	return nodeName, st, st.Name + ":" + content + "/" + name, nil
}

// upload is pve-storage's upload: pveproxy receives the file, the API call
// checks the target, and an imgcopy task's worker verifies the checksum and
// copies the file into place, replacing a file of the same name. The volume
// appears when the task ends.
func (s *Server) upload(r *http.Request) (any, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "multipart/form-data" {
		return nil, paramErr("filename", "property is missing and it is not optional")
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, paramErr("filename", "unable to parse the upload: "+err.Error())
	}
	fields := map[string]string{}
	var fileName string
	var data []byte
	haveFile := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, paramErr("filename", "unable to parse the upload: "+err.Error())
		}
		b, err := io.ReadAll(part)
		if err != nil {
			return nil, paramErr("filename", "unable to read the upload: "+err.Error())
		}
		if part.FormName() == "filename" && part.FileName() != "" {
			fileName = part.FileName()
			data = b
			haveFile = true
			continue
		}
		fields[part.FormName()] = string(b)
	}
	if !haveFile {
		return nil, paramErr("filename", "property is missing and it is not optional")
	}
	content := fields["content"]
	if content == "" {
		return nil, paramErr("content", "property is missing and it is not optional")
	}
	algo, sum := fields["checksum-algorithm"], fields["checksum"]
	if err := checkChecksumParams(algo, sum); err != nil {
		return nil, err
	}

	s.lock()
	defer s.mu.Unlock()
	nodeName, st, volid, err := s.fileTarget(r, content, fileName, false)
	if err != nil {
		return nil, err
	}
	key := s.volKeyFor(st, nodeName, volid)
	name := strings.TrimPrefix(volid, st.Name+":"+content+"/")
	t := s.newTask(r, nodeName, "imgcopy", "")
	t.work = func(t *task) error {
		t.logf("starting file import from: /var/tmp/pveupload-%x", t.pid)
		if algo != "" {
			got := fileHash(data, algo)
			if !strings.EqualFold(got, sum) {
				return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, sum)
			}
			t.logf("calculating checksum...OK, checksum verified")
		}
		t.logf("target node: %s", nodeName)
		t.logf("target file: %s", volumePath(st, volid))
		t.logf("file size is: %d", len(data))
		s.volumes[key] = &volume{
			volid:   volid,
			storage: st.Name,
			content: content,
			format:  formatOfFile(name),
			size:    int64(len(data)),
			data:    data,
			ctime:   time.Now().Unix(),
		}
		t.logf("finished file import successfully")
		return nil
	}
	s.launch(t)
	return t.upid, nil
}

func formatOfFile(name string) string {
	lower := strings.ToLower(name)
	switch {
	case strings.HasSuffix(lower, ".iso"), strings.HasSuffix(lower, ".img"):
		return "iso"
	case strings.Contains(lower, ".tar"):
		return "tgz"
	}
	return "raw"
}

// downloadURL is pve-storage's download_url: the target is checked before
// forking; the download task's worker (PVE::Tools::download_file_from_url)
// refuses an existing file unless its checksum matches, fetches the URL,
// verifies the checksum and renames the file into place, so the volume
// appears when the task ends.
func (s *Server) downloadURL(r *http.Request) (any, error) {
	q, err := form(r)
	if err != nil {
		return nil, err
	}
	errs := map[string]string{}
	for _, k := range []string{"url", "filename", "content"} {
		if q.Get(k) == "" {
			errs[k] = "property is missing and it is not optional"
		}
	}
	if len(errs) > 0 {
		return nil, paramError(errs)
	}
	content := q.Get("content")
	algo, sum := q.Get("checksum-algorithm"), q.Get("checksum")
	if err := checkChecksumParams(algo, sum); err != nil {
		return nil, err
	}
	src := q.Get("url")
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") && !strings.HasPrefix(src, "ftp://") {
		return nil, paramErr("url", "value does not match the regex pattern")
	}

	s.lock()
	defer s.mu.Unlock()
	nodeName, st, volid, err := s.fileTarget(r, content, q.Get("filename"), true)
	if err != nil {
		return nil, err
	}
	name := strings.TrimPrefix(volid, st.Name+":"+content+"/")
	key := s.volKeyFor(st, nodeName, volid)
	dest := volumePath(st, volid)
	t := s.newTask(r, nodeName, "download", name)
	t.logf("downloading %s to %s", src, dest)
	if t.dies != "" {
		// The worker dies before it fetches anything.
		s.launch(t)
		return t.upid, nil
	}
	if old, ok := s.volumes[key]; ok {
		// The worker's first step, made now: the file exists before the
		// transfer would start.
		t.work = func(t *task) error {
			if sum == "" {
				return fmt.Errorf("refusing to override existing file '%s'", dest)
			}
			if got := fileHash(old.data, algo); !strings.EqualFold(got, sum) {
				return fmt.Errorf("checksum mismatch: got '%s' != expect '%s', aborting", got, sum)
			}
			t.logf("calculating checksum of existing file...OK, got correct file already, no need to download")
			return nil
		}
		s.launch(t)
		return t.upid, nil
	}
	t.waiting = true
	t.done = make(chan struct{})
	s.active = append(s.active, t)
	go s.download(t, key, st.Name, content, name, src, dest, algo, sum)
	return t.upid, nil
}

// download runs a download-url task's transfer; the task ends when the
// transfer has finished and its duration has passed.
func (s *Server) download(t *task, key volKey, storage, content, name, src, dest, algo, sum string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	data, err := s.fetch(ctx, src)
	if err != nil {
		err = fmt.Errorf("download failed: command 'wget --progress=dot:giga -O %s.tmp.%d %s' failed: %w", dest, t.pid, src, err)
	} else if algo != "" {
		if got := fileHash(data, algo); !strings.EqualFold(got, sum) {
			err = fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, sum)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.waiting = false
	close(t.done)
	if end := time.Now(); end.After(t.end) {
		t.end = end
	}
	t.work = func(t *task) error {
		if err != nil {
			return err
		}
		if _, ok := s.volumes[key]; ok {
			return fmt.Errorf("unable to rename temporary file: file '%s' appeared during the download", dest)
		}
		s.volumes[key] = &volume{
			volid:   key.volid,
			storage: storage,
			content: content,
			format:  formatOfFile(name),
			size:    int64(len(data)),
			data:    data,
			ctime:   time.Now().Unix(),
		}
		t.logf("download of '%s' to '%s' finished", src, dest)
		return nil
	}
	s.settle()
	if !t.finished {
		s.arm(t, time.Until(t.end))
	}
}

// errExit is the wget exit status for an error answer from the server.
type errExit struct{ code int }

func (e errExit) Error() string { return fmt.Sprintf("exit code %d", e.code) }

func (s *Server) fetch(ctx context.Context, src string) ([]byte, error) {
	client := s.opts.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, errExit{code: 1}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, errExit{code: 4} // wget: network failure
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errExit{code: 8} // wget: server issued an error response
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, errExit{code: 4}
	}
	return data, nil
}
