package egress

import (
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/egress/inject"
)

// Rules is a domain allow list: exact names, and wildcard suffixes ("*.x"
// is stored as "x" and matches names below x at any depth, never x itself),
// as E2B matches allowOut domains.
type Rules struct {
	Exact    []string
	Wildcard []string
}

// Match reports whether name (any case, with or without the trailing dot)
// is allowed.
func (r Rules) Match(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return false
	}
	for _, d := range r.Exact {
		if name == d {
			return true
		}
	}
	for _, d := range r.Wildcard {
		if len(name) > len(d)+1 && strings.HasSuffix(name, d) && name[len(name)-len(d)-1] == '.' {
			return true
		}
	}
	return false
}

// ParseRules builds Rules from canonical allowOut domain strings
// ("api.example.com", "*.example.com"); other strings are skipped.
func ParseRules(domains []string) Rules {
	var r Rules
	for _, d := range domains {
		d = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(d), "."))
		if rest, ok := strings.CutPrefix(d, "*."); ok {
			r.Wildcard = append(r.Wildcard, rest)
		} else if d != "" {
			r.Exact = append(r.Exact, d)
		}
	}
	return r
}

// maxResolved bounds the remembered (name, address) pairs per sandbox.
const maxResolved = 4096

// minTTL and maxTTL clamp how long a resolved address stays usable by the
// proxy: at least long enough for a client to connect after its lookup,
// at most an hour.
const (
	minTTL = 60 * time.Second
	maxTTL = time.Hour
)

// Policy is one sandbox's egress policy as the resolver and the proxy
// enforce it.
type Policy struct {
	// Domains are allowOut's domain entries in canonical form
	// ("api.example.com", "*.example.com"); see ParseRules.
	Domains []string
	// Team owns the secrets that Headers' placeholders name.
	Team string
	// Headers are network.rules: HTTPS to a matching allowed name is
	// intercepted and gets the headers (see package inject); rules grant
	// no egress of their own.
	Headers []inject.Rule
}

// sandbox is one sandbox's policy and what its names resolved to.
type sandbox struct {
	rules  Rules
	team   string
	inject inject.Rules

	mu       sync.Mutex
	resolved map[nameAddr]time.Time // expiry; guarded by mu
}

type nameAddr struct {
	name string
	addr netip.Addr
}

// Table maps sandbox source addresses to their policies. It is safe for
// concurrent use.
type Table struct {
	mu    sync.RWMutex
	src   map[netip.Addr]*sandbox
	conns map[netip.Addr]map[io.Closer]string // spliced connections and their names; guarded by mu
	now   func() time.Time
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{src: map[netip.Addr]*sandbox{}, conns: map[netip.Addr]map[io.Closer]string{}, now: time.Now}
}

// Set replaces the domain rules of the sandbox at addr, without header
// rules (see SetPolicy).
func (t *Table) Set(addr netip.Addr, r Rules) { t.set(addr, r, "", inject.Rules{}) }

// SetPolicy replaces the policy of the sandbox at addr; a policy without
// domains removes it (its traffic then gets no answer from the resolver or
// the proxy). Addresses already resolved for names still allowed stay
// usable; spliced and intercepted connections to names no longer allowed
// are closed. Connections to names still allowed stay up: an intercepted
// one applies the new header rules from its next request on (or none, if
// its name lost them); a spliced one stays spliced (new connections to a
// name that gained rules are intercepted).
func (t *Table) SetPolicy(addr netip.Addr, p Policy) {
	t.set(addr, ParseRules(p.Domains), p.Team, inject.Compile(p.Headers))
}

func (t *Table) set(addr netip.Addr, r Rules, team string, inj inject.Rules) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, name := range t.conns[addr] {
		if !r.Match(name) {
			c.Close()
			delete(t.conns[addr], c)
		}
	}
	if len(r.Exact)+len(r.Wildcard) == 0 {
		delete(t.src, addr)
		return
	}
	sb := &sandbox{rules: r, team: team, inject: inj, resolved: map[nameAddr]time.Time{}}
	if old := t.src[addr]; old != nil {
		old.mu.Lock()
		for k, exp := range old.resolved {
			if r.Match(k.name) {
				sb.resolved[k] = exp
			}
		}
		old.mu.Unlock()
	}
	t.src[addr] = sb
}

// lookup returns the sandbox at addr, if it has rules.
func (t *Table) lookup(addr netip.Addr) *sandbox {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.src[addr.Unmap()]
}

// Allowed reports whether the sandbox at src may look up name.
func (t *Table) Allowed(src netip.Addr, name string) bool {
	sb := t.lookup(src)
	return sb != nil && sb.rules.Match(name)
}

// injects reports whether the sandbox at src has header rules for name
// (an allowed name): its HTTPS is intercepted, its plain HTTP refused.
func (t *Table) injects(src netip.Addr, name string) bool {
	sb := t.lookup(src)
	if sb == nil || !sb.rules.Match(name) {
		return false
	}
	_, ok := sb.inject.Match(name)
	return ok
}

// policyFor is inject.Conn.Policy for the sandbox at src and name, as its
// policy is now.
func (t *Table) policyFor(src netip.Addr, name string) (team string, headers map[string]string, allowed bool) {
	sb := t.lookup(src)
	if sb == nil || !sb.rules.Match(name) {
		return "", nil, false
	}
	h, _ := sb.inject.Match(name)
	return sb.team, h, true
}

// remember records that name resolved to addrs for the sandbox at src.
func (t *Table) remember(src netip.Addr, name string, addrs []netip.Addr, ttl time.Duration) {
	sb := t.lookup(src)
	if sb == nil {
		return
	}
	ttl = min(max(ttl, minTTL), maxTTL)
	exp := t.now().Add(ttl)
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if len(sb.resolved)+len(addrs) > maxResolved {
		now := t.now()
		for k, e := range sb.resolved {
			if now.After(e) {
				delete(sb.resolved, k)
			}
		}
	}
	for _, a := range addrs {
		if len(sb.resolved) >= maxResolved {
			break
		}
		k := nameAddr{name, a.Unmap()}
		if sb.resolved[k].Before(exp) {
			sb.resolved[k] = exp
		}
	}
}

// admit is Permit that, when it agrees, also registers c as a connection
// of src to name, atomically with respect to Set; drop unregisters it.
func (t *Table) admit(src netip.Addr, name string, dst netip.Addr, c io.Closer) (drop func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sb := t.src[src]
	if sb == nil || !t.permit(sb, name, dst) {
		return nil, false
	}
	if t.conns[src] == nil {
		t.conns[src] = map[io.Closer]string{}
	}
	t.conns[src][c] = strings.ToLower(strings.TrimSuffix(name, "."))
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.conns[src], c)
		if len(t.conns[src]) == 0 {
			delete(t.conns, src)
		}
	}, true
}

// Permit reports whether the sandbox at src may connect to dst for name:
// name is on its allow list and resolved to dst through the resolver.
func (t *Table) Permit(src netip.Addr, name string, dst netip.Addr) bool {
	sb := t.lookup(src)
	return sb != nil && t.permit(sb, name, dst)
}

func (t *Table) permit(sb *sandbox, name string, dst netip.Addr) bool {
	if !sb.rules.Match(name) {
		return false
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	sb.mu.Lock()
	defer sb.mu.Unlock()
	exp, ok := sb.resolved[nameAddr{name, dst.Unmap()}]
	return ok && t.now().Before(exp)
}
