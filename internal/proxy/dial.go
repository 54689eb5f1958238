package proxy

import (
	"context"
	"net"
	"time"
)

// dialStall is how long a connect to a sandbox may go unanswered before a
// second one races it. On a veth a connect completes in well under a
// millisecond, or is refused at once.
const dialStall = time.Second

// raceDial connects with dial; when the first attempt has neither connected
// nor failed after stall, onStall is called and a second attempt (a new
// socket, so a new source port) races it, and the first to connect wins.
// Rarely, a connect to a sandbox just created at a reused address never
// completes although the sandbox answers its SYNs (docs/benchmarks.md, "a
// lost sandbox"); another four-tuple gets through. A refusal or other
// error of the first attempt before the stall is returned as is; after
// it, the error of the attempt that failed first when both fail. The
// losing connection is closed.
func raceDial(ctx context.Context, dial func(context.Context) (net.Conn, error), stall time.Duration, onStall func()) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c   net.Conn
		err error
	}
	results := make(chan result, 2)
	start := func() {
		go func() {
			c, err := dial(ctx)
			results <- result{c, err}
		}()
	}
	start()
	timer := time.NewTimer(stall)
	defer timer.Stop()
	started, pending := 1, 1
	var firstErr error
	for {
		select {
		case <-timer.C:
			if onStall != nil {
				onStall()
			}
			started++
			pending++
			start()
		case r := <-results:
			pending--
			if r.err == nil {
				if pending > 0 {
					go func() { // the loser, cancelled below
						if o := <-results; o.c != nil {
							o.c.Close()
						}
					}()
				}
				return r.c, nil
			}
			if firstErr == nil {
				firstErr = r.err
			}
			if started == 1 || pending == 0 {
				return nil, firstErr
			}
		}
	}
}
