package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// receiver is a webhook endpoint that checks each delivery's signature
// and keeps the events; while down it answers 503.
type receiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	down   bool
	got    []events.Event
	fails  int
	srv    *httptest.Server
	notify chan struct{}
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{t: t, secret: secret, notify: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		r.fails++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if got, want := req.Header.Get("e2b-signature"), events.Signature(r.secret, body); got != want {
		r.t.Errorf("e2b-signature = %q, want %q", got, want)
	}
	for _, h := range []string{"e2b-webhook-id", "e2b-delivery-id"} {
		if req.Header.Get(h) == "" {
			r.t.Errorf("no %s header", h)
		}
	}
	if v := req.Header.Get("e2b-signature-version"); v != "v1" || req.Method != http.MethodPost {
		r.t.Errorf("%s with e2b-signature-version %q", req.Method, v)
	}
	var ev events.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		r.t.Errorf("body %q: %v", body, err)
	}
	r.got = append(r.got, ev)
	r.notify <- struct{}{}
}

func (r *receiver) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

func (r *receiver) events() []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]events.Event(nil), r.got...)
}

// wait returns once the receiver holds n events (the test's deadline
// bounds it).
func (r *receiver) wait(t *testing.T, n int) []events.Event {
	for {
		if got := r.events(); len(got) >= n {
			return got
		}
		select {
		case <-r.notify:
		case <-t.Context().Done():
			t.Fatalf("receiver got %d events, want %d", len(r.events()), n)
		}
	}
}

