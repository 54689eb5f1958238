// Package webhook records sandbox lifecycle events and delivers them to
// teams' webhooks, E2B's way: a signed POST of the event's JSON per
// delivery, retried with backoff. Events and the deliveries they owe are
// written to the store in one transaction (an outbox), so a receiver that
// is down gets them later and a server restart loses none; delivering
// never blocks the sandbox operation that made the event. Deliveries go
// only to the public internet unless the operator allows more (see
// Config.Allow): a webhook URL is the caller's, and must not become a way
// into the host's own services or a sandbox.
package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/moatsh/moat/internal/events"
	"github.com/moatsh/moat/internal/store"
)

// Store is the outbox and the event log, as the service uses them.
type Store interface {
	// AppendEvent stores an event and queues its deliveries (one commit);
	// it returns how many it queued.
	AppendEvent(ctx context.Context, ev store.Event) (int, error)
	// DueDeliveries returns up to limit deliveries due at now.
	DueDeliveries(ctx context.Context, now time.Time, limit int) ([]store.Delivery, error)
	// NextDelivery is when the earliest queued delivery is due (ok false: none).
	NextDelivery(ctx context.Context) (at time.Time, ok bool, err error)
	// DeliveryDone removes a delivery made or given up.
	DeliveryDone(ctx context.Context, id int64) error
	// DeliveryFailed counts a failed attempt and makes it due again at next.
	DeliveryFailed(ctx context.Context, id int64, next time.Time, reason string) error
	// PruneEvents deletes events recorded before a time.
	PruneEvents(ctx context.Context, before time.Time) (int64, error)
}

// Defaults for Config fields left zero.
const (
	DefaultFirstRetry = 5 * time.Second
	DefaultMaxRetry   = 10 * time.Minute
	DefaultGiveUp     = 24 * time.Hour
	DefaultTimeout    = 10 * time.Second
)

// Config configures the service; Store is required.
type Config struct {
	Store  Store
	Logger *slog.Logger
	// Allow are networks deliveries may go to although they are not public
	// (loopback, private, link-local and this host's own addresses are
	// refused otherwise): for receivers on the operator's own network.
	Allow []netip.Prefix
	// FirstRetry is the wait after a first failed attempt; each further
	// failure doubles it, up to MaxRetry.
	FirstRetry, MaxRetry time.Duration
	// GiveUp drops a delivery not made this long after its event.
	GiveUp time.Duration
	// Timeout bounds one attempt.
	Timeout time.Duration
	// Poll is the longest wait between two looks at the outbox (default
	// idleWait): in a cluster, events other servers record do not wake
	// this one, so its deliverer polls more often.
	Poll time.Duration
}

// Service records events and delivers them. Run must run for deliveries
// to be made; Record works without it (they wait in the outbox).
type Service struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	guard  guard
	wake   chan struct{}
	now    func() time.Time
	counts deliveryCounters
}

// DeliveryCounts counts delivery attempts since New, by result.
type DeliveryCounts struct {
	Delivered uint64 // the receiver answered 2xx
	Failed    uint64 // the attempt failed; the delivery is retried later
	GivenUp   uint64 // dropped, its event older than GiveUp
}

type deliveryCounters struct{ delivered, failed, givenUp atomic.Uint64 }

// Deliveries returns the delivery attempts so far (for metrics).
func (s *Service) Deliveries() DeliveryCounts {
	return DeliveryCounts{Delivered: s.counts.delivered.Load(), Failed: s.counts.failed.Load(),
		GivenUp: s.counts.givenUp.Load()}
}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.FirstRetry = orDefault(cfg.FirstRetry, DefaultFirstRetry)
	cfg.MaxRetry = orDefault(cfg.MaxRetry, DefaultMaxRetry)
	cfg.GiveUp = orDefault(cfg.GiveUp, DefaultGiveUp)
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	g := guard{allow: cfg.Allow}
	return &Service{cfg: cfg, log: cfg.Logger, guard: g, client: g.client(cfg.Timeout), wake: make(chan struct{}, 1),
		now: time.Now}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Record stores ev and its deliveries and wakes the delivery loop. A
// failure is logged, not returned: the operation that made the event has
// happened and must not fail for it.
func (s *Service) Record(ctx context.Context, ev events.Event) {
	body, err := ev.Marshal()
	if err == nil {
		var n int
		n, err = s.cfg.Store.AppendEvent(context.WithoutCancel(ctx), store.Event{ID: ev.ID, Team: ev.TeamID,
			SandboxID: ev.SandboxID, Type: ev.Type, At: ev.Timestamp, Body: body})
		if err == nil && n > 0 {
			s.Notify()
		}
	}
	if err != nil {
		s.log.Error("record sandbox event", "sandboxID", ev.SandboxID, "type", ev.Type, "err", err)
	}
}

