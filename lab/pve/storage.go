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
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for i := range s.storages {
		st := &s.storages[i]
		if t := q.Get("type"); t != "" && t != st.Type {
			continue
		}
		out = append(out, s.storageConfig(st))
	}
	return out, nil
}

func (s *Server) getStorageConfig(r *http.Request) (any, error) {
	s.mu.Lock()
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
	s.mu.Lock()
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
	s.mu.Lock()
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
	s.mu.Lock()
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
	s.mu.Lock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	v, st, err := s.lookupVolume(nodeName, volumeParam(r))
	if err != nil {
		return nil, err
	}
	return map[string]any{"path": volumePath(st, v.volid), "size": v.size, "used": v.size, "format": v.format}, nil
}

func (s *Server) deleteContent(r *http.Request) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return nil, err
	}
	volid := volumeParam(r)
	if store, _, _ := strings.Cut(volid, ":"); store != r.PathValue("storage") {
		return nil, paramErr("volume", fmt.Sprintf("volume '%s' is not on storage '%s'", volid, r.PathValue("storage")))
	}
	v, st, err := s.lookupVolume(nodeName, volid)
	if err != nil {
		return nil, err
	}
	if v.content == "images" {
		for _, g := range s.vms {
			if g.references(volid) {
				return nil, errorf("unable to delete volume '%s' - used by VM %d", volid, g.id)
			}
		}
	}
	t := s.startTask(r, nodeName, "imgdel", st.Name)
	if t.failed() {
		return t.upid, nil
	}
	t.logf("removing volume '%s'", volid)
	delete(s.volumes, s.volKeyFor(st, nodeName, volid))
	return t.upid, nil
}

var unsafeFileChars = regexp.MustCompile(`[^a-zA-Z0-9_.\-]`)

// contentFilename checks an uploaded file name against the content type the
// way Proxmox VE does and returns the normalised name.
func contentFilename(content, name string) (string, error) {
	name = unsafeFileChars.ReplaceAllString(name, "_")
	lower := strings.ToLower(name)
	switch content {
	case "iso":
		if !strings.HasSuffix(lower, ".iso") && !strings.HasSuffix(lower, ".img") {
			return "", paramErr("filename", "wrong file extension")
		}
	case "vztmpl":
		ok := false
		for _, ext := range []string{".tar.gz", ".tar.xz", ".tar.zst", ".tgz"} {
			if strings.HasSuffix(lower, ext) {
				ok = true
			}
		}
		if !ok {
			return "", paramErr("filename", "wrong file extension")
		}
	default:
		return "", paramErr("content", fmt.Sprintf("upload content type '%s' not allowed", content))
	}
	return name, nil
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

func verifyChecksum(data []byte, algo, want string) error {
	if want == "" {
		return nil
	}
	h, err := checksumHash(algo)
	if err != nil {
		return err
	}
	h.Write(data)
	got := hex.EncodeToString(h.Sum(nil))
	if !strings.EqualFold(got, want) {
		return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", got, want)
	}
	return nil
}

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
	name, err := contentFilename(content, fileName)
	if err != nil {
		return nil, err
	}
	if err := verifyChecksum(data, fields["checksum-algorithm"], fields["checksum"]); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return nil, err
		}
		return nil, errorf("%s", err.Error())
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	nodeName, st, volid, err := s.contentTarget(r, content, name)
	if err != nil {
		return nil, err
	}
	t := s.startTask(r, nodeName, "imgcopy", "")
	if t.failed() {
		return t.upid, nil
	}
	t.logf("target node: %s", nodeName)
	t.logf("target file: %s", volumePath(st, volid))
	t.logf("file size is: %d", len(data))
	s.volumes[s.volKeyFor(st, nodeName, volid)] = &volume{
		volid:   volid,
		storage: st.Name,
		content: content,
		format:  formatOfFile(name),
		size:    int64(len(data)),
		data:    data,
		ctime:   time.Now().Unix(),
	}
	return t.upid, nil
}

func formatOfFile(name string) string {
	lower := strings.ToLower(name)
	switch {
	case strings.HasSuffix(lower, ".iso"), strings.HasSuffix(lower, ".img"):
		return "iso"
	case strings.Contains(lower, ".tar."), strings.HasSuffix(lower, ".tgz"):
		return "tgz"
	}
	return "raw"
}

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
	name, err := contentFilename(content, q.Get("filename"))
	if err != nil {
		return nil, err
	}
	algo, sum := q.Get("checksum-algorithm"), q.Get("checksum")
	if sum != "" {
		if _, err := checksumHash(algo); err != nil {
			return nil, err
		}
	}
	src := q.Get("url")
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		return nil, paramErr("url", "value does not match the regex pattern")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	nodeName, st, volid, err := s.contentTarget(r, content, name)
	if err != nil {
		return nil, err
	}
	key := s.volKeyFor(st, nodeName, volid)
	if _, ok := s.volumes[key]; ok {
		return nil, errorf("refusing to override existing file '%s'", name)
	}
	t := s.startTask(r, nodeName, "download", name)
	if t.failed() {
		return t.upid, nil
	}
	t.waiting = true
	t.done = make(chan struct{})
	t.logf("downloading %s to %s", src, volumePath(st, volid))
	go s.download(t, key, st.Name, content, name, src, algo, sum)
	return t.upid, nil
}

// download runs a download-url task's transfer.
func (s *Server) download(t *task, key volKey, storage, content, name, src, algo, sum string) {
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
	if err == nil {
		err = verifyChecksum(data, algo, sum)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.waiting = false
	close(t.done)
	if end := time.Now(); end.After(t.end) {
		t.end = end
	}
	if err != nil {
		t.fail(err.Error())
		return
	}
	t.logf("downloaded %d bytes", len(data))
	s.volumes[key] = &volume{
		volid:   key.volid,
		storage: storage,
		content: content,
		format:  formatOfFile(name),
		size:    int64(len(data)),
		data:    data,
		ctime:   time.Now().Unix(),
	}
}

func (s *Server) fetch(ctx context.Context, src string) ([]byte, error) {
	client := s.opts.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, fmt.Errorf("building the download request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download failed: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download failed: %s", resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the download: %w", err)
	}
	return data, nil
}

// contentTarget resolves where a new volume of the given content and file
// name goes: the request's node and storage, which must hold that content.
// The caller holds s.mu.
func (s *Server) contentTarget(r *http.Request, content, name string) (string, *Storage, string, error) {
	nodeName := r.PathValue("node")
	if _, err := s.lookupNode(nodeName); err != nil {
		return "", nil, "", err
	}
	st, err := s.nodeStorage(nodeName, r.PathValue("storage"))
	if err != nil {
		return "", nil, "", err
	}
	if !st.has(content) {
		return "", nil, "", errorf("storage '%s' does not support '%s' content", st.Name, content)
	}
	return nodeName, st, st.Name + ":" + content + "/" + name, nil
}
