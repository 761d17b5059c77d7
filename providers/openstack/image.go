package openstack

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/ulikunitz/xz"

	"github.com/taloscluster/taloscluster/reconcile"
	"github.com/taloscluster/taloscluster/reconcile/machineconfig"
	"github.com/taloscluster/taloscluster/reconcile/plan"
)

// imageFile is the Image Factory's OpenStack disk image: a raw disk,
// xz-compressed.
const imageFile = "openstack-amd64.raw.xz"

// imageName is the Glance name of the boot image, shared by every cluster
// of the same Talos version and base schematic.
func (p *Provider) imageName() (string, error) {
	id, err := machineconfig.SchematicID(p.c.BootExtensions())
	if err != nil {
		return "", fmt.Errorf("computing the boot image schematic: %w", err)
	}
	return fmt.Sprintf("talos-%s-%s", p.c.Talos.Version, id[:12]), nil
}

// planImage uploads the boot image unless Glance has it, or waits for an
// upload under way.
func (p *Provider) planImage(inv *inventory) ([]plan.Change, error) {
	id, err := machineconfig.SchematicID(p.c.BootExtensions())
	if err != nil {
		return nil, fmt.Errorf("computing the boot image schematic: %w", err)
	}
	name, _ := p.imageName()
	attrs := []plan.Attribute{{Key: "factory", Value: p.c.OpenStack.ImageFactory}, {Key: "schematic", Value: id}, {Key: "talos", Value: p.c.Talos.Version}}
	var out []plan.Change
	for _, img := range inv.failedImages {
		out = append(out, p.change(plan.PhaseImage, plan.ActionDelete, plan.KindImage, name+"/"+img.ID,
			fmt.Sprintf("a boot image that is %s in Glance: it is replaced", img.Status), deleteImage{id: img.ID, name: name}))
	}
	switch {
	case inv.image != nil && stale(inv.image):
		out = append(out, p.change(plan.PhaseImage, plan.ActionDelete, plan.KindImage, name+"/"+inv.image.ID,
			fmt.Sprintf("a boot image %s in Glance since %s: its upload stopped; it is replaced", inv.image.Status, inv.image.UpdatedAt.Format(time.RFC3339)),
			deleteImage{id: inv.image.ID, name: name}))
		fallthrough
	case inv.image == nil:
		out = append(out, p.change(plan.PhaseImage, plan.ActionCreate, plan.KindImage, name,
			"boot image from the Image Factory ("+imageFile+", decompressed), uploaded to Glance and shared by every machine",
			uploadImage{name: name, schematic: id}, attrs...))
	case inv.image.Status != images.ImageStatusActive:
		out = append(out, p.change(plan.PhaseImage, plan.ActionWait, plan.KindImage, name,
			fmt.Sprintf("the boot image is %s in Glance: its upload is waited out (an upload that never began is made now)", inv.image.Status),
			uploadImage{name: name, schematic: id}, attrs...))
	}
	return out, nil
}

// stale reports whether an image has been in a transfer state for longer
// than an upload may take: whoever uploaded it stopped.
func stale(img *images.Image) bool {
	switch img.Status {
	case images.ImageStatusSaving, images.ImageStatusImporting, images.ImageStatusUploading:
		return !img.UpdatedAt.IsZero() && time.Since(img.UpdatedAt) > UploadTimeout
	}
	return false
}

type deleteImage struct{ id, name string }

func (op deleteImage) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, _, image, _ := p.clients(ctx)
	return ignoreGone(ctx, "the boot image "+op.name+" ("+op.id+")", func(ctx context.Context) error {
		return images.Delete(ctx, image, op.id).ExtractErr()
	})
}

type uploadImage struct{ name, schematic string }

