package forge_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestStatusValidationFailed checks the forge refuses a commit status the
// way GitHub does: 422 with GitHub's Validation Failed document, one entry
// per failed field, and nothing stored.
func TestStatusValidationFailed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	head := w.seed(t, 1)
	const docs = "https://docs.github.com/rest/commits/statuses#create-a-commit-status"
	type fieldErr struct {
		Resource string `json:"resource"`
		Code     string `json:"code"`
		Field    string `json:"field"`
		Message  string `json:"message"`
	}
	type document struct {
		Message          string     `json:"message"`
		Errors           []fieldErr `json:"errors"`
		DocumentationURL string     `json:"documentation_url"`
	}
	tooLong := func(field string, limit string) fieldErr {
		return fieldErr{Resource: "Status", Code: "custom", Field: field, Message: field + " is too long (maximum is " + limit + " characters)"}
	}
	for _, tc := range []struct {
		name, sha, body string
		want            document
	}{
		{
			name: "description of 141 characters",
			sha:  head,
			body: `{"state":"success","context":"ci","description":"` + strings.Repeat("d", 141) + `"}`,
			want: document{Message: "Validation Failed", Errors: []fieldErr{tooLong("description", "140")}, DocumentationURL: docs},
		},
		{
			name: "description of 141 two-byte characters",
			sha:  head,
			body: `{"state":"success","context":"ci","description":"` + strings.Repeat("é", 141) + `"}`,
			want: document{Message: "Validation Failed", Errors: []fieldErr{tooLong("description", "140")}, DocumentationURL: docs},
		},
		{
			name: "every field wrong at once",
			sha:  head,
			body: `{"state":"done","context":"` + strings.Repeat("c", 256) + `","description":"` + strings.Repeat("d", 200) + `"}`,
			want: document{Message: "Validation Failed", Errors: []fieldErr{
				{Resource: "Status", Code: "custom", Field: "state", Message: "state is not included in the list"},
				tooLong("context", "255"), tooLong("description", "140"),
			}, DocumentationURL: docs},
		},
		{
			name: "a branch name for the sha",
			sha:  "main",
			body: `{"state":"success"}`,
			want: document{Message: "Validation Failed", Errors: []fieldErr{
				{Resource: "Status", Code: "custom", Field: "sha", Message: "sha must be a 40 character SHA1"},
			}, DocumentationURL: docs},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost,
				w.srv.URL+"/repos/acme/clusters/statuses/"+tc.sha, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "token "+agent.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := w.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422", resp.StatusCode)
			}
			var got document
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tc.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("error document\n got %s\nwant %s", gotJSON, wantJSON)
			}
		})
	}
	if got := w.repo.Statuses(head); len(got) != 0 {
		t.Errorf("refused statuses were stored: %+v", got)
	}
}
