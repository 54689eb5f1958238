package templateapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestCheckUpload signs URLs as FilesLink hands them out and checks what
// ServeUpload accepts: the URL as signed, nothing altered, nothing late.
func TestCheckUpload(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := &Config{Now: func() time.Time { return now }}
	b.fill()
	hash := strings.Repeat("ab", 32)
	signed := b.uploadURL(httptest.NewRequest(http.MethodGet, "http://moat.test/", nil), "team1", "tpl1", hash)
	for _, tc := range []struct {
		name   string
		edit   func(u *url.URL)
		later  time.Duration
		status int
	}{
		{"as signed", func(*url.URL) {}, 0, 0},
		{"before expiry", func(*url.URL) {}, time.Hour, 0},
		{"expired", func(*url.URL) {}, time.Hour + time.Second, http.StatusForbidden},
		{"other team", func(u *url.URL) { setQuery(u, "team", "team2") }, 0, http.StatusForbidden},
		{"other template", func(u *url.URL) { setQuery(u, "template", "tpl2") }, 0, http.StatusForbidden},
		{"later expiry", func(u *url.URL) { setQuery(u, "expires", "9999999999") }, 0, http.StatusForbidden},
		{"other hash", func(u *url.URL) { u.Path = UploadPathPrefix + strings.Repeat("cd", 32) }, 0, http.StatusForbidden},
		{"bad hash", func(u *url.URL) { u.Path = UploadPathPrefix + "AB" }, 0, http.StatusBadRequest},
		{"no sig", func(u *url.URL) { setQuery(u, "sig", "") }, 0, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(signed)
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(u)
			b.Now = func() time.Time { return now.Add(tc.later) }
			team, got, status, msg := b.checkUpload(httptest.NewRequest(http.MethodPut, u.String(), nil))
			if status != tc.status {
				t.Fatalf("status = %d (%s), want %d", status, msg, tc.status)
			}
			if status == 0 && (team != "team1" || got != hash) {
				t.Fatalf("checkUpload = team %q hash %q, want team1 %s", team, got, hash)
			}
		})
	}
}

func setQuery(u *url.URL, k, v string) {
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
}

func TestIsUploadName(t *testing.T) {
	hash := strings.Repeat("0f", 32)
	for name, want := range map[string]bool{
		hash + ".tar": true, ".upload-123": true, hash: false, "x.tar": false, strings.ToUpper(hash) + ".tar": false,
	} {
		if got := isUploadName(name); got != want {
			t.Errorf("isUploadName(%q) = %v, want %v", name, got, want)
		}
	}
}
