package secrets

import (
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

// Limits of network.rules.
const (
	MaxRuleDomains     = 64
	MaxRulesPerDomain  = 16
	MaxRuleHeaders     = 32
	MaxHeaderValueSize = 8 << 10
)

// Rule is one validated network rule: headers to set on requests to
// Domain (exact, or "*.example.com" for its subdomains), as stored with
// the sandbox.
type Rule = store.NetworkRule

var (
	labelRE       = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	headerNameRE  = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	placeholderRE = regexp.MustCompile(`\$\{e2b\.([^{}]*)\}`)
)

// Headers a rule may not set: they frame or route the request.
var reservedHeaders = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true,
	"Connection": true, "Upgrade": true, "Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Connection": true}

func badRule(format string, args ...any) error {
	return errdefs.Publicf(errdefs.ErrInvalidArgument, "network.rules: "+format, args...)
}

// ParseRules validates E2B's network.rules (domain -> rules with header
// transforms) and returns them by domain with the names (canonical) of the
// secrets their placeholders use, sorted. Placeholders are
// ${e2b.secrets.NAME}; ${e2b.identity.tokens.NAME} (workload identity) is
// refused as unsupported, any other ${e2b.…} as malformed. A domain given
// twice (in two letter cases) and a header given twice in one transform
// are refused too: which one applies would be left to chance. in holds
// each domain's rules as the headers their transform sets (nil: a rule
// without one); the server converts the API's types at its edge.
func ParseRules(in map[string][]map[string]string) ([]Rule, []string, error) {
	if len(in) > MaxRuleDomains {
		return nil, nil, badRule("%d domains: the limit is %d", len(in), MaxRuleDomains)
	}
	names := map[string]bool{}
	seen := map[string]string{}
	var out []Rule
	for domain, rules := range in {
		d, err := checkDomain(domain)
		if err != nil {
			return nil, nil, err
		}
		if other, dup := seen[d]; dup {
			return nil, nil, badRule("domains %q and %q are the same", other, domain)
		}
		seen[d] = domain
		if len(rules) > MaxRulesPerDomain {
			return nil, nil, badRule("domain %q has %d rules: the limit is %d", domain, len(rules), MaxRulesPerDomain)
		}
		for _, headers := range rules {
			rule := Rule{Domain: d, Headers: map[string]string{}}
			if headers != nil {
				if err := checkHeaders(domain, headers, names); err != nil {
					return nil, nil, err
				}
				for k, v := range headers {
					ck := http.CanonicalHeaderKey(k)
					if _, dup := rule.Headers[ck]; dup {
						return nil, nil, badRule("domain %q sets header %q twice (names are case-insensitive)", domain, ck)
					}
					rule.Headers[ck] = v
				}
			}
			out = append(out, rule)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Domain < out[j].Domain })
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	return out, list, nil
}

// checkDomain accepts a host name or "*." and a host name, lower-cased.
func checkDomain(domain string) (string, error) {
	d := strings.ToLower(strings.TrimSuffix(domain, "."))
	host := strings.TrimPrefix(d, "*.")
	if host == "" || len(host) > 253 || strings.Contains(host, "*") {
		return "", badRule("invalid domain %q: want a host name or *.<host name>", domain)
	}
	for _, l := range strings.Split(host, ".") {
		if !labelRE.MatchString(l) {
			return "", badRule("invalid domain %q: want a host name or *.<host name>", domain)
		}
	}
	return d, nil
}

func checkHeaders(domain string, headers map[string]string, names map[string]bool) error {
	if len(headers) > MaxRuleHeaders {
		return badRule("domain %q sets %d headers: the limit is %d", domain, len(headers), MaxRuleHeaders)
	}
	for k, v := range headers {
		if !headerNameRE.MatchString(k) {
			return badRule("domain %q: invalid header name %q", domain, k)
		}
		if reservedHeaders[http.CanonicalHeaderKey(k)] {
			return badRule("domain %q: header %q cannot be set by a rule", domain, k)
		}
		if len(v) > MaxHeaderValueSize {
			return badRule("domain %q: header %q value is %d bytes: the limit is %d", domain, k, len(v), MaxHeaderValueSize)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return badRule("domain %q: header %q value contains CR, LF or NUL", domain, k)
		}
		if err := placeholders(domain, k, v, names); err != nil {
			return err
		}
	}
	return nil
}

// placeholders adds the secret names v refers to, refusing placeholders
// that are not ${e2b.secrets.NAME}.
func placeholders(domain, header, v string, names map[string]bool) error {
	for _, m := range placeholderRE.FindAllStringSubmatch(v, -1) {
		ref := m[1]
		switch {
		case strings.HasPrefix(ref, "secrets."):
			n, err := CanonicalName(strings.TrimPrefix(ref, "secrets."))
			if err != nil {
				return badRule("domain %q: header %q: placeholder %s: %v", domain, header, m[0], err)
			}
			names[n] = true
		case strings.HasPrefix(ref, "identity.tokens."):
			return badRule("domain %q: header %q: workload identity tokens (%s) are not supported by this server",
				domain, header, m[0])
		default:
			return badRule("domain %q: header %q: unknown placeholder %s (want ${e2b.secrets.NAME})", domain, header, m[0])
		}
	}
	if strings.Contains(placeholderRE.ReplaceAllString(v, ""), "${e2b.") {
		return badRule("domain %q: header %q: unterminated placeholder", domain, header)
	}
	return nil
}

// CheckReachable refuses rules for domains that allowOut does not reach:
// rules grant no egress (as on E2B, a rule's host must also be allowed by
// an allowOut domain entry), so such a rule could never apply. allowDomains
// are allowOut's canonical domain entries ("x.example", "*.example"). An
// exact rule domain must be allowed by one of them; a wildcard one
// ("*.d") must share at least one name with one (an entry below d, "*.d"
// itself, or a wildcard above or below it). The error names the domain.
func CheckReachable(rules []Rule, allowDomains []string) error {
	for _, r := range rules {
		if !reachable(r.Domain, allowDomains) {
			return badRule("domain %q is not reachable: rules grant no egress, add it (or a wildcard covering it) "+
				"to network.allowOut", r.Domain)
		}
	}
	return nil
}

func reachable(domain string, allow []string) bool {
	under := func(a, b string) bool { return strings.HasSuffix(a, "."+b) } // a strictly below b
	rd, rwild := strings.CutPrefix(domain, "*.")
	for _, a := range allow {
		ad, awild := strings.CutPrefix(a, "*.")
		switch {
		case !rwild && !awild && rd == ad,
			!rwild && awild && under(rd, ad),
			rwild && !awild && under(ad, rd),
			rwild && awild && (ad == rd || under(ad, rd) || under(rd, ad)):
			return true
		}
	}
	return false
}
