package report_test

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"github.com/taloscluster/taloscluster/report"
)

func TestRedactor(t *testing.T) {
	t.Parallel()
	const secret = "pve-token-8d2f/41+ab=="
	var r report.Redactor
	r.Add(secret, "abc") // too short to be taken as a secret
	for _, in := range []string{
		"token " + secret + " leaked",
		"b64 " + base64.StdEncoding.EncodeToString([]byte(secret)),
		"url https://x/?t=" + url.QueryEscape(secret),
	} {
		out := r.String(in)
		if strings.Contains(out, secret) || !strings.Contains(out, report.Redacted) {
			t.Errorf("%q -> %q", in, out)
		}
		if strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(secret))) {
			t.Errorf("base64 form survived: %q", out)
		}
	}
	if got := r.String("abc def"); got != "abc def" {
		t.Errorf("a short value was redacted: %q", got)
	}
	var nilR *report.Redactor
	if nilR.String("x") != "x" {
		t.Error("a nil redactor changed text")
	}
}
