package report_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taloscluster/taloscluster/report"
)

func TestMarkdownTextDefusesMentionsAndHTML(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"Grow @org/admins and @alice", "Grow @\u2060org/admins and @\u2060alice"},
		{"<img src=x onerror=alert(1)> **bold**", `\<img src=x onerror=alert(1)\> \*\*bold\*\*`},
		{"two\nlines", `two\\nlines`},
		{"[link](https://evil.example)", `\[link\](https://evil.example)`},
	} {
		if got := report.MarkdownText(tc.in, 200); got != tc.want {
			t.Errorf("MarkdownText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("é", 300)
	if got := report.MarkdownText(long, 101); len(got) > 104 || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
		t.Errorf("a long title became %d bytes %q", len(got), got)
	}
}
