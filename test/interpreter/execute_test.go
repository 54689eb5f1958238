package interpreter_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/envd/interpreter"
)

func TestPythonExecution(t *testing.T) {
	interpreter.KeepaliveInterval = time.Second
	srv, _ := newServer(t, interpreter.Config{
		Env: func() map[string]string { return map[string]string{"MOAT_FROM_ENVD": "envd-value"} },
	})
	start := time.Now()
	if e := execute(t, srv, map[string]any{"code": "x = 1"}); e.firstError() != nil {
		t.Fatalf("x = 1: %v", e.firstError())
	}
	t.Logf("first execution (cold default python context): %v", time.Since(start))

	for _, tt := range pythonCases() {
		t.Run(tt.name, func(t *testing.T) {
			e := execute(t, srv, tt.body)
			if e.status != http.StatusOK {
				t.Fatalf("status %d: %s", e.status, e.raw)
			}
			tt.check(t, e)
		})
	}
}

type pythonCase struct {
	name  string
	body  map[string]any
	check func(t *testing.T, e execution)
}

// pythonCases run in order on one default context (state carries over).
func pythonCases() []pythonCase {
	return []pythonCase{
		{"state and main result", map[string]any{"code": "x += 1\nx"}, func(t *testing.T, e execution) {
			if got := e.mainText(); got != "2" {
				t.Errorf("text = %q, want 2", got)
			}
			if n := e.ofType("number_of_executions"); len(n) != 1 {
				t.Errorf("number_of_executions lines = %d", len(n))
			}
		}},
		{"quotes stripped", map[string]any{"code": "'abc'", "language": "python"}, func(t *testing.T, e execution) {
			if got := e.mainText(); got != "abc" {
				t.Errorf("text = %q, want abc", got)
			}
		}},
		{"stdout and stderr", map[string]any{"code": "import sys\nprint('hello')\nprint('oops', file=sys.stderr)"}, func(t *testing.T, e execution) {
			if e.stdout() != "hello\n" {
				t.Errorf("stdout = %q", e.stdout())
			}
			if errs := e.ofType("stderr"); len(errs) != 1 || errs[0].str("text") != "oops\n" || errs[0].str("timestamp") == "" {
				t.Errorf("stderr lines = %v", errs)
			}
		}},
		{"exception", map[string]any{"code": "print('before')\n1/0"}, func(t *testing.T, e execution) {
			er := e.firstError()
			if er == nil || er.str("name") != "ZeroDivisionError" || er.str("value") != "division by zero" ||
				!strings.Contains(er.str("traceback"), "ZeroDivisionError") {
				t.Errorf("error = %v", er)
			}
			if len(e.ofType("error")) != 1 {
				t.Errorf("want exactly one error line")
			}
		}},
		{"non-ascii escaped", map[string]any{"code": "print('h\u00e9llo \u2713 \U0001F600')\n'\u00fc'"}, func(t *testing.T, e execution) {
			if e.stdout() != "h\u00e9llo \u2713 \U0001F600\n" || e.mainText() != "\u00fc" {
				t.Errorf("stdout = %q text = %q", e.stdout(), e.mainText())
			}
			if !bytes.Contains(e.raw, []byte(`\ud83d\ude00`)) {
				t.Errorf("emoji not escaped as surrogate pair: %s", e.raw)
			}
		}},
		{"envd env loaded", map[string]any{"code": "import os; os.environ.get('MOAT_FROM_ENVD')"}, func(t *testing.T, e execution) {
			if e.mainText() != "envd-value" {
				t.Errorf("env = %q", e.mainText())
			}
		}},
		{"request env vars", map[string]any{"code": "import os; print(os.environ['MOAT_REQ'] + os.environ['MOAT_FROM_ENVD'])",
			"env_vars": map[string]string{"MOAT_REQ": "r\u00e9q'\"", "MOAT_FROM_ENVD": "over"}}, func(t *testing.T, e execution) {
			if e.stdout() != "r\u00e9q'\"over\n" {
				t.Errorf("env = %q (%v)", e.stdout(), e.firstError())
			}
		}},
		{"request env vars restored", map[string]any{"code": "(os.environ.get('MOAT_REQ'), os.environ['MOAT_FROM_ENVD'])"}, func(t *testing.T, e execution) {
			if e.mainText() != "(None, 'envd-value')" {
				t.Errorf("env after = %q", e.mainText())
			}
		}},
		{"keepalive while idle", map[string]any{"code": "import time; time.sleep(1.6); print('done')"}, func(t *testing.T, e execution) {
			if len(e.ofType("keepalive")) == 0 || e.stdout() != "done\n" {
				t.Errorf("lines = %v", e.lines)
			}
		}},
		{"pandas dataframe", map[string]any{"code": "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"}, func(t *testing.T, e execution) {
			var res line
			for _, l := range e.ofType("result") {
				res = l
			}
			if res == nil || !strings.Contains(res.str("html"), "<table") || !strings.Contains(res.str("text"), "a") {
				t.Fatalf("result = %v", res)
			}
			if data, _ := res["data"].(map[string]any); data == nil || len(data["a"].([]any)) != 2 {
				t.Errorf("data = %v", res["data"])
			}
		}},
	}
}

