package openstack

import (
	"bytes"
	"crypto/md5"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imageimport"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

func TestImageUploadAndList(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{})
	data := bytes.Repeat([]byte("talos raw "), 500)
	img, err := images.Create(t.Context(), l.image, images.CreateOpts{
		Name: "talos-v1.13.9", DiskFormat: "raw", ContainerFormat: "bare",
		Tags: []string{"talos", "v1.13.9"}, MinDisk: 1, Properties: map[string]string{"os_distro": "talos"},
	}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if img.Status != images.ImageStatusQueued || img.Properties["os_distro"] != "talos" || img.Visibility != "shared" {
		t.Errorf("created image = %+v", img)
	}

	// The upload is seen as saving by a client polling meanwhile.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- imagedata.Upload(t.Context(), l.image, img.ID, pr).ExtractErr() }()
	_, _ = pw.Write(data[:100])
	eventually(t, "saving", func() bool {
		got, err := images.Get(t.Context(), l.image, img.ID).Extract()
		return err == nil && got.Status == images.ImageStatusSaving
	})
	_, _ = pw.Write(data[100:])
	_ = pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("upload: %v", err)
	}
	got, err := images.Get(t.Context(), l.image, img.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	hash := sha512.Sum512(data)
	if got.Status != images.ImageStatusActive || got.SizeBytes != int64(len(data)) || got.VirtualSize != int64(len(data)) ||
		got.Checksum != hex.EncodeToString(sum[:]) || got.Properties["os_hash_algo"] != "sha512" ||
		got.Properties["os_hash_value"] != hex.EncodeToString(hash[:]) {
		t.Errorf("active image = %+v", got)
	}
	if b, ok := l.srv.ImageData(img.ID); !ok || !bytes.Equal(b, data) {
		t.Error("ImageData lacks the uploaded bytes")
	}

	// Uploading again: Glance's 409, as JSON for gophercloud's Accept.
	err = imagedata.Upload(t.Context(), l.image, img.ID, strings.NewReader("x")).ExtractErr()
	code, body := apiError(t, err)
	var doc struct{ Message, Code, Title string }
	_ = json.Unmarshal([]byte(body), &doc)
	if code != http.StatusConflict || doc.Code != "409 Conflict" ||
		doc.Message != "Image status transition from active to saving is not allowed<br /><br />\n\n\n" {
		t.Errorf("second upload: %d %q", code, body)
	}
	// Without Accept, webob answers plain text.
	resp, text := l.raw(t, http.MethodPut, "/image/v2/images/"+img.ID+"/file",
		map[string]string{"Content-Type": "application/octet-stream"}, "x", false)
	if resp.StatusCode != http.StatusConflict || text != "409 Conflict\n\nImage status transition from active to saving is not allowed\n\n   " {
		t.Errorf("plain answer: %d %q", resp.StatusCode, text)
	}

	// Filters and paging.
	for i, name := range []string{"other-a", "other-b"} {
		l.activeImage(t, images.CreateOpts{Name: name, DiskFormat: "raw", ContainerFormat: "bare", Tags: []string{"other", string(rune('a' + i))}}, []byte("data"))
	}
	list := func(opts images.ListOpts) []string {
		t.Helper()
		pages, err := images.List(l.image, opts).AllPages(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		all, err := images.ExtractImages(pages)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, i := range all {
			names = append(names, i.Name)
		}
		return names
	}
	for _, c := range []struct {
		name string
		opts images.ListOpts
		want string
	}{
		{"all, newest first, one per page", images.ListOpts{Limit: 1}, "other-b,other-a,talos-v1.13.9"},
		{"by name", images.ListOpts{Name: "other-a"}, "other-a"},
		{"by tags", images.ListOpts{Tags: []string{"talos", "v1.13.9"}}, "talos-v1.13.9"},
		{"by tag, none", images.ListOpts{Tags: []string{"talos", "b"}}, ""},
		{"by status", images.ListOpts{Status: images.ImageStatusQueued}, ""},
	} {
		if got := strings.Join(list(c.opts), ","); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}

	if err := images.Delete(t.Context(), l.image, img.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, err = images.Get(t.Context(), l.image, img.ID).Extract()
	if code, body := apiError(t, err); code != http.StatusNotFound || !strings.Contains(body, "No image found with ID "+img.ID) {
		t.Errorf("after delete: %d %s", code, body)
	}
}

// cutReader gives some bytes, then fails as a dropped connection.
type cutReader struct{ n int }

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errors.New("connection dropped")
	}
	n := min(len(p), c.n)
	c.n -= n
	return n, nil
}

func TestImageUploadCutOffAndImport(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{})
	img, err := images.Create(t.Context(), l.image, images.CreateOpts{Name: "cut", DiskFormat: "raw", ContainerFormat: "bare"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, l.srv.URL()+"/image/v2/images/"+img.ID+"/file", &cutReader{n: 1000})
	req.ContentLength = 100000
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Auth-Token", l.provider.Token())
	if resp, err := httpClient(l.srv).Do(req); err == nil {
		_ = resp.Body.Close()
		t.Errorf("a cut upload answered %d", resp.StatusCode)
	}
	eventually(t, "queued again", func() bool {
		got, err := images.Get(t.Context(), l.image, img.ID).Extract()
		return err == nil && got.Status == images.ImageStatusQueued && got.SizeBytes == 0
	})

	// A queued image missing formats cannot be saved.
	bare, _ := images.Create(t.Context(), l.image, images.CreateOpts{Name: "noformat"}).Extract()
	err = imagedata.Upload(t.Context(), l.image, bare.ID, strings.NewReader("x")).ExtractErr()
	if code, body := apiError(t, err); code != http.StatusBadRequest || !strings.Contains(body, "Properties disk_format, container_format must be set prior to saving data.") {
		t.Errorf("upload without formats: %d %s", code, body)
	}

	// A qcow2 image whose data is raw is refused by the format check.
	q, _ := images.Create(t.Context(), l.image, images.CreateOpts{Name: "q", DiskFormat: "qcow2", ContainerFormat: "bare"}).Extract()
	err = imagedata.Upload(t.Context(), l.image, q.ID, strings.NewReader("not a qcow2")).ExtractErr()
	if code, body := apiError(t, err); code != http.StatusUnsupportedMediaType || !strings.Contains(body, "Image disk_format qcow2 does not match stream data raw") {
		t.Errorf("qcow2 of raw data: %d %s", code, body)
	}

	// Interoperable import: stage, then glance-direct.
	methods, err := imageimport.Get(t.Context(), l.image).Extract()
	if err != nil || len(methods.ImportMethods.Value) != 1 || methods.ImportMethods.Value[0] != "glance-direct" {
		t.Errorf("import methods = %+v, %v", methods, err)
	}
	err = imageimport.Create(t.Context(), l.image, img.ID, imageimport.CreateOpts{Name: imageimport.GlanceDirectMethod}).ExtractErr()
	if code, body := apiError(t, err); code != http.StatusConflict || !strings.Contains(body, "Image needs to be staged before 'glance-direct' method can be used") {
		t.Errorf("import before staging: %d %s", code, body)
	}
	if err := imagedata.Stage(t.Context(), l.image, img.ID, strings.NewReader("staged bytes")).ExtractErr(); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if got, _ := images.Get(t.Context(), l.image, img.ID).Extract(); got.Status != images.ImageStatusUploading {
		t.Errorf("after stage: %s", got.Status)
	}
	if err := imageimport.Create(t.Context(), l.image, img.ID, imageimport.CreateOpts{Name: imageimport.GlanceDirectMethod}).ExtractErr(); err != nil {
		t.Fatalf("import: %v", err)
	}
	if got, _ := images.Get(t.Context(), l.image, img.ID).Extract(); got.Status != images.ImageStatusImporting {
		t.Errorf("after import: %s", got.Status)
	}
	eventually(t, "imported", func() bool {
		got, err := images.Get(t.Context(), l.image, img.ID).Extract()
		return err == nil && got.Status == images.ImageStatusActive && got.SizeBytes == int64(len("staged bytes"))
	})
}

func TestImageVersionsAndAuth(t *testing.T) {
	t.Parallel()
	l := startLab(t, Options{})
	resp, body := l.raw(t, http.MethodGet, "/image/", nil, "", true)
	if resp.StatusCode != http.StatusMultipleChoices || !strings.Contains(body, `"id":"v2.17","links"`) && !strings.Contains(body, `"v2.17"`) {
		t.Errorf("GET /image/: %d %s", resp.StatusCode, body)
	}
	if resp, _ := l.raw(t, http.MethodGet, "/image/versions", nil, "", true); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /image/versions: %d", resp.StatusCode)
	}
	for _, path := range []string{"/image/v2/images", "/compute/v2.1/servers", "/compute/v2.1/flavors"} {
		resp, body := l.raw(t, http.MethodGet, path, nil, "", true)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "requires authentication") {
			t.Errorf("%s without a token: %d %s", path, resp.StatusCode, body)
		}
	}
	resp, body = l.raw(t, http.MethodPost, "/image/v2/images", map[string]string{"Accept": "text/html", "Content-Type": "application/json"},
		`{"name":"x","status":"active"}`, false)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "<h1>403 Forbidden</h1>") || !strings.Contains(body, "Attribute &#x27;status&#x27; is read-only.") {
		t.Errorf("read-only status: %d %s", resp.StatusCode, body)
	}
}
