package filesystem

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/filesystem"
	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/errdefs/errconnect"
)

const (
	// defaultKeepalive applies when Keepalive-Ping-Interval is absent or bad.
	defaultKeepalive = 90 * time.Second
	// maxBufferedEvents bounds what a polling watcher keeps between polls;
	// older events are dropped beyond it.
	maxBufferedEvents = 100_000
)

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("Keepalive-Ping-Interval")))
	if err != nil || n <= 0 {
		return defaultKeepalive
	}
	return time.Duration(n) * time.Second
}

// startWatcher validates a watch request and starts a dirWatcher for it.
func (s *Service) startWatcher(h http.Header, path string, recursive, includeEntry, allowNetwork bool) (*dirWatcher, error) {
	p, _, err := s.resolve(h, path)
	if err != nil {
		return nil, err
	}
	if err := checkWatchable(p, allowNetwork); err != nil {
		return nil, err
	}
	return newDirWatcher(p, recursive, includeEntry, s.log.With("watch", p))
}

// WatchDir streams the changes under a directory until the client goes
// away: first a start message, then one message per event operation, and
// keepalives whenever nothing was sent for the keepalive interval.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	m := req.Msg
	w, err := s.startWatcher(req.Header(), m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return errconnect.ToConnect(err)
	}
	defer w.Close()
	if !s.trackStream(w, true) {
		return errconnect.ToConnect(fmt.Errorf("envd is shutting down: %w", errdefs.ErrUnavailable))
	}
	defer s.trackStream(w, false)

	send := func(r *filesystem.WatchDirResponse) error {
		if err := stream.Send(r); err != nil {
			return fmt.Errorf("send watch event: %w", err)
		}
		return nil
	}
	if err := send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return errconnect.ToConnect(err)
	}
	interval := keepaliveInterval(req.Header())
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return errconnect.ToConnect(ctx.Err())
		case <-timer.C:
			if err := send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return errconnect.ToConnect(err)
			}
			timer.Reset(interval)
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return errconnect.ToConnect(fmt.Errorf("watcher of %s stopped: %w", w.root, errdefs.ErrUnavailable))
			}
			for _, fe := range w.convert(ev) {
				if err := send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
					return errconnect.ToConnect(err)
				}
			}
			timer.Reset(interval)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return errconnect.ToConnect(fmt.Errorf("watcher of %s stopped: %w", w.root, errdefs.ErrUnavailable))
			}
			s.log.Warn("watch error", "path", w.root, "error", err)
			return errconnect.ToConnect(fmt.Errorf("watch %s: %w: %w", w.root, errdefs.ErrInternal, err))
		}
	}
}

// trackStream registers (add) or unregisters a WatchDir watcher so that
// Close can stop it. It reports false when the service is closed.
func (s *Service) trackStream(w *dirWatcher, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.streams, w)
		return true
	}
	if s.closed {
		return false
	}
	s.streams[w] = struct{}{}
	return true
}

// pollWatcher buffers a dirWatcher's events for GetWatcherEvents.
type pollWatcher struct {
	w    *dirWatcher
	done chan struct{}

	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
	err    error
}

func (p *pollWatcher) run() {
	defer close(p.done)
	for {
		select {
		case ev, ok := <-p.w.fsw.Events:
			if !ok {
				return
			}
			fes := p.w.convert(ev)
			p.mu.Lock()
			p.events = append(p.events, fes...)
			if n := len(p.events) - maxBufferedEvents; n > 0 {
				p.events = append(p.events[:0:0], p.events[n:]...)
			}
			p.mu.Unlock()
		case err, ok := <-p.w.fsw.Errors:
			if !ok {
				return
			}
			p.mu.Lock()
			if p.err == nil {
				p.err = fmt.Errorf("watch %s: %w: %w", p.w.root, errdefs.ErrInternal, err)
			}
			p.mu.Unlock()
		}
	}
}

// take returns and clears the buffered events, or the pending error.
func (p *pollWatcher) take() ([]*filesystem.FilesystemEvent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.err; err != nil {
		p.err = nil
		return nil, err
	}
	evs := p.events
	p.events = nil
	return evs, nil
}

func (p *pollWatcher) stop() {
	p.w.Close()
	<-p.done
}

// CreateWatcher starts a watcher whose events GetWatcherEvents collects.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	m := req.Msg
	w, err := s.startWatcher(req.Header(), m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	p := &pollWatcher{w: w, done: make(chan struct{})}
	go p.run()
	id := newWatcherID()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		p.stop()
		return nil, errconnect.ToConnect(fmt.Errorf("envd is shutting down: %w", errdefs.ErrUnavailable))
	}
	s.pollers[id] = p
	s.mu.Unlock()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns and clears the events a watcher buffered.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	p, err := s.poller(req.Msg.GetWatcherId())
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	evs, err := p.take()
	if err != nil {
		return nil, errconnect.ToConnect(err)
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: evs}), nil
}

// RemoveWatcher stops a watcher and forgets it.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	p, ok := s.pollers[id]
	delete(s.pollers, id)
	s.mu.Unlock()
	if !ok {
		return nil, errconnect.ToConnect(fmt.Errorf("watcher with id %q not found: %w", id, errdefs.ErrNotFound))
	}
	p.stop()
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}

func (s *Service) poller(id string) (*pollWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pollers[id]
	if !ok {
		return nil, fmt.Errorf("watcher with id %q not found: %w", id, errdefs.ErrNotFound)
	}
	return p, nil
}

// newWatcherID returns "w" followed by 20 random lowercase letters and digits.
func newWatcherID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [20]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	out := make([]byte, 1, 21)
	out[0] = 'w'
	for _, c := range b {
		out = append(out, alphabet[int(c)%len(alphabet)])
	}
	return string(out)
}
