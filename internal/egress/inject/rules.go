package inject

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// Rule is one network.rules entry: headers set on requests to Domain (a
// host name, or "*." and a host name for the names below it at any depth,
// never the host name itself). Header values may hold
// ${e2b.secrets.NAME} placeholders.
type Rule struct {
	Domain  string
	Headers map[string]string
}

// Rules are one sandbox's header rules, ready for lookups by server name.
// The zero value has none. Rules are immutable once built.
type Rules struct {
	exact map[string]map[string]string
	wild  []wildRule // longest suffix first
}

type wildRule struct {
	suffix  string // "example.com" for "*.example.com"
	headers map[string]string
}

// Compile builds Rules from network.rules entries. The entries of one
// domain apply together, in order (a later one's header replaces an
// earlier one's of the same name); a domain whose entries set no header
// has no rule (its traffic is not intercepted).
func Compile(rules []Rule) Rules {
	var r Rules
	wild := map[string]map[string]string{}
	for _, rule := range rules {
		if len(rule.Headers) == 0 {
			continue
		}
		d := strings.ToLower(strings.TrimSuffix(rule.Domain, "."))
		into := wild
		if suffix, ok := strings.CutPrefix(d, "*."); ok {
			d = suffix
		} else {
			if r.exact == nil {
				r.exact = map[string]map[string]string{}
			}
			into = r.exact
		}
		if into[d] == nil {
			into[d] = map[string]string{}
		}
		for k, v := range rule.Headers {
			into[d][http.CanonicalHeaderKey(k)] = v
		}
	}
	for s, h := range wild {
		r.wild = append(r.wild, wildRule{suffix: s, headers: h})
	}
	sort.Slice(r.wild, func(i, j int) bool {
		if len(r.wild[i].suffix) != len(r.wild[j].suffix) {
			return len(r.wild[i].suffix) > len(r.wild[j].suffix)
		}
		return r.wild[i].suffix < r.wild[j].suffix
	})
	return r
}

// Empty reports whether r has no rule.
func (r Rules) Empty() bool { return len(r.exact) == 0 && len(r.wild) == 0 }

// Match returns the headers for requests to name (any case, with or
// without the trailing dot): an exact rule beats a wildcard one, and a
// wildcard with a longer suffix beats a shorter one. The map is shared:
// callers must not change it.
func (r Rules) Match(name string) (map[string]string, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return nil, false
	}
	if h, ok := r.exact[name]; ok {
		return h, true
	}
	for _, w := range r.wild {
		if strings.HasSuffix(name, "."+w.suffix) {
			return w.headers, true
		}
	}
	return nil, false
}

// placeholderPrefix opens a secret placeholder; "}" closes it.
const placeholderPrefix = "${e2b.secrets."

// ErrPlaceholder is a malformed ${e2b.secrets.NAME} placeholder (the API
// refuses those, so only a corrupt record holds one).
var ErrPlaceholder = errors.New("malformed secret placeholder")

// Fill returns v with every ${e2b.secrets.NAME} replaced by value(NAME)
// (NAME lower-cased, as secret names are stored); the rest of v is kept as
// it is. The first error of value is returned as is, and v is never
// returned partially filled.
func Fill(v string, value func(name string) (string, error)) (string, error) {
	if !strings.Contains(v, placeholderPrefix) {
		return v, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(v, placeholderPrefix)
		if i < 0 {
			b.WriteString(v)
			return b.String(), nil
		}
		b.WriteString(v[:i])
		rest := v[i+len(placeholderPrefix):]
		j := strings.IndexByte(rest, '}')
		if j < 0 || !validSecretName(rest[:j]) {
			return "", ErrPlaceholder
		}
		val, err := value(strings.ToLower(rest[:j]))
		if err != nil {
			return "", err
		}
		b.WriteString(val)
		v = rest[j+1:]
	}
}

// validSecretName is the secrets API's name syntax: 1-128 of a-z, A-Z,
// 0-9, '_' and '-'.
func validSecretName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// MissingSecretError is a placeholder naming a secret the team does not
// have (deleted after the rules were set).
type MissingSecretError struct{ Name string }

func (e *MissingSecretError) Error() string { return fmt.Sprintf("secret %q not found", e.Name) }
