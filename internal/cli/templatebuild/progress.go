package templatebuild

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/moatsh/moat/internal/dockerfile"
)

// buildProgress shows a build's steps and logs: on a terminal a bar over
// the steps under the scrolling log; elsewhere plain lines, a header per
// step, so CI logs read well.
type buildProgress struct {
	out   io.Writer
	steps []dockerfile.Step
	bar   *progressbar.ProgressBar // nil when out is not a terminal
	cur   int                      // the step shown (0 = base)
	start time.Time
	// expect is how long the template's last build took (0: none to go
	// by): each step's header says how much of it is left.
	expect time.Duration
}

func newBuildProgress(out io.Writer, steps []dockerfile.Step) *buildProgress {
	p := &buildProgress{out: out, steps: steps, start: time.Now()}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(len(steps)+1,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription("base"),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionShowCount(),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

// entry shows one log entry, moving the step display forward when the
// entry belongs to a later step.
func (p *buildProgress) entry(e logEntry) {
	// The server lists every step first ("[n/N] …"), then logs a header
	// as a build sandbox starts each RUN or COPY, then its output.
	if n, err := strconv.Atoi(e.Step); err == nil && n > p.cur && n <= len(p.steps) && !strings.HasPrefix(e.Message, "[") {
		p.cur = n
		p.line(fmt.Sprintf("==> %s%s", describeStep(e.Step, p.steps), p.eta()))
		if p.bar != nil {
			p.bar.Describe(truncate(fmt.Sprintf("step %d/%d %s%s", n, len(p.steps), p.steps[n-1].Type, p.eta()), 60))
			_ = p.bar.Set(n)
		}
	}
	prefix := "    "
	if e.Level == "error" {
		prefix = "  ! "
	}
	p.line(prefix + e.Message)
}

// eta is " (about Ns left)" going by the last build, "" without one; a
// build past it says so. Cached steps make a rebuild faster than this.
func (p *buildProgress) eta() string {
	if p.expect <= 0 {
		return ""
	}
	left := p.expect - time.Since(p.start)
	if left <= 0 {
		return fmt.Sprintf(" (longer than the last build's %s)", p.expect.Round(time.Second))
	}
	return fmt.Sprintf(" (about %s left, going by the last build)", max(left.Round(time.Second), time.Second))
}

// line prints one permanent line (above the bar on a terminal).
func (p *buildProgress) line(s string) {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintf(p.out, "[%4ds] %s\n", int(time.Since(p.start).Seconds()), s)
	if p.bar != nil {
		_ = p.bar.RenderBlank()
	}
}

func (p *buildProgress) finish(msg string) {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
	p.line(msg)
}

func (p *buildProgress) close() {
	if p.bar != nil {
		_ = p.bar.Clear()
		p.bar = nil
	}
}
