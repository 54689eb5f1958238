package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/store"
)

// TestAPIKeyCreateTeam: `moat apikey create --team NAME` makes a key of that
// team, no --team means the default team, and a bad name is refused with a
// clear message and creates nothing.
func TestAPIKeyCreateTeam(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	tests := []struct {
		args    []string
		team    string
		wantErr string
	}{
		{nil, store.DefaultTeam, ""},
		{[]string{"--team", "a"}, "a", ""},
		{[]string{"--team=team_b-2"}, "team_b-2", ""},
		{[]string{"--team", "Bad Team"}, "", "invalid team name"},
		{[]string{"--team", ""}, store.DefaultTeam, ""},
	}
	for _, tt := range tests {
		key, err := createAPIKey(dir, tt.args...)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: err = %v, want %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		db, err := store.Open(context.Background(), storePath(dir))
		if err != nil {
			t.Fatal(err)
		}
		team, ok, err := db.CheckAPIKey(context.Background(), key)
		db.Close()
		if err != nil || !ok || team != tt.team {
			t.Errorf("%v: key %q: team %q ok %v err %v, want team %q", tt.args, key, team, ok, err, tt.team)
		}
	}
	db, err := store.Open(context.Background(), storePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, err := db.CountAPIKeys(context.Background()); err != nil || n != 4 {
		t.Fatalf("keys = %d, %v; want 4 (the bad name made none)", n, err)
	}
}

// createAPIKey runs `moat apikey create --data-dir dir args...` and returns
// the key, the last line it prints.
func createAPIKey(dir string, args ...string) (string, error) {
	out, stderr, code, err := runCLI(append([]string{"apikey", "create", "--data-dir", dir}, args...)...)
	if err == nil && code != 0 {
		err = fmt.Errorf("moat apikey create %v: exit code %d: %s", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1], err
}
