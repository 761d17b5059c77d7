package charts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// What the plugin downloads is bounded in size and time.
const (
	maxIndex    = 32 << 20
	maxArchive  = 16 << 20
	maxManifest = 16 << 20
	maxAPI      = 1 << 20
	maxRedirect = 5

	fetchTimeout  = 60 * time.Second
	githubTimeout = 10 * time.Second
)

// fetcher downloads over HTTP(S): only http and https URLs, each asked of
// the allow hook first (and each redirect too), with TLS verification
// always on.
type fetcher struct {
	client *http.Client
	allow  func(string) error

	// latest keeps the Gateway API's latest release tag by API base,
	// with the ETag GitHub answered it with: the next question is
	// conditional, and GitHub does not charge a 304 to the rate limit.
	mu     sync.Mutex
	latest map[string]etagged
}

// etagged is an answer and the ETag it came with.
type etagged struct{ etag, tag string }

func newFetcher(o Options) *fetcher {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: refuseLinkLocal}
	t.DialContext = dialer.DialContext
	f := &fetcher{allow: o.AllowURL, latest: map[string]etagged{}}
	f.client = &http.Client{Transport: t, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirect {
			return errors.New("too many redirects")
		}
		// A redirect keeps its scheme, or goes to https.
		if req.URL.Scheme != "https" && req.URL.Scheme != via[0].URL.Scheme {
			return fmt.Errorf("a redirect to %s is refused: it leaves %s", req.URL.Redacted(), via[0].URL.Scheme)
		}
		return f.check(req.URL)
	}}
	return f
}

// check refuses what is not an http(s) URL with a host, or carries
// credentials, or what the allow hook refuses.
func (f *fetcher) check(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s is not an http or https URL", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("%s names no host", u.Redacted())
	}
	if u.User != nil {
		return fmt.Errorf("%s carries credentials, which the plugin does not send", u.Redacted())
	}
	if f.allow != nil {
		if err := f.allow(u.String()); err != nil {
			return fmt.Errorf("%s is not allowed: %w", u.Redacted(), err)
		}
	}
	return nil
}

// get downloads raw, at most limit bytes, within timeout.
func (f *fetcher) get(ctx context.Context, raw string, limit int64, timeout time.Duration, header map[string]string) ([]byte, error) {
	data, _, err := f.getIf(ctx, raw, limit, timeout, header, nil)
	return data, err
}

// getIf is get that also takes 304 Not Modified when notModified says
// so (a conditional request), and returns the answer's headers.
func (f *fetcher) getIf(ctx context.Context, raw string, limit int64, timeout time.Duration, header map[string]string,
	notModified func(http.Header)) ([]byte, http.Header, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// Not quoted: a URL that does not parse may still hold a password.
		return nil, nil, errors.New("a URL does not parse")
	}
	if err := f.check(u); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u.Redacted(), unwrapURL(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && notModified != nil:
		notModified(resp.Header)
		return nil, resp.Header, nil
	case resp.StatusCode != http.StatusOK:
		return nil, nil, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	if int64(len(data)) > limit {
		return nil, nil, fmt.Errorf("GET %s: more than %d bytes", u.Redacted(), limit)
	}
	return data, resp.Header, nil
}

// unwrapURL drops url.Error's repetition of the method and URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// repos reads chart repositories, each index once per use.
type repos struct {
	f       *fetcher
	indexes map[string]*repo.IndexFile
}

func (f *fetcher) repos() *repos { return &repos{f: f, indexes: map[string]*repo.IndexFile{}} }

// index is the repository's index.yaml, parsed with Helm's IndexFile.
func (r *repos) index(ctx context.Context, repoURL string) (*repo.IndexFile, error) {
	if idx, ok := r.indexes[repoURL]; ok {
		return idx, nil
	}
	data, err := r.f.get(ctx, strings.TrimRight(repoURL, "/")+"/index.yaml", maxIndex, fetchTimeout, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the chart repository's index: %w", err)
	}
	idx := &repo.IndexFile{}
	if err := yaml.Unmarshal(data, idx); err != nil {
		return nil, fmt.Errorf("the chart repository's index.yaml does not parse: %w", err)
	}
	if idx.APIVersion == "" {
		return nil, errors.New("the chart repository's index.yaml has no apiVersion")
	}
	for name, versions := range idx.Entries {
		kept := versions[:0]
		for _, v := range versions {
			if v != nil && v.Metadata != nil {
				kept = append(kept, v)
			}
		}
		idx.Entries[name] = kept
	}
	idx.SortEntries()
	r.indexes[repoURL] = idx
	return idx, nil
}