// Notify wakes the delivery loop (deliveries were queued).
func (s *Service) Notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// CheckURL refuses a webhook URL that deliveries could never reach: not
// http(s), or a literal address that is not allowed. (A host name is
// checked on each delivery, where it resolves.)
func (s *Service) CheckURL(raw string) error { return s.guard.checkURL(raw) }

// pruneEvery is how often events past events.Retention are deleted.
const pruneEvery = time.Hour

// idleWait bounds a wait for deliveries when none is due.
const idleWait = time.Minute

// Run delivers queued deliveries as they fall due and prunes old events,
// until ctx ends.
func (s *Service) Run(ctx context.Context) {
	prune := time.NewTicker(pruneEvery)
	defer prune.Stop()
	s.pruneEvents(ctx)
	for {
		s.deliverDue(ctx)
		idle := idleWait
		if s.cfg.Poll > 0 {
			idle = s.cfg.Poll
		}
		wait := idle
		if at, ok, err := s.cfg.Store.NextDelivery(ctx); err == nil && ok {
			wait = min(max(at.Sub(s.now()), 0), idle)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.wake:
		case <-prune.C:
			s.pruneEvents(ctx)
		case <-t.C:
		}
		t.Stop()
	}
}

func (s *Service) pruneEvents(ctx context.Context) {
	n, err := s.cfg.Store.PruneEvents(ctx, s.now().Add(-events.Retention))
	if err != nil {
		s.log.Error("prune sandbox events", "err", err)
	} else if n > 0 {
		s.log.Info("pruned sandbox events", "count", n)
	}
}

// deliverDue makes every delivery due now, one at a time in the order of
// their events (so a healthy receiver gets a sandbox's events in order).
func (s *Service) deliverDue(ctx context.Context) {
	for ctx.Err() == nil {
		due, err := s.cfg.Store.DueDeliveries(ctx, s.now(), 32)
		if err != nil {
			s.log.Error("read webhook deliveries", "err", err)
			return
		}
		if len(due) == 0 {
			return
		}
		for _, q := range due {
			if ctx.Err() != nil {
				return
			}
			if !s.deliver(ctx, q) {
				return // the outcome is not recorded: retry at the next wake, not in a loop
			}
		}
	}
}

// deliver makes one attempt of q and records its outcome; it reports
// whether the record was written.
func (s *Service) deliver(ctx context.Context, q store.Delivery) bool {
	log := s.log.With("webhookID", q.WebhookID, "delivery", q.ID)
	if s.now().Sub(q.EventAt) > s.cfg.GiveUp {
		log.Warn("webhook delivery given up", "attempts", q.Attempts, "eventAt", q.EventAt)
		s.counts.givenUp.Add(1)
		return s.done(ctx, q.ID)
	}
	err := s.post(ctx, q)
	if err == nil {
		s.counts.delivered.Add(1)
		return s.done(ctx, q.ID)
	}
	s.counts.failed.Add(1)
	next := s.now().Add(backoff(s.cfg.FirstRetry, s.cfg.MaxRetry, q.Attempts))
	log.Warn("webhook delivery failed; will retry", "attempt", q.Attempts+1, "err", err, "next", next)
	if err := s.cfg.Store.DeliveryFailed(context.WithoutCancel(ctx), q.ID, next, err.Error()); err != nil {
		log.Error("record failed webhook delivery", "err", err)
		return false
	}
	return true
}

func (s *Service) done(ctx context.Context, id int64) bool {
	if err := s.cfg.Store.DeliveryDone(context.WithoutCancel(ctx), id); err != nil {
		s.log.Error("record webhook delivery", "delivery", id, "err", err)
		return false
	}
	return true
}

// backoff is the wait after failed attempt n+1: first, doubled n times,
// at most most.
func backoff(first, most time.Duration, n int) time.Duration {
	d := first
	for range n {
		if d >= most {
			break
		}
		d *= 2
	}
	return min(d, most)
}

// post sends q's event to its webhook's URL; any answer but 2xx fails it.
func (s *Service) post(ctx context.Context, q store.Delivery) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.URL, bytes.NewReader(q.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "moat-webhooks")
	req.Header.Set("e2b-webhook-id", q.WebhookID)
	req.Header.Set("e2b-delivery-id", uuid.NewString())
	req.Header.Set("e2b-signature-version", events.SignatureVersion)
	req.Header.Set("e2b-signature", events.Signature(q.Secret, q.Body))
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}
