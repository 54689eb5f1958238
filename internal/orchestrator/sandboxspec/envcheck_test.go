package sandboxspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

func TestCheckEnvVars(t *testing.T) {
	big := strings.Repeat("x", maxEnvEntryBytes)
	half := strings.Repeat("y", maxEnvEntryBytes/2)
	many := map[string]string{}
	for i := range 20 {
		many[string(rune('A'+i))] = half
	}
	for _, tc := range []struct {
		name string
		envs map[string]string
		want string // "" = valid; else a substring of the error
	}{
		{"nil", nil, ""},
		{"plain", map[string]string{"A": "1", "PATH_EXTRA": "/x", "EMPTY": ""}, ""},
		{"unicode", map[string]string{"ÄPFEL": "grün"}, ""},
		{"largest entry", map[string]string{"K": big[:maxEnvEntryBytes-3]}, ""},
		{"empty name", map[string]string{"": "x"}, "name is empty"},
		{"equals in name", map[string]string{"A=B": "x"}, "contains '='"},
		{"NUL in name", map[string]string{"A\x00": "x"}, "contains '='"},
		{"NUL in value", map[string]string{"A": "x\x00y"}, "contains NUL"},
		{"entry too big", map[string]string{"K": big}, "one variable may have at most"},
		{"900 KiB value", map[string]string{"K": strings.Repeat("v", 900<<10)}, "one variable may have at most"},
		{"total too big", many, "bytes in all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEnvVars(tc.envs)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckEnvVars: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("CheckEnvVars = %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
}

func FuzzCheckEnvVars(f *testing.F) {
	f.Add("A", "1")
	f.Add("", "x")
	f.Add("A=B", "x")
	f.Add("K", "a\x00b")
	f.Fuzz(func(t *testing.T, k, v string) {
		err := CheckEnvVars(map[string]string{k: v})
		valid := k != "" && !strings.ContainsAny(k, "=\x00") && !strings.ContainsRune(v, 0) &&
			len(k)+len(v)+2 <= maxEnvEntryBytes
		if (err == nil) != valid {
			t.Fatalf("CheckEnvVars(%q, %d bytes) = %v, valid %v", k, len(v), err, valid)
		}
	})
}
