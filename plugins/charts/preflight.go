package charts

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/taloscluster/taloscluster/reconcile/spec"
)

// Preflight refuses, before converge changes anything, an entry whose
// repository or manifest URL the plugin would never fetch: not an http or
// https URL with a host, one with credentials, or one the allow hook
// refuses. Nothing is fetched.
func (p *Plugin) Preflight(c *spec.Cluster) error {
	entries, err := Entries(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Repo != "" {
			if err := p.checkURL(e.Repo); err != nil {
				errs = append(errs, fmt.Errorf("charts.%s.repo: %w", e.Name, err))
			}
		}
		for _, raw := range e.URLs {
			// A {version} is filled in later; the rest must parse now.
			if err := p.checkURL(strings.ReplaceAll(raw, "{version}", "v0")); err != nil {
				errs = append(errs, fmt.Errorf("charts.%s.manifest: %w", e.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (p *Plugin) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("is not a URL")
	}
	return p.fetch.check(u)
}
