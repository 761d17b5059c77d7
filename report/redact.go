package report

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Redacted replaces every secret value in outgoing text.
const Redacted = "[redacted]"

// minSecret is the shortest value treated as a secret: shorter ones would
// redact ordinary words.
const minSecret = 6

// Redactor knows every secret value the process holds and removes them,
// and their base64 and URL-escaped forms, from anything that leaves the
// process: comments, statuses, logs, errors. It is safe for concurrent use.
type Redactor struct {
	mu       sync.RWMutex
	secrets  []string
	replacer *strings.Replacer
}

// Add registers secret values.
func (r *Redactor) Add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range values {
		v = strings.TrimSpace(v)
		if len(v) < minSecret {
			continue
		}
		for _, form := range []string{v,
			base64.StdEncoding.EncodeToString([]byte(v)),
			base64.RawStdEncoding.EncodeToString([]byte(v)),
			base64.URLEncoding.EncodeToString([]byte(v)),
			url.QueryEscape(v), url.PathEscape(v)} {
			if !slices.Contains(r.secrets, form) {
				r.secrets = append(r.secrets, form)
			}
		}
	}
	// Longest first, so a secret that contains another is removed whole.
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(r.secrets))
	for _, s := range r.secrets {
		pairs = append(pairs, s, Redacted)
	}
	r.replacer = strings.NewReplacer(pairs...)
}

// String returns s without any registered secret.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.replacer == nil {
		return s
	}
	return r.replacer.Replace(s)
}
