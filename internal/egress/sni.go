package egress

import (
	"errors"
	"io"
	"strings"
)

// maxRecord is the largest TLS plaintext record (2^14) plus its 5-byte
// header: the ClientHello must fit in the first record.
const maxRecord = 5 + 1<<14

var errNotClientHello = errors.New("not a TLS ClientHello with a server name")

// readClientHello reads the first TLS record from r (at most maxRecord
// bytes) and returns it whole, with the server name of the ClientHello it
// holds. The record is returned even when parsing fails.
func readClientHello(r io.Reader) ([]byte, string, error) {
	hdr := make([]byte, 5, maxRecord)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return hdr, "", err
	}
	if hdr[0] != 0x16 || hdr[1] != 3 {
		return hdr, "", errNotClientHello
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if n == 0 || 5+n > maxRecord {
		return hdr, "", errNotClientHello
	}
	rec := hdr[:5+n]
	if _, err := io.ReadFull(r, rec[5:]); err != nil {
		return rec, "", err
	}
	name, err := ServerName(rec)
	return rec, name, err
}

// ServerName returns the host_name of the server_name extension of the TLS
// ClientHello that rec, one whole TLS record, holds. The ClientHello must
// be complete within the record; anything malformed, truncated or without
// exactly one syntactically valid host name is an error.
func ServerName(rec []byte) (string, error) {
	p := parser(rec)
	typ, _ := p.u8()
	if typ != 0x16 {
		return "", errNotClientHello
	}
	p.skip(2) // legacy record version
	body, ok := p.vec(2)
	if !ok || len(p) != 0 {
		return "", errNotClientHello
	}
	if ht, _ := body.u8(); ht != 1 {
		return "", errNotClientHello
	}
	hello, ok := body.vec(3)
	if !ok {
		return "", errNotClientHello
	}
	if !hello.skip(2 + 32) { // client version, random
		return "", errNotClientHello
	}
	for _, l := range []int{1, 2, 1} { // session id, cipher suites, compression
		if _, ok := hello.vec(l); !ok {
			return "", errNotClientHello
		}
	}
	exts, ok := hello.vec(2)
	if !ok {
		return "", errNotClientHello
	}
	name := ""
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return "", errNotClientHello
		}
		if typ != 0 {
			continue
		}
		if name != "" {
			return "", errNotClientHello
		}
		list, ok := data.vec(2)
		if !ok || len(data) != 0 {
			return "", errNotClientHello
		}
		for len(list) > 0 {
			nt, ok1 := list.u8()
			v, ok2 := list.vec(2)
			if !ok1 || !ok2 {
				return "", errNotClientHello
			}
			if nt != 0 {
				continue
			}
			if name != "" {
				return "", errNotClientHello
			}
			name = string(v)
		}
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if !validName(name) {
		return "", errNotClientHello
	}
	return name, nil
}

// validName checks host name syntax: dot-separated labels of 1-63 letters,
// digits, hyphens and underscores, 253 characters at most.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// parser reads big-endian fields off the front of a byte slice.
type parser []byte

func (p *parser) skip(n int) bool {
	if len(*p) < n {
		*p = nil
		return false
	}
	*p = (*p)[n:]
	return true
}

func (p *parser) u8() (byte, bool) {
	if len(*p) < 1 {
		return 0, false
	}
	v := (*p)[0]
	*p = (*p)[1:]
	return v, true
}

func (p *parser) u16() (int, bool) {
	if len(*p) < 2 {
		return 0, false
	}
	v := int((*p)[0])<<8 | int((*p)[1])
	*p = (*p)[2:]
	return v, true
}

// vec reads a vector with an lenBytes-byte length prefix.
func (p *parser) vec(lenBytes int) (parser, bool) {
	if len(*p) < lenBytes {
		return nil, false
	}
	n := 0
	for i := 0; i < lenBytes; i++ {
		n = n<<8 | int((*p)[i])
	}
	rest := (*p)[lenBytes:]
	if len(rest) < n {
		return nil, false
	}
	*p = rest[n:]
	return rest[:n], true
}