// apply makes the boot image active in Glance: an active image is taken
// as it is, one being saved or imported is waited for, a queued one (an
// upload that never began) is uploaded into, and without one an image is
// created and uploaded.
func (op uploadImage) apply(ctx context.Context, p *Provider, _ *reconcile.Desired) error {
	_, _, image, _ := p.clients(ctx)
	ctx, cancel := context.WithTimeout(ctx, UploadTimeout)
	defer cancel()
	inv := &inventory{}
	if err := within(ctx, func(ctx context.Context) error { return p.readImage(ctx, image, inv) }); err != nil {
		return fmt.Errorf("reading the boot image %s: %w", op.name, err)
	}
	img := inv.image
	if img != nil && stale(img) {
		img = nil // deleted by the step before
	}
	if img == nil {
		body, err := machineconfig.SchematicYAML(p.c.BootExtensions())
		if err != nil {
			return err
		}
		if err := within(ctx, func(ctx context.Context) error {
			return p.factory(ctx, http.MethodPost, "/schematics", strings.NewReader(string(body)), nil)
		}); err != nil {
			return err
		}
		created, err := call(ctx, func(ctx context.Context) (*images.Image, error) {
			return images.Create(ctx, image, images.CreateOpts{Name: op.name, DiskFormat: "raw", ContainerFormat: "bare",
				Tags: []string{tagManaged, "talos=" + p.c.Talos.Version, "schematic=" + op.schematic}}).Extract()
		})
		if err != nil {
			return fmt.Errorf("creating the boot image %s in Glance: %w", op.name, err)
		}
		img = created
	}
	if img.Status != images.ImageStatusQueued {
		_, err := p.waitImage(ctx, img.ID, op.name)
		return err
	}
	// A read just before the upload renews an expired token first: a
	// stream cannot be sent again after a 401.
	if _, err := call(ctx, func(ctx context.Context) (*images.Image, error) { return images.Get(ctx, image, img.ID).Extract() }); err != nil {
		return fmt.Errorf("reading the boot image %s: %w", op.name, err)
	}
	sum := md5.New() //nolint:gosec // Glance's checksum is MD5; it proves the bytes arrived, not who sent them
	var size int64
	path := fmt.Sprintf("/image/%s/%s/%s", op.schematic, p.c.Talos.Version, imageFile)
	err := p.factory(ctx, http.MethodGet, path, nil, func(body io.Reader) error {
		raw, err := xz.NewReader(body)
		if err != nil {
			return fmt.Errorf("reading %s: %w", imageFile, err)
		}
		counted := &countingReader{r: io.TeeReader(raw, sum), n: &size}
		if err := imagedata.Upload(ctx, image, img.ID, counted).ExtractErr(); err != nil {
			return fmt.Errorf("uploading the boot image %s to Glance: %w", op.name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	got, err := p.waitImage(ctx, img.ID, op.name)
	if err != nil {
		return err
	}
	if want := hex.EncodeToString(sum.Sum(nil)); got.SizeBytes != size || got.Checksum != want {
		_ = deleteImage{id: img.ID, name: op.name}.apply(ctx, p, nil)
		return fmt.Errorf("the boot image %s in Glance is not what was sent (%d bytes, checksum %s; sent %d bytes, %s): it was deleted", op.name, got.SizeBytes, got.Checksum, size, want)
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	*c.n += int64(k)
	return k, err
}

// waitImage waits until the image is active, on fresh reads, and returns
// it.
func (p *Provider) waitImage(ctx context.Context, id, name string) (*images.Image, error) {
	_, _, image, _ := p.clients(ctx)
	for {
		img, err := call(ctx, func(ctx context.Context) (*images.Image, error) { return images.Get(ctx, image, id).Extract() })
		if err != nil {
			return nil, fmt.Errorf("reading the boot image %s: %w", name, err)
		}
		switch img.Status {
		case images.ImageStatusActive:
			return img, nil
		case images.ImageStatusKilled, images.ImageStatusDeleted, images.ImageStatusPendingDelete, images.ImageStatusDeactivated:
			return nil, fmt.Errorf("the boot image %s (%s) is %s in Glance", name, id, img.Status)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the boot image %s to turn active (it is %s): %w", name, img.Status, ctx.Err())
		case <-time.After(p.poll):
		}
	}
}

// factory sends one request to the Image Factory; read, when set, reads
// the answer's body.
func (p *Provider) factory(ctx context.Context, method, path string, body io.Reader, read func(io.Reader) error) error {
	base := p.c.OpenStack.ImageFactory
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return fmt.Errorf("asking the Image Factory: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/yaml")
	}
	resp, err := p.factoryHC.Do(req)
	if err != nil {
		return fmt.Errorf("asking the Image Factory %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("asking the Image Factory %s%s: %s", base, path, resp.Status)
	}
	if read != nil {
		return read(resp.Body)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}
