package forge

import (
	"errors"
	"fmt"
	"time"
)

// The upstream repositories SeedUpstreamReleases creates, as owner/name.
const (
	TalosRepo      = "siderolabs/talos"
	KubernetesRepo = "kubernetes/kubernetes"
)

// The release history SeedUpstreamReleases gives the upstream
// repositories. Each minor version line runs from its .0 to the newest
// patch named here with every patch in between, oldest line first; one
// prerelease of the next minor comes last. There are no drafts. Releases
// are created in version order (see TalosReleases and KubernetesReleases
// for the dates), so the newest by created_at is the highest version, and
// /releases/latest answers the newest full release, skipping the
// prerelease.
const (
	// Talos: v1.11.0 to v1.11.6, v1.12.0 to v1.12.4, v1.13.0 to v1.13.8,
	// then v1.14.0-beta.0.
	TalosV111Newest = "v1.11.6"
	TalosV112Newest = "v1.12.4"
	TalosV113Newest = "v1.13.8"
	TalosPrerelease = "v1.14.0-beta.0"
	// TalosLatest is the newest full Talos release, what
	// /repos/siderolabs/talos/releases/latest answers.
	TalosLatest = TalosV113Newest

	// Kubernetes: v1.34.0 to v1.34.5, v1.35.0 to v1.35.3, v1.36.0 to
	// v1.36.3, v1.37.0 to v1.37.2, then v1.38.0-alpha.1.
	KubernetesV134Newest = "v1.34.5"
	KubernetesV135Newest = "v1.35.3"
	KubernetesV136Newest = "v1.36.3"
	KubernetesV137Newest = "v1.37.2"
	KubernetesPrerelease = "v1.38.0-alpha.1"
	// KubernetesLatest is the newest full Kubernetes release, what
	// /repos/kubernetes/kubernetes/releases/latest answers.
	KubernetesLatest = KubernetesV137Newest
)

// upstream is one upstream repository and its release history.
type upstream struct {
	owner, name, branch string
	// title renders a release's name from its tag.
	title func(tag string) string
	// newest is the newest patch of each minor line, oldest line first.
	newest     []string
	prerelease string
	// The first release is created at first, each next one every later.
	first time.Time
	every time.Duration
}

var (
	talosUpstream = upstream{
		owner: "siderolabs", name: "talos", branch: "main",
		title:      func(tag string) string { return tag },
		newest:     []string{TalosV111Newest, TalosV112Newest, TalosV113Newest},
		prerelease: TalosPrerelease,
		first:      time.Date(2025, time.January, 6, 16, 0, 0, 0, time.UTC),
		every:      21 * 24 * time.Hour,
	}
	kubernetesUpstream = upstream{
		owner: "kubernetes", name: "kubernetes", branch: "master",
		title:      func(tag string) string { return "Kubernetes " + tag },
		newest:     []string{KubernetesV134Newest, KubernetesV135Newest, KubernetesV136Newest, KubernetesV137Newest},
		prerelease: KubernetesPrerelease,
		first:      time.Date(2025, time.January, 14, 18, 0, 0, 0, time.UTC),
		every:      24 * 24 * time.Hour,
	}
)

// TalosReleases returns the releases SeedUpstreamReleases gives
// siderolabs/talos, oldest first: named like their tags, created 21 days
// apart from 2025-01-06 to 2026-03-23 (the prerelease). A test that adds a
// newer release gives it a later Created.
func TalosReleases() []Release { return talosUpstream.releases() }

// KubernetesReleases returns the releases SeedUpstreamReleases gives
// kubernetes/kubernetes, oldest first: named "Kubernetes " and the tag,
// created 24 days apart from 2025-01-14 to 2026-02-26 (the prerelease). A
// test that adds a newer release gives it a later Created.
func KubernetesReleases() []Release { return kubernetesUpstream.releases() }

func (u upstream) releases() []Release {
	var tags []string
	for _, newest := range u.newest {
		var major, minor, patch int
		if _, err := fmt.Sscanf(newest, "v%d.%d.%d", &major, &minor, &patch); err != nil {
			panic(fmt.Sprintf("upstream version %q: %v", newest, err)) // the constants above are wrong
		}
		for p := 0; p <= patch; p++ {
			tags = append(tags, fmt.Sprintf("v%d.%d.%d", major, minor, p))
		}
	}
	tags = append(tags, u.prerelease)
	out := make([]Release, len(tags))
	for i, tag := range tags {
		out[i] = Release{
			Tag:        tag,
			Name:       u.title(tag),
			Target:     u.branch,
			Prerelease: tag == u.prerelease,
			Created:    u.first.Add(time.Duration(i) * u.every),
		}
	}
	return out
}

// SeedUpstreamReleases creates the repositories siderolabs/talos (default
// branch main) and kubernetes/kubernetes (default branch master) unless
// they exist, and adds the releases of TalosReleases and
// KubernetesReleases that they lack. Both are owned by organisations no
// user belongs to, so nobody has push access unless granted. Their git
// repositories stay empty: the releases' tags do not exist in git.
func (f *Forge) SeedUpstreamReleases() error {
	for _, u := range []upstream{talosUpstream, kubernetesUpstream} {
		repo := f.Repo(u.owner, u.name)
		if repo == nil {
			var err error
			if repo, err = f.CreateRepo(u.owner, u.name, u.branch); err != nil {
				return fmt.Errorf("seeding upstream releases: %w", err)
			}
		}
		for _, rel := range u.releases() {
			if err := repo.AddRelease(rel); err != nil && !errors.Is(err, ErrReleaseExists) {
				return fmt.Errorf("seeding upstream releases: %w", err)
			}
		}
	}
	return nil
}
