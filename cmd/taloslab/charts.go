package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/taloscluster/taloscluster/lab"
	labcharts "github.com/taloscluster/taloscluster/lab/charts"
)

// chartsFaultKinds are the chart repository's fault kinds on POST
// /lab/v1/faults, in the lab's JSON shape (lab.Fault); op is a path it
// serves, such as "/index.yaml" or "/charts/traefik-37.1.1.tgz":
//
//	charts-fail  the path answers 500 until the fault is removed
//	charts-hang  the path never answers until the fault is removed
//	charts-ok    removes the fault of the path
var chartsFaultKinds = []string{"charts-fail", "charts-hang", "charts-ok"}

// chartsLab is the lab's chart repository over TLS with the lab's CA.
type chartsLab struct {
	repo *labcharts.Repo
	http *http.Server
	url  string
}

func startCharts(l *lab.Lab) (*chartsLab, error) {
	repo, err := labcharts.New()
	if err != nil {
		return nil, err
	}
	hs, url, err := serveTLS(l, repo, "the chart repository")
	if err != nil {
		return nil, err
	}
	return &chartsLab{repo: repo, http: hs, url: url}, nil
}

func (c *chartsLab) close() { _ = c.http.Close() }

// inject applies a charts-* fault and describes it.
func (c *chartsLab) inject(f lab.Fault) (string, error) {
	if !strings.HasPrefix(f.Op, "/") {
		return "", fmt.Errorf("fault %s needs op, a path of the chart repository such as /index.yaml", f.Kind)
	}
	switch f.Kind {
	case "charts-fail":
		c.repo.SetFault(f.Op, labcharts.Fail500)
	case "charts-hang":
		c.repo.SetFault(f.Op, labcharts.Hang)
	case "charts-ok":
		c.repo.SetFault(f.Op, labcharts.NoFault)
	default:
		return "", fmt.Errorf("unknown chart repository fault %s", f.Kind)
	}
	return "op=" + f.Op, nil
}

// chartsEnv is lab.env's part on the chart repository.
func chartsEnv(c *chartsLab) string {
	var names []string
	for name, versions := range labcharts.Versions {
		names = append(names, name+" "+strings.Join(versions, "/"))
	}
	return fmt.Sprintf(`# The lab's chart repository (Helm's repository format, TLS from the lab's
# CA): use it as a charts entry's repo. Its charts and versions: %s.
# Gateway API manifests: $TALOSLAB_CHARTS_URL%s
# (tags %s), for a gateway entry's manifest.
export TALOSLAB_CHARTS_URL=%q
`, strings.Join(sortedStrings(names), ", "), labcharts.GatewayManifest, strings.Join(labcharts.GatewayVersions, ", "), c.url)
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