func TestMatplotlibChart(t *testing.T) {
	srv, _ := newServer(t, interpreter.Config{})
	e := execute(t, srv, map[string]any{"code": `import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [2, 4, 8], label="pow")
plt.title("growth"); plt.xlabel("x (s)"); plt.ylabel("y")
plt.show()`})
	res := e.ofType("result")
	if len(res) != 1 {
		t.Fatalf("results = %d, want 1: %s", len(res), e.raw)
	}
	img, err := base64.StdEncoding.DecodeString(res[0].str("png"))
	if err != nil {
		t.Fatalf("png base64: %v", err)
	}
	if _, err := png.DecodeConfig(bytes.NewReader(img)); err != nil {
		t.Fatalf("png decode: %v", err)
	}
	chart, _ := res[0]["chart"].(map[string]any)
	if chart["type"] != "line" || chart["title"] != "growth" || chart["x_unit"] != "s" {
		t.Fatalf("chart = %v; raw %.3000s", chart, e.raw)
	}
	els, _ := chart["elements"].([]any)
	if len(els) != 1 {
		t.Fatalf("elements = %v", els)
	}
	el := els[0].(map[string]any)
	if pts, _ := el["points"].([]any); len(pts) != 3 || el["label"] != "pow" {
		t.Fatalf("element = %v", el)
	}

	tests := []struct {
		name, code, typ string
		elements        int
	}{
		{"bar via last expression", "fig, ax = plt.subplots()\nax.bar(['a', 'b'], [3, 5])\nfig", "bar", 2},
		{"scatter flushed at end of cell", "plt.figure()\nplt.scatter([1, 2, 3, 4], [4, 3, 2, 1], label='s')", "scatter", 1},
		{"pie", "plt.figure()\nplt.pie([1, 2, 3], labels=['x', 'y', 'z'])\nplt.show()", "pie", 3},
		{"superchart", "fig, (a, b) = plt.subplots(1, 2)\na.plot([1, 2]); b.bar(['q'], [1])\nplt.show()", "superchart", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := execute(t, srv, map[string]any{"code": tt.code})
			var chart map[string]any
			for _, r := range e.ofType("result") {
				if c, ok := r["chart"].(map[string]any); ok {
					chart = c
				}
			}
			if chart == nil || chart["type"] != tt.typ {
				t.Fatalf("chart = %v (%.500s)", chart, e.raw)
			}
			if els, _ := chart["elements"].([]any); len(els) != tt.elements {
				t.Errorf("elements = %v", chart["elements"])
			}
		})
	}
}

func TestInterruptAndRecovery(t *testing.T) {
	srv, _ := newServer(t, interpreter.Config{})
	execute(t, srv, map[string]any{"code": "y = 7"})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	executeCtx(t, ctx, srv, map[string]any{"code": "while True: pass"}, false)
	if e := execute(t, srv, map[string]any{"code": "y"}); e.mainText() != "7" {
		t.Fatalf("after interrupt: %s", e.raw)
	}
	t.Logf("disconnect + interrupt + next execution: %v", time.Since(start))

	e := execute(t, srv, map[string]any{"code": "import os; os._exit(1)"})
	if er := e.firstError(); er == nil || er.str("name") != "KernelDied" || er["traceback"] != "" {
		t.Fatalf("os._exit: %s", e.raw)
	}
	start = time.Now()
	if e := execute(t, srv, map[string]any{"code": "1 + 1"}); e.mainText() != "2" {
		t.Fatalf("after kernel death: %s", e.raw)
	}
	t.Logf("auto-restart after kernel death: %v", time.Since(start))
}

func TestBash(t *testing.T) {
	srv, _ := newServer(t, interpreter.Config{})
	tests := []struct {
		code, stdout, errValue string
	}{
		{"X=5; cd /tmp; f() { echo \"f$1\"; }", "", ""},
		{"echo $X; pwd; f 1", "5\n/tmp\nf1\n", ""},
		{"printf 'no newline \u00e9'", "no newline \u00e9", ""},
		{"echo out; echo err >&2; false", "out\n", "1"},
		{"echo $MOAT_B", "b'v\n", ""},
	}
	for i, tt := range tests {
		body := map[string]any{"code": tt.code, "language": "bash"}
		if i == len(tests)-1 {
			body["env_vars"] = map[string]string{"MOAT_B": "b'v"}
		}
		e := execute(t, srv, body)
		if e.stdout() != tt.stdout {
			t.Errorf("%q: stdout = %q, want %q", tt.code, e.stdout(), tt.stdout)
		}
		var got string
		if er := e.firstError(); er != nil {
			got = er.str("value")
		}
		if got != tt.errValue {
			t.Errorf("%q: error value = %q, want %q", tt.code, got, tt.errValue)
		}
	}
	if e := execute(t, srv, map[string]any{"code": "echo \"[$MOAT_B]\"", "language": "bash"}); e.stdout() != "[]\n" {
		t.Errorf("env not restored: %q", e.stdout())
	}

	for _, code := range []string{"while true; do :; done", "sleep 30"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		executeCtx(t, ctx, srv, map[string]any{"code": code, "language": "bash"}, false)
		cancel()
		if e := execute(t, srv, map[string]any{"code": "echo $X", "language": "bash"}); e.stdout() != "5\n" {
			t.Errorf("after interrupting %q: %s", code, e.raw)
		}
	}
}
