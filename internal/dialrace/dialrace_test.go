package dialrace

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// attempt is what one call of a fake dial does.
type attempt struct {
	after time.Duration // then it connects or fails
	err   error
	hang  bool // until its context ends
}

// fakeDial plays attempts in order and records the connections it made.
type fakeDial struct {
	attempts []attempt
	calls    atomic.Int32
	conns    chan net.Conn // the far ends, one per connection made
}

func (f *fakeDial) dial(ctx context.Context) (net.Conn, error) {
	a := f.attempts[f.calls.Add(1)-1]
	if a.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	select {
	case <-time.After(a.after):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.err != nil {
		return nil, a.err
	}
	c, far := net.Pipe()
	f.conns <- far
	return c, nil
}

func TestDial(t *testing.T) {
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	const stall = 50 * time.Millisecond
	tests := []struct {
		name      string
		attempts  []attempt
		timeout   time.Duration
		wantErr   error
		wantCalls int32
		wantStall bool
	}{
		{"connects at once", []attempt{{}}, time.Second, nil, 1, false},
		{"refused at once: no second try", []attempt{{err: refused}}, time.Second, syscall.ECONNREFUSED, 1, false},
		{"a stuck connect is raced and the second wins", []attempt{{hang: true}, {}}, time.Second, nil, 2, true},
		{"a slow first connect still wins", []attempt{{after: 2 * stall}, {hang: true}}, time.Second, nil, 2, true},
		{"first fails after the stall: the second decides", []attempt{{after: 2 * stall, err: refused}, {after: 3 * stall}}, time.Second, nil, 2, true},
		{"both fail: the first error", []attempt{{after: 2 * stall, err: refused}, {after: 3 * stall, err: errors.New("second")}}, time.Second, syscall.ECONNREFUSED, 2, true},
		{"both stuck: the caller's deadline", []attempt{{hang: true}, {hang: true}}, 4 * stall, context.DeadlineExceeded, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeDial{attempts: tt.attempts, conns: make(chan net.Conn, 2)}
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			stalled, before := false, Stalls()
			c, err := Dial(ctx, f.dial, stall, func() { stalled = true })
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || c != nil {
					t.Fatalf("raceDial = %v, %v; want error %v", c, err, tt.wantErr)
				}
			} else if err != nil || c == nil {
				t.Fatalf("raceDial = %v, %v; want a connection", c, err)
			}
			if n := f.calls.Load(); n != tt.wantCalls {
				t.Errorf("dialled %d times, want %d", n, tt.wantCalls)
			}
			if stalled != tt.wantStall {
				t.Errorf("onStall called: %v, want %v", stalled, tt.wantStall)
			}
			if counted := Stalls() - before; counted != map[bool]uint64{true: 1}[tt.wantStall] {
				t.Errorf("Stalls() grew by %d, want one per stall", counted)
			}
			if c != nil {
				c.Close()
			}
		})
	}
}

// TestRaceDialClosesTheLoser: when both attempts connect, the one that
// lost is closed, not leaked.
func TestDialClosesTheLoser(t *testing.T) {
	const stall = 20 * time.Millisecond
	f := &fakeDial{attempts: []attempt{{after: 3 * stall}, {after: 3 * stall}}, conns: make(chan net.Conn, 2)}
	c, err := Dial(context.Background(), f.dial, stall, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Each far end sees EOF once its near end is closed. One of the two is
	// the winner's (open); the loser's far end must see EOF.
	closed := make(chan bool, 2)
	for range 2 {
		select {
		case far := <-f.conns:
			go func() {
				_ = far.SetReadDeadline(time.Now().Add(time.Second))
				_, err := far.Read(make([]byte, 1))
				closed <- !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err)
			}()
		case <-time.After(time.Second):
			// The loser may have been cancelled before it connected: fine.
			return
		}
	}
	n := 0
	for range 2 {
		if <-closed {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of the two connections were closed, want the loser's only", n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestNewTransport: the transport reaches a server through the racing
// dialer and pools no connection.
func TestNewTransport(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := NewTransport()
	if tr.Proxy != nil || tr.DialContext == nil {
		t.Errorf("NewTransport: proxy set %v, dial set %v", tr.Proxy != nil, tr.DialContext != nil)
	}
	for range 2 {
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("two requests used %d connections, want 2 (none pooled)", n)
	}
}
