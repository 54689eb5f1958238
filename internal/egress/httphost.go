package egress

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
)

// maxHead bounds an HTTP request head the proxy reads to find Host.
const maxHead = 16 << 10

var errNoHost = errors.New("not an HTTP/1 request with a valid Host")

// readHead reads from r until the end of an HTTP/1 request head (a blank
// line), at most maxHead bytes, and returns what it read with the request's
// host name. What was read is returned even on error.
func readHead(r io.Reader) ([]byte, string, error) {
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for {
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			h, err := HostOf(buf[:i+4])
			return buf, h, err
		}
		if len(buf) >= maxHead {
			return buf, "", errNoHost
		}
		n, err := r.Read(tmp[:min(len(tmp), maxHead-len(buf))])
		buf = append(buf, tmp[:n]...)
		if err != nil && n == 0 {
			return buf, "", err
		}
	}
}

// HostOf returns the host name (lowercase, without port) of the HTTP/1
// request head: the authority of an absolute-form target, else the single
// Host header. Two Host headers, a Host that disagrees with the target's
// authority, or a name that is not a DNS name (an IP literal, say) are
// errors.
func HostOf(head []byte) (string, error) {
	lines := strings.Split(string(head), "\r\n")
	req := strings.Fields(lines[0])
	if len(req) != 3 || !strings.HasPrefix(req[2], "HTTP/1.") {
		return "", errNoHost
	}
	var host string
	hosts := 0
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok || strings.ContainsAny(k, " \t") {
			return "", errNoHost
		}
		if strings.EqualFold(k, "host") {
			host = strings.TrimSpace(v)
			hosts++
		}
	}
	if hosts > 1 {
		return "", errNoHost
	}
	if rest, ok := strings.CutPrefix(strings.ToLower(req[1]), "http://"); ok {
		auth, _, _ := strings.Cut(rest, "/")
		if hosts == 1 && !strings.EqualFold(stripPort(auth), stripPort(host)) {
			return "", errNoHost
		}
		host = auth
	} else if hosts != 1 {
		return "", errNoHost
	}
	h := strings.ToLower(strings.TrimSuffix(stripPort(host), "."))
	if strings.Contains(h, "@") || !validName(h) || net.ParseIP(h) != nil {
		return "", errNoHost
	}
	return h, nil
}

// stripPort removes a ":port" suffix.
func stripPort(hp string) string {
	if h, p, err := net.SplitHostPort(hp); err == nil && p != "" {
		return h
	}
	return hp
}
