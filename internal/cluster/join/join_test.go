package join

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/egress/tlsca"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/store"
)

type env struct {
	db  *store.DB
	ca  *tlsca.CA
	is  *Issuer
	now time.Time
}

func newEnv(t *testing.T) *env {
	d, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ca, err := tlsca.Open(filepath.Join(t.TempDir(), "cluster-ca"), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{db: d, ca: ca, now: time.Now()}
	e.is = &Issuer{CA: ca, Tokens: d, Now: func() time.Time { return e.now }}
	return e
}

// peer joins as id with a fresh token and returns its TLS config.
func (e *env) peer(t *testing.T, id string) *tls.Config {
	t.Helper()
	key, cert := e.joined(t, id)
	cfg, err := TLSConfig(cert, key, e.ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// handshake runs a TLS server with srv and dials it with cli naming
// serverName; it returns the client certificate's name the server saw.
func handshake(t *testing.T, srv, cli *tls.Config, serverName string) (string, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			seen <- ""
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if tc.Handshake() != nil || len(tc.ConnectionState().PeerCertificates) == 0 {
			seen <- ""
			return
		}
		seen <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
		io.WriteString(c, "ok")
	}()
	c := cli.Clone()
	c.ServerName = serverName
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), c)
	if err == nil {
		var b [2]byte
		_, err = io.ReadFull(conn, b[:])
		conn.Close()
	}
	return <-seen, err
}

// TestMutualTLS: an API server and a node that joined with tokens talk;
// each sees the other's ID; a peer of another CA, a peer without a
// certificate and a server with the wrong name are refused.
func TestMutualTLS(t *testing.T) {
	e := newEnv(t)
	node, api := e.peer(t, "node-a"), e.peer(t, "api-1")
	got, err := handshake(t, node, api, "node-a")
	if err != nil || got != "api-1" {
		t.Fatalf("api -> node: client %q, %v", got, err)
	}
	if _, err := handshake(t, node, api, "node-b"); err == nil {
		t.Error("a client that dials node-b accepted node-a's certificate")
	}
	other := newEnv(t).peer(t, "api-1") // the same name from another CA
	if _, err := handshake(t, node, other, "node-a"); err == nil {
		t.Error("a node accepted a client of another CA")
	}
	if _, err := handshake(t, other, api, "node-a"); err == nil {
		t.Error("a client accepted a node of another CA")
	}
	bare := &tls.Config{RootCAs: api.RootCAs, MinVersion: tls.VersionTLS13}
	if _, err := handshake(t, node, bare, "node-a"); err == nil {
		t.Error("a node accepted a client without a certificate")
	}
}

func TestJoinRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, csr, err := Request("node-a")
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() string {
		tok, err := NewToken(ctx, e.db, time.Minute, e.now)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	used := fresh()
	if _, _, err := e.is.Join(ctx, used, csr); err != nil {
		t.Fatal(err)
	}
	expired := fresh()
	wrong, flip := fresh(), "0"
	if strings.HasSuffix(wrong, "0") {
		flip = "1"
	}
	wrong = wrong[:len(wrong)-1] + flip // same ID, another secret
	_, badName, _ := Request("Node_A")
	blk, _ := pem.Decode(csr)
	blk.Bytes[len(blk.Bytes)-5] ^= 0xff // breaks the request's signature
	tampered := pem.EncodeToMemory(blk)
	tests := []struct {
		name  string
		token string
		csr   []byte
		later time.Duration
		want  error
	}{
		{"used twice", used, csr, 0, errdefs.ErrPermissionDenied},
		{"expired", expired, csr, 2 * time.Minute, errdefs.ErrPermissionDenied},
		{"wrong secret", wrong, csr, 0, errdefs.ErrPermissionDenied},
		{"not a token", "hello", csr, 0, errdefs.ErrInvalidArgument},
		{"unknown id", "moatjoin_0000000000000000." + strings.Repeat("ab", 32), csr, 0, errdefs.ErrPermissionDenied},
		{"not PEM", fresh(), []byte("csr"), 0, errdefs.ErrInvalidArgument},
		{"bad node ID", fresh(), badName, 0, errdefs.ErrInvalidArgument},
		{"bad signature", fresh(), tampered, 0, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := *e.is
			is.Now = func() time.Time { return e.now.Add(tt.later) }
			if _, _, err := is.Join(ctx, tt.token, tt.csr); !errors.Is(err, tt.want) {
				t.Fatalf("join: %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := NewToken(ctx, e.db, 8*24*time.Hour, e.now); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a token for 8 days: %v", err)
	}
}

// TestTokenOnce: of ten nodes that present one token at once, one joins.
func TestTokenOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	tok, err := NewToken(ctx, e.db, time.Hour, e.now)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	joined := 0
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, csr, _ := Request("node-x")
			if _, _, err := e.is.Join(ctx, tok, csr); err == nil {
				mu.Lock()
				joined++
				mu.Unlock()
			} else if !errors.Is(err, errdefs.ErrPermissionDenied) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if joined != 1 {
		t.Fatalf("%d nodes joined with one token", joined)
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("moatjoin_0123456789abcdef." + strings.Repeat("0a", 32))
	f.Add("moatjoin_.")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := parseToken(s)
		if err != nil {
			return
		}
		if len(id) != 16 || len(secret) != 64 || !strings.Contains(s, id+"."+secret) {
			t.Fatalf("parseToken(%q) = %q, %q", s, id, secret)
		}
	})
}
