// Package sqlbase holds what every table of Moat's store shares, on SQLite and on PostgreSQL:
// how times are stored, how a missing row is reported, and the team-name
// rule. It exists so that the store's tables can live in packages of
// their own (internal/store/secretstore) without copying these pieces.
package sqlbase

import (
	"regexp"
	"strings"
	"time"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store/pgsql"
)

// IsUniqueViolation reports whether err is a unique constraint's refusal,
// from SQLite or PostgreSQL.
func IsUniqueViolation(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "UNIQUE") || pgsql.IsUniqueViolation(err))
}

// NotFound is the public not-found error for the row of kind what with id.
func NotFound(what, id string) error {
	return errdefs.Publicf(errdefs.ErrNotFound, "%s %q not found", what, id)
}

// ToUnix is a time column's value: Unix nanoseconds, 0 for the zero time.
func ToUnix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromUnix reads a time column written by ToUnix (UTC).
func FromUnix(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// NonNil returns m, or an empty map for nil (JSON columns hold {}, never null).
func NonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

var teamRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidateTeam checks a team name: 1..63 characters of a-z, 0-9, '_' and
// '-', starting with a letter or digit. ErrInvalidArgument otherwise.
func ValidateTeam(team string) error {
	if !teamRE.MatchString(team) {
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "invalid team name %q: want 1 to 63 characters of a-z, 0-9, '_' and '-', "+
			"starting with a letter or digit", team)
	}
	return nil
}
