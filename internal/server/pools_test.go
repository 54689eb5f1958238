package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/orchestrator"
	"github.com/moatsh/moat/internal/orchestrator/orchestratortest"
	"github.com/moatsh/moat/internal/server"
	"github.com/moatsh/moat/internal/store"
	"github.com/moatsh/moat/internal/testkit"
)

func TestListPools(t *testing.T) {
	h := newHarness(t)
	if r := h.do("GET", "/moat/pools", ""); r.status != http.StatusOK || string(r.body) != "[]\n" && string(r.body) != "[]" {
		t.Fatalf("no pools: %d %s", r.status, r.body)
	}
	h.doKey("GET", "/moat/pools", "", "").errBody(t, http.StatusUnauthorized)

	env := orchestratortest.New(t, orchestrator.Config{Pools: []orchestrator.PoolSpec{{Template: "base", Size: 2}}})
	key, err := env.DB.CreateAPIKey(context.Background(), store.DefaultTeam)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(server.Config{Store: env.DB, Orch: env.Orch}))
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); env.Orch.WaitPools() })
	env.Orch.StartPools(ctx)
	hp := &harness{t: t, url: ts.URL, key: key, env: env}
	var last []byte
	defer func() {
		if t.Failed() {
			t.Logf("pools: %s", last)
		}
	}()
	testkit.WaitFor(t, 10*time.Second, "GET /moat/pools to show pool base with 2 of 2 ready", func() bool {
		var got []struct {
			Template    string
			Size, Ready int
		}
		r := hp.do("GET", "/moat/pools", "")
		last = r.body
		r.json(t, &got)
		return len(got) == 1 && got[0].Template == "base" && got[0].Size == 2 && got[0].Ready == 2
	})
}
