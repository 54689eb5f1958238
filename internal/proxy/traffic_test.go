package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
)

// trafficResolver is one sandbox with a traffic access token.
type trafficResolver struct {
	state string
	wakes *int
}

func (f trafficResolver) Lookup(id string) (Target, bool) {
	return Target{Addr: netip.MustParseAddr("127.0.0.1"), Token: "envdtok", State: f.state, AutoResume: true,
		TrafficToken: "traffic"}, id == "iprivate"
}

func (f trafficResolver) Wake(ctx context.Context, id string) (Target, error) {
	*f.wakes++
	t, _ := f.Lookup(id)
	t.State = "running"
	return t, nil
}

// TestTrafficAccessToken: a sandbox created with allowPublicTraffic: false
// answers 403 on its ports without the right e2b-traffic-access-token (and
// is not woken by such traffic); envd's port keeps using the envd token;
// the traffic token is not passed on to the sandbox.
func TestTrafficAccessToken(t *testing.T) {
	var seen string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Get(HeaderTrafficToken)
		io.WriteString(w, "ok")
	}))
	defer backend.Close()
	bport := portOf(t, backend)
	wakes := 0
	req := func(port int, traffic, envd string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set(HeaderSandboxID, "iprivate")
		r.Header.Set(HeaderSandboxPort, strconv.Itoa(port))
		if traffic != "" {
			r.Header.Set("e2b-traffic-access-token", traffic)
		}
		if envd != "" {
			r.Header.Set(HeaderAccessToken, envd)
		}
		return r
	}
	userPort := New(Config{Resolver: trafficResolver{state: "running", wakes: &wakes}, EnvdPort: 1})
	envdPort := New(Config{Resolver: trafficResolver{state: "running", wakes: &wakes}, EnvdPort: bport})
	paused := New(Config{Resolver: trafficResolver{state: "paused", wakes: &wakes}, EnvdPort: 1})
	for _, tc := range []struct {
		name   string
		p      *Proxy
		r      *http.Request
		status int
	}{
		{"no token", userPort, req(bport, "", ""), 403},
		{"wrong token", userPort, req(bport, "nope", ""), 403},
		{"envd token is not the traffic token", userPort, req(bport, "", "envdtok"), 403},
		{"right token", userPort, req(bport, "traffic", ""), 200},
		{"envd port needs no traffic token", envdPort, req(bport, "", "envdtok"), 200},
		{"envd port still needs its own", envdPort, req(bport, "traffic", ""), 401},
		{"paused, no token: not woken", paused, req(bport, "", ""), 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen = ""
			r := send(t, tc.p, tc.r)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
			}
			if seen != "" {
				t.Fatalf("traffic token passed to the sandbox: %q", seen)
			}
		})
	}
	if wakes != 0 {
		t.Fatalf("woken %d times by traffic without the token", wakes)
	}
}
