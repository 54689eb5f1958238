package process

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/moatsh/moat/api/envd/process"
)

// deadlineCtx has a deadline but is never done: the moment between a
// deadline passing and the context's own timer cancelling it.
type deadlineCtx struct {
	context.Context
	d time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.d, true }

// TestServeEndAfterDeadlineIsTimeout: an end event that arrives once the
// client's deadline has passed (the deadline killed the process) ends the
// stream with DeadlineExceeded, even before the context itself is
// cancelled; before the deadline the end event is delivered.
func TestServeEndAfterDeadlineIsTimeout(t *testing.T) {
	end := &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{Exited: false, Status: "signal: killed"}}}
	for _, tc := range []struct {
		name     string
		deadline time.Time
		wantErr  error
		wantEnd  bool
	}{
		{"deadline passed", time.Now().Add(-time.Millisecond), context.DeadlineExceeded, false},
		{"deadline ahead", time.Now().Add(time.Hour), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubscriber()
			s.publish(end, 0)
			var sent []*pb.ProcessEvent
			err := s.serve(deadlineCtx{context.Background(), tc.deadline}, 7, time.Hour, func(ev *pb.ProcessEvent) error {
				sent = append(sent, ev)
				return nil
			})
			if !errors.Is(err, tc.wantErr) && err != tc.wantErr {
				t.Fatalf("serve = %v, want %v", err, tc.wantErr)
			}
			gotEnd := len(sent) == 2 && sent[1].GetEnd() != nil
			if gotEnd != tc.wantEnd {
				t.Fatalf("sent %v, want end delivered %v", sent, tc.wantEnd)
			}
		})
	}
}
