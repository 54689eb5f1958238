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
		p.line(fmt.Sprintf("==> %s", describeStep(e.Step, p.steps)))
		if p.bar != nil {
			p.bar.Describe(truncate(fmt.Sprintf("step %d/%d %s", n, len(p.steps), p.steps[n-1].Type), 40))
			_ = p.bar.Set(n)
		}
	}
	prefix := "    "
	if e.Level == "error" {
		prefix = "  ! "
	}
	p.line(prefix + e.Message)
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
