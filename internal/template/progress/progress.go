// Package progress shows a long template build to a person: a spinner
// with the latest output line on a terminal, plain status lines with a
// heartbeat elsewhere. It is its own package because every builder (Debian
// suites, images) reports through it and it has nothing to do with trees.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// heartbeat is how often plain (non-TTY) output reports a quiet build.
const heartbeat = 5 * time.Second

// Progress shows a long build: on a terminal a spinner with the elapsed time
// and the latest output line; elsewhere plain lines prefixed with the elapsed
// seconds, plus a "still working" line after heartbeat of silence, so a slow
// apt step never looks hung.
type Progress struct {
	out   io.Writer
	start time.Time
	bar   *progressbar.ProgressBar // nil when out is not a terminal
	stop  chan struct{}
	done  sync.WaitGroup

	mu        sync.Mutex // guards last and lastPrint
	last      string
	lastPrint time.Time
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// New starts showing a build titled title on out (nil: nowhere); Close
// ends it.
func New(out io.Writer, title string) *Progress {
	if out == nil {
		out = io.Discard
	}
	p := &Progress{out: out, start: time.Now(), stop: make(chan struct{}), lastPrint: time.Now()}
	if isTerminal(out) {
		p.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription(title),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	p.printf("%s", title)
	p.done.Add(1)
	go p.tick()
	return p
}

func (p *Progress) elapsed() int { return int(time.Since(p.start).Seconds()) }

// printf prints one permanent line above the spinner (or plainly).
func (p *Progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printLocked(fmt.Sprintf(format, args...))
}

func (p *Progress) printLocked(s string) {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintf(p.out, "[%4ds] %s\n", p.elapsed(), s)
	p.lastPrint = time.Now()
	if p.bar != nil {
		p.bar.Describe(truncate(p.last, 70))
	}
}

// Line records one output line of the build tool. mmdebstrap's own status
// lines ("I: ...", "W: ...", "E: ...") and step markers are printed; other
// lines (apt's, with --verbose) update the spinner on a terminal and appear
// in the heartbeat lines elsewhere.
func (p *Progress) Line(s string) {
	s = strings.TrimRight(s, "\r\n")
	if s == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = s
	switch {
	case isStatusLine(s):
		p.printLocked(s)
	case p.bar != nil:
		p.bar.Describe(truncate(s, 70))
	}
}

func isStatusLine(s string) bool {
	for _, pre := range []string{"I: ", "W: ", "E: ", "==> "} {
		if strings.HasPrefix(s, pre) {
			return true
		}
	}
	return false
}

func (p *Progress) tick() {
	defer p.done.Done()
	interval := heartbeat
	if p.bar != nil {
		interval = 200 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.bar != nil {
				_ = p.bar.Add(1) // advances the spinner and the elapsed time
			} else if time.Since(p.lastPrint) >= heartbeat {
				fmt.Fprintf(p.out, "[%4ds] ... still working (last: %s)\n", p.elapsed(), truncate(p.last, 80))
				p.lastPrint = time.Now()
			}
			p.mu.Unlock()
		}
	}
}

// Close stops the spinner and prints the outcome.
func (p *Progress) Close(err error) {
	close(p.stop)
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
		_ = p.bar.Clear()
	}
	if err != nil {
		fmt.Fprintf(p.out, "[%4ds] failed: %v\n", p.elapsed(), err)
		return
	}
	fmt.Fprintf(p.out, "[%4ds] done\n", p.elapsed())
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