// version finds a chart's version in the repository: the newest stable
// one for "", else the pinned one (or what Helm's constraint matches).
func (r *repos) version(ctx context.Context, repoURL, name, version string) (*repo.ChartVersion, error) {
	idx, err := r.index(ctx, repoURL)
	if err != nil {
		return nil, err
	}
	cv, err := idx.Get(name, version)
	if err != nil {
		if version == "" {
			return nil, fmt.Errorf("the chart repository has no chart %s", name)
		}
		return nil, fmt.Errorf("the chart repository has no chart %s version %s", name, version)
	}
	return cv, nil
}

// chart downloads and loads a chart version's archive, checking its
// digest when the index gives one.
func (r *repos) chart(ctx context.Context, repoURL string, cv *repo.ChartVersion) (*chart.Chart, error) {
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("the chart repository gives no URL for %s %s", cv.Name, cv.Version)
	}
	base, err := url.Parse(strings.TrimRight(repoURL, "/") + "/")
	if err != nil {
		return nil, errors.New("the repository URL does not parse")
	}
	ref, err := url.Parse(cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("the chart repository's URL for %s %s does not parse", cv.Name, cv.Version)
	}
	data, err := r.f.get(ctx, base.ResolveReference(ref).String(), maxArchive, fetchTimeout, nil)
	if err != nil {
		return nil, fmt.Errorf("downloading %s %s: %w", cv.Name, cv.Version, err)
	}
	if cv.Digest != "" {
		sum := sha256.Sum256(data)
		if !strings.EqualFold(hex.EncodeToString(sum[:]), cv.Digest) {
			return nil, fmt.Errorf("%s %s: the archive's digest is not the index's", cv.Name, cv.Version)
		}
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("loading %s %s: %w", cv.Name, cv.Version, err)
	}
	return ch, nil
}

// tagText is what a release tag may be: it goes into a URL's path.
var tagText = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

// gatewayLatest asks GitHub's API (base) for the Gateway API's latest
// release tag.
func (f *fetcher) gatewayLatest(ctx context.Context, base string) (string, error) {
	header := map[string]string{"Accept": "application/vnd.github+json"}
	f.mu.Lock()
	known, ok := f.latest[base]
	f.mu.Unlock()
	if ok && known.etag != "" {
		header["If-None-Match"] = known.etag
	}
	unchanged := false
	data, h, err := f.getIf(ctx, strings.TrimRight(base, "/")+"/repos/kubernetes-sigs/gateway-api/releases/latest", maxAPI, githubTimeout,
		header, func(http.Header) { unchanged = ok })
	if err != nil {
		return "", err
	}
	if unchanged {
		return known.tag, nil
	}
	if data == nil {
		return "", errors.New("GitHub answered 304 Not Modified to a question it was not asked")
	}
	var rel struct {
		Tag string `json:"tag_name"`
	}
	if err := json.Unmarshal(data, &rel); err != nil || rel.Tag == "" {
		return "", errors.New("the latest release names no tag")
	}
	if !tagText.MatchString(rel.Tag) {
		return "", errors.New("the latest release's tag is not a version")
	}
	if etag := h.Get("ETag"); etag != "" {
		f.mu.Lock()
		f.latest[base] = etagged{etag: etag, tag: rel.Tag}
		f.mu.Unlock()
	}
	return rel.Tag, nil
}

// refuseLinkLocal refuses a connection to a link-local or unspecified
// address, whatever name or redirect led there: no chart repository is
// served there, but a cloud's instance metadata (169.254.169.254, with
// its credentials) is. It sees the address actually dialled, after DNS.
func refuseLinkLocal(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() {
		return fmt.Errorf("%s is a link-local or unspecified address, which the plugin never fetches from", ip)
	}
	return nil
}
