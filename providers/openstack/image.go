package openstack

import (
	"context"
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
	switch {
	case inv.image == nil:
		return []plan.Change{p.change(plan.PhaseImage, plan.ActionCreate, plan.KindImage, name,
			"boot image from the Image Factory ("+imageFile+", decompressed), uploaded to Glance and shared by every machine",
			uploadImage{name: name, schematic: id}, attrs...)}, nil
	case inv.image.Status == images.ImageStatusActive:
		return nil, nil
	}
	return []plan.Change{p.change(plan.PhaseImage, plan.ActionWait, plan.KindImage, name,
		fmt.Sprintf("the boot image is %s in Glance: its upload is waited out (an upload that never began is made now)", inv.image.Status),
		uploadImage{name: name, schematic: id}, attrs...)}, nil
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
	cctx, ccancel := context.WithTimeout(ctx, CallTimeout)
	err := p.readImage(cctx, image, inv)
	ccancel()
	if err != nil {
		return fmt.Errorf("reading the boot image %s: %w", op.name, err)
	}
	img := inv.image
	if img == nil {
		body, err := machineconfig.SchematicYAML(p.c.BootExtensions())
		if err != nil {
			return err
		}
		if err := p.factory(ctx, http.MethodPost, "/schematics", strings.NewReader(string(body)), nil); err != nil {
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
	if img.Status == images.ImageStatusQueued {
		path := fmt.Sprintf("/image/%s/%s/%s", op.schematic, p.c.Talos.Version, imageFile)
		err := p.factory(ctx, http.MethodGet, path, nil, func(body io.Reader) error {
			raw, err := xz.NewReader(body)
			if err != nil {
				return fmt.Errorf("reading %s: %w", imageFile, err)
			}
			if err := imagedata.Upload(ctx, image, img.ID, raw).ExtractErr(); err != nil {
				return fmt.Errorf("uploading the boot image %s to Glance: %w", op.name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return p.waitImage(ctx, img.ID, op.name)
}

// waitImage waits until the image is active, on fresh reads.
func (p *Provider) waitImage(ctx context.Context, id, name string) error {
	_, _, image, _ := p.clients(ctx)
	for {
		img, err := call(ctx, func(ctx context.Context) (*images.Image, error) { return images.Get(ctx, image, id).Extract() })
		if err != nil {
			return fmt.Errorf("reading the boot image %s: %w", name, err)
		}
		switch img.Status {
		case images.ImageStatusActive:
			return nil
		case images.ImageStatusKilled, images.ImageStatusDeleted, images.ImageStatusPendingDelete, images.ImageStatusDeactivated:
			return fmt.Errorf("the boot image %s (%s) is %s in Glance", name, id, img.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the boot image %s to turn active (it is %s): %w", name, img.Status, ctx.Err())
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
	resp, err := p.hc.Do(req)
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