func openStore(t *testing.T, path string) *store.DB {
	d, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func addHook(t *testing.T, d *store.DB, team, id, url, secret string, types ...string) {
	if len(types) == 0 {
		types = events.Types
	}
	if err := d.CreateWebhook(context.Background(), store.Webhook{ID: id, Team: team, Name: id, URL: url, Enabled: true,
		Events: types, Secret: secret, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, s *Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func event(typ, sandbox, team string) events.Event {
	return events.New(typ, events.Sandbox{ID: sandbox, Team: team, StartedAt: time.Now()}, time.Now(), nil)
}

func TestDeliversInOrderSigned(t *testing.T) {
	d := openStore(t, filepath.Join(t.TempDir(), "m.db"))
	r := newReceiver(t, "s3cret")
	addHook(t, d, "a", "wh1", r.srv.URL, "s3cret", events.Created, events.Killed)
	other := newReceiver(t, "x")
	addHook(t, d, "b", "wh2", other.srv.URL, "x")
	s := New(Config{Store: d, Allow: loopback})
	run(t, s)
	ctx := context.Background()
	for _, typ := range []string{events.Created, events.Paused, events.Killed} {
		s.Record(ctx, event(typ, "sb1", "a"))
	}
	got := r.wait(t, 2)
	if len(got) != 2 || got[0].Type != events.Created || got[1].Type != events.Killed || got[0].SandboxID != "sb1" {
		t.Fatalf("receiver got %+v, want created then killed (paused is not subscribed)", got)
	}
	if n := len(other.events()); n != 0 {
		t.Fatalf("another team's webhook got %d events", n)
	}
}

// TestReceiverDown: deliveries to a receiver that is down are retried
// with backoff and all arrive once it is up again.
func TestReceiverDown(t *testing.T) {
	d := openStore(t, filepath.Join(t.TempDir(), "m.db"))
	r := newReceiver(t, "k")
	r.setDown(true)
	addHook(t, d, "a", "wh1", r.srv.URL, "k")
	s := New(Config{Store: d, Allow: loopback, FirstRetry: 50 * time.Millisecond, MaxRetry: 200 * time.Millisecond})
	run(t, s)
	s.Record(context.Background(), event(events.Created, "sb1", "a"))
	s.Record(context.Background(), event(events.Killed, "sb1", "a"))
	for {
		r.mu.Lock()
		fails := r.fails
		r.mu.Unlock()
		if fails >= 4 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.setDown(false)
	got := r.wait(t, 2)
	if got[0].Type != events.Created || got[1].Type != events.Killed {
		t.Fatalf("got %v then %v", got[0].Type, got[1].Type)
	}
	testkit.WaitFor(t, 5*time.Second, "both deliveries counted", func() bool { return s.Deliveries().Delivered == 2 })
	if c := s.Deliveries(); c.Failed < 4 || c.GivenUp != 0 {
		t.Fatalf("deliveries %+v, want at least 4 failed attempts and none given up", c)
	}
}

// TestRestart: events recorded while nothing delivers (a server that
// stopped) are delivered by the next server over the same store.
func TestRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	d := openStore(t, path)
	r := newReceiver(t, "k")
	addHook(t, d, "a", "wh1", r.srv.URL, "k")
	New(Config{Store: d, Allow: loopback}).Record(context.Background(), event(events.Created, "sb1", "a"))
	d.Close()
	run(t, New(Config{Store: openStore(t, path), Allow: loopback}))
	if got := r.wait(t, 1); got[0].Type != events.Created {
		t.Fatalf("got %+v", got)
	}
}

// TestRefusedDestination: without the operator's allow list a delivery
// to a loopback receiver is never made (it fails, and is retried).
func TestRefusedDestination(t *testing.T) {
	d := openStore(t, filepath.Join(t.TempDir(), "m.db"))
	r := newReceiver(t, "k")
	addHook(t, d, "a", "wh1", r.srv.URL, "k")
	s := New(Config{Store: d})
	q := []store.Delivery{{ID: 1, URL: r.srv.URL, Body: []byte(`{}`), EventAt: time.Now()}}
	err := s.post(context.Background(), q[0])
	if err == nil || !errorsIs(err, errRefused) {
		t.Fatalf("post to %s = %v, want refused", r.srv.URL, err)
	}
	if n := len(r.events()); n != 0 {
		t.Fatalf("receiver got %d events", n)
	}
}

// TestGiveUp: a delivery older than GiveUp is dropped, not attempted.
func TestGiveUp(t *testing.T) {
	d := openStore(t, filepath.Join(t.TempDir(), "m.db"))
	r := newReceiver(t, "k")
	addHook(t, d, "a", "wh1", r.srv.URL, "k")
	s := New(Config{Store: d, Allow: loopback, GiveUp: time.Hour})
	ev := event(events.Created, "sb1", "a")
	ev.Timestamp = time.Now().Add(-2 * time.Hour)
	s.Record(context.Background(), ev)
	s.deliverDue(context.Background())
	if _, ok, err := d.NextDelivery(context.Background()); ok || err != nil {
		t.Fatalf("the old delivery is still queued (%v)", err)
	}
	if n := len(r.events()); n != 0 {
		t.Fatalf("receiver got %d events", n)
	}
	if got := s.Deliveries(); got != (DeliveryCounts{GivenUp: 1}) {
		t.Fatalf("deliveries %+v, want one given up", got)
	}
}

func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want time.Duration
	}{{0, 5 * time.Second}, {1, 10 * time.Second}, {3, 40 * time.Second}, {7, 10 * time.Minute}, {1000, 10 * time.Minute}} {
		if got := backoff(5*time.Second, 10*time.Minute, tt.n); got != tt.want {
			t.Errorf("backoff(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestPermitted(t *testing.T) {
	g := guard{local: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("93.184.215.14")} }}
	allowed := guard{allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, local: g.local}
	for _, tt := range []struct {
		g    guard
		addr string
		want bool
	}{
		{g, "1.1.1.1", true},
		{g, "2606:4700:4700::1111", true},
		{g, "127.0.0.1", false},
		{g, "::1", false},
		{g, "::ffff:127.0.0.1", false},
		{g, "10.11.0.2", false}, // a sandbox's address
		{g, "172.16.0.1", false},
		{g, "192.168.1.1", false},
		{g, "169.254.169.254", false}, // cloud metadata
		{g, "100.64.0.1", false},
		{g, "0.0.0.0", false},
		{g, "224.0.0.1", false},
		{g, "fd00::1", false},
		{g, "fe80::1", false},
		{g, "64:ff9b::7f00:1", false},
		{g, "93.184.215.14", false}, // this host's own public address
		{allowed, "10.1.2.3", true},
		{allowed, "10.2.0.1", false},
	} {
		if got, why := tt.g.permitted(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("permitted(%s) = %v (%s), want %v", tt.addr, got, why, tt.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	g := guard{local: func() []netip.Addr { return nil }}
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"https://hooks.example.com/e2b", true},
		{"http://hooks.example.com:8080/x?y=1", true},
		{"https://1.1.1.1/x", true},
		{"", false},
		{"hooks.example.com/x", false},
		{"ftp://hooks.example.com/x", false},
		{"https://user:pw@hooks.example.com/x", false},
		{"http://127.0.0.1:9000/x", false},
		{"http://[::1]/x", false},
		{"http://localhost/x", false},
		{"http://169.254.169.254/latest/meta-data", false},
		{"http://%zz", false},
	} {
		if err := g.checkURL(tt.url); (err == nil) != tt.ok {
			t.Errorf("checkURL(%q) = %v, want ok %v", tt.url, err, tt.ok)
		}
	}
	if err := (guard{allow: loopback}).checkURL("http://localhost:1/x"); err != nil {
		t.Errorf("an allowed loopback: %v", err)
	}
}

// TestDialRefusesResolvedName: a host name is checked where it resolves,
// so "localhost" is refused at the connection too.
func TestDialRefusesResolvedName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := guard{}.client(2 * time.Second)
	_, err = c.Get("http://localhost:" + portOf(ln.Addr()) + "/")
	if !errorsIs(err, errRefused) {
		t.Fatalf("GET localhost = %v, want refused", err)
	}
}

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }

func portOf(a net.Addr) string { return strconv.Itoa(a.(*net.TCPAddr).Port) }
