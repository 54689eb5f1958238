package nfsd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"github.com/moatsh/moat/internal/nfsd/export"
)

// Limits of one server: connections at once, and calls being worked on
// at once across them (each may hold a 1 MiB WRITE), so a client cannot
// make the server hold more than about MaxCalls MiB.
const (
	MaxConns = 16
	MaxCalls = 16
)

// Server serves its exports over NFSv3 and MOUNT v3. Safe for concurrent
// use.
type Server struct {
	exports []*export.Export
	byName  map[string]*export.Export
	verf    [8]byte
	log     *slog.Logger
	calls   chan struct{}
	conns   chan struct{}
}

// New serves exports (whose indexes must be their positions); verf is the
// write verifier, which must change whenever data acknowledged as
// UNSTABLE may have been lost (the host's boot ID: the server's own
// restarts lose nothing the kernel holds).
func New(exports []*export.Export, verf [8]byte, log *slog.Logger) (*Server, error) {
	s := &Server{exports: exports, byName: map[string]*export.Export{}, verf: verf, log: log,
		calls: make(chan struct{}, MaxCalls), conns: make(chan struct{}, MaxConns)}
	for i, ex := range exports {
		if ex.Index() != i {
			return nil, fmt.Errorf("nfsd: export %s has index %d at position %d", ex.Name, ex.Index(), i)
		}
		s.byName[ex.Name] = ex
	}
	if log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Serve accepts connections on ln until ctx ends or ln fails. Only
// connections from a privileged source port (below 1024) are served, as
// knfsd's default "secure" export option: a guest's kernel client uses
// one, an unprivileged guest process cannot, so it cannot speak NFS with
// a forged identity.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("nfsd: accept: %w", err)
		}
		if a, ok := conn.RemoteAddr().(*net.TCPAddr); !ok || a.Port >= 1024 {
			s.log.Warn("refused a connection from an unprivileged port", "remote", conn.RemoteAddr().String())
			conn.Close()
			continue
		}
		select {
		case s.conns <- struct{}{}:
		default:
			s.log.Warn("refused a connection: too many", "max", MaxConns)
			conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.conns }()
			s.serveConn(ctx, conn)
		}()
	}
}

// serveConn reads calls from conn and answers each on a goroutine of its
// own (so that a thread an operation left with another user's IDs dies
// with it, see package export), at most MaxCalls at once.
func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var wmu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		rec, err := readRecord(conn, maxRecord)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("connection closed", "remote", conn.RemoteAddr().String(), "err", err)
			}
			return
		}
		c, err := parseCall(rec)
		if err != nil {
			s.log.Warn("connection closed: not an RPC call", "remote", conn.RemoteAddr().String(), "err", err)
			return
		}
		s.calls <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.calls }()
			reply := s.answer(c)
			wmu.Lock()
			defer wmu.Unlock()
			_ = conn.SetWriteDeadline(time.Now().Add(time.Minute))
			if _, err := conn.Write(reply); err != nil {
				conn.Close()
			}
		}()
	}
}

// answer runs call c and returns its framed reply. A panic in a
// procedure is logged and answered as a system error.
func (s *Server) answer(c *call) (reply []byte) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("procedure panicked", "prog", c.prog, "proc", c.proc, "panic", p, "stack", string(debug.Stack()))
			reply = acceptError(c.xid, acceptSystemErr, 0, 0)
		}
	}()
	return s.dispatch(c)
}

// dispatch answers c (see answer).
func (s *Server) dispatch(c *call) []byte {
	if c.authErr != 0 {
		return deny(c.xid, c.authErr)
	}
	var procs []proc
	switch {
	case c.prog == progNFS && c.vers == nfsVers:
		procs = nfsProcs[:]
	case c.prog == progMount && c.vers == mountVers:
		procs = mountProcs[:]
	case c.prog == progNFS:
		return acceptError(c.xid, acceptProgMismatch, nfsVers, nfsVers)
	case c.prog == progMount:
		return acceptError(c.xid, acceptProgMismatch, mountVers, mountVers)
	default:
		return acceptError(c.xid, acceptProgUnavail, 0, 0)
	}
	if int(c.proc) >= len(procs) || procs[c.proc] == nil {
		return acceptError(c.xid, acceptProcUnavail, 0, 0)
	}
	w := newReply(256)
	replyHeader(w, c.xid, acceptSuccess)
	if !procs[c.proc](s, c, w) {
		return acceptError(c.xid, acceptGarbageArgs, 0, 0)
	}
	return frame(w)
}
