package process

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/moatsh/moat/api/envd/process"
)

// maxQueuedBytes bounds the output queued for one subscriber. A publisher
// that would exceed it waits until the subscriber catches up or leaves, so a
// slow client slows the process down instead of losing output.
const maxQueuedBytes = 4 << 20

// defaultKeepalive is the keepalive interval when the request has no valid
// Keepalive-Ping-Interval header (E2B envd's default).
const defaultKeepalive = 90 * time.Second

// subscriber is one Start or Connect stream's view of a process: an ordered
// queue of events, delivered by serve.
type subscriber struct {
	mu     sync.Mutex
	space  *sync.Cond // signalled when the queue shrinks or the subscriber leaves
	queue  []*pb.ProcessEvent
	bytes  int
	gone   bool          // the stream has ended; publishers stop waiting
	notify chan struct{} // capacity 1: "the queue is not empty"
}

func newSubscriber() *subscriber {
	s := &subscriber{notify: make(chan struct{}, 1)}
	s.space = sync.NewCond(&s.mu)
	return s
}

// publish appends ev, waiting while the queue is full. It returns false when
// the subscriber has gone.
func (s *subscriber) publish(ev *pb.ProcessEvent, size int) bool {
	s.mu.Lock()
	for !s.gone && s.bytes > 0 && s.bytes+size > maxQueuedBytes {
		s.space.Wait()
	}
	if s.gone {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, ev)
	s.bytes += size
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return true
}

// take removes and returns everything queued.
func (s *subscriber) take() []*pb.ProcessEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.bytes = nil, 0
	s.space.Broadcast()
	return q
}

// leave marks the subscriber gone and releases waiting publishers.
func (s *subscriber) leave() {
	s.mu.Lock()
	s.gone = true
	s.queue, s.bytes = nil, 0
	s.space.Broadcast()
	s.mu.Unlock()
}

// serve sends start{pid}, then queued events as they arrive, with keepalives
// after interval of silence, until the end event has been sent or ctx ends.
func (s *subscriber) serve(ctx context.Context, pid uint32, interval time.Duration, send func(*pb.ProcessEvent) error) error {
	start := &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}
	if err := send(start); err != nil {
		return err
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			ka := &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}
			if err := send(ka); err != nil {
				return err
			}
			timer.Reset(interval)
		case <-s.notify:
			for _, ev := range s.take() {
				if ev.GetEnd() != nil && pastDeadline(ctx) {
					// The client's deadline (Connect-Timeout-Ms) killed the
					// process: the stream ends as a timeout, as the
					// client's own timer would end it, never as an exit.
					// ctx's own timer may not have fired yet.
					return context.DeadlineExceeded
				}
				if err := send(ev); err != nil {
					return err
				}
				if ev.GetEnd() != nil {
					return nil
				}
			}
			timer.Reset(interval)
		}
	}
}

// pastDeadline reports whether ctx has a deadline that has passed.
func pastDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Keepalive-Ping-Interval"))
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return defaultKeepalive
	}
	return time.Duration(n) * time.Second
}
