package dockerfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// steps renders steps as "TYPE arg|arg" lines for compact expectations.
func steps(ss []Step) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Type + " " + strings.Join(s.Args, "|")
	}
	return out
}

func TestParse(t *testing.T) {
	head := []string{"USER root", "WORKDIR /"}
	tail := []string{"USER user", "WORKDIR /home/user"}
	with := func(mid ...string) []string {
		return append(append(append([]string{}, head...), mid...), tail...)
	}
	cases := []struct {
		name, src string
		args      map[string]string
		from      string
		want      []string
		start     string
	}{
		{name: "from only", src: "FROM debian:bookworm\n", from: "debian:bookworm", want: with()},
		{name: "multi-line run", src: "FROM base\nRUN apt-get update && \\\n    apt-get install -y curl\n",
			from: "base", want: with("RUN apt-get update &&     apt-get install -y curl")},
		{name: "json run", src: `FROM base` + "\n" + `RUN ["echo", "hello world", "it's"]` + "\n",
			from: "base", want: with(`RUN echo 'hello world' 'it'\''s'`)},
		{name: "env forms", src: "FROM base\nENV A=1 B=\"two words\"\nENV C 3\n", from: "base",
			want: with("ENV A|1|B|two words", "ENV C|3")},
		{name: "env expansion", src: "FROM base\nENV A=/opt\nENV PATH=$A/bin:${NOPE:-/usr/bin}\nWORKDIR ${A}/app\n", from: "base",
			want: []string{"USER root", "WORKDIR /", "ENV A|/opt", "ENV PATH|/opt/bin:/usr/bin", "WORKDIR /opt/app", "USER user"}},
		{name: "arg default and override", src: "ARG V=3.11\nFROM python:${V}\nARG V\nARG W=x\nRUN echo $V $W\n",
			args: map[string]string{"W": "y z"}, from: "python:3.11",
			want: with(`RUN export V=3.11 W='y z'; echo $V $W`)},
		{name: "path extended", src: "FROM base\nENV PATH=/opt/bin:$PATH\n", from: "base",
			want: with("ENV PATH|/opt/bin:" + DefaultPath)},
		{name: "arg shadowed by env", src: "FROM base\nARG A=1\nENV A=2\nRUN echo $A\n", from: "base",
			want: with("ENV A|2", "RUN echo $A")},
		{name: "copy", src: "FROM base\nCOPY --chown=app --chmod=755 a.sh b/ /app/\nCOPY /ctx/x.txt ./y.txt\n", from: "base",
			want: with("COPY a.sh|/app/|app|0755", "COPY b|/app/|app|0755", "COPY ctx/x.txt|./y.txt||")},
		{name: "add local and archive", src: "FROM base\nADD app.tar.gz f.txt /srv\n", from: "base",
			want: with("COPY app.tar.gz|/tmp/.moat-add/app.tar.gz|root|",
				"RUN mkdir -p /srv && tar -xf /tmp/.moat-add/app.tar.gz -C /srv && rm -rf /tmp/.moat-add|root",
				"COPY f.txt|/srv/||")},
		{name: "user and workdir set", src: "FROM base\nUSER app\nWORKDIR /w\n", from: "base",
			want: []string{"USER root", "WORKDIR /", "USER app", "WORKDIR /w"}},
		{name: "cmd exec", src: "FROM base\nCMD [\"python3\", \"-m\", \"http.server\", \"8000\"]\n", from: "base",
			want: with(), start: "python3 -m http.server 8000"},
		{name: "cmd shell", src: "FROM base\nCMD python3 -m http.server $PORT\n", from: "base",
			want: with(), start: "python3 -m http.server $PORT"},
		{name: "entrypoint plus cmd", src: "FROM base\nENTRYPOINT [\"/bin/srv\"]\nCMD [\"--port\", \"80\"]\n", from: "base",
			want: with(), start: "/bin/srv --port 80"},
		{name: "shell entrypoint ignores cmd", src: "FROM base\nENTRYPOINT /bin/srv -x\nCMD [\"--port\"]\n", from: "base",
			want: with(), start: "/bin/srv -x"},
		{name: "ignored metadata", src: "# c\nFROM base AS app\nEXPOSE 80\nVOLUME /data\nLABEL a=b\nSTOPSIGNAL TERM\n", from: "base", want: with()},
		{name: "escape directive", src: "# escape=`\nFROM base\nRUN echo a `\n b\n", from: "base", want: with("RUN echo a  b")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tpl, err := Parse(strings.NewReader(c.src), c.args)
			if err != nil {
				t.Fatal(err)
			}
			if tpl.From != c.from {
				t.Errorf("From = %q, want %q", tpl.From, c.from)
			}
			if got := steps(tpl.Steps); !reflect.DeepEqual(got, c.want) {
				t.Errorf("steps:\n got %q\nwant %q", got, c.want)
			}
			if tpl.StartCmd != c.start {
				t.Errorf("StartCmd = %q, want %q", tpl.StartCmd, c.start)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, src string
		line      int
		msg       string
	}{
		{"empty", "", 0, "no instructions"},
		{"comment only", "# x\nARG A=1\n", 0, "no FROM"},
		{"no from", "RUN true\n", 1, "before FROM"},
		{"multi-stage", "FROM a AS b\nRUN x\nFROM c\n", 3, "multi-stage"},
		{"copy from", "FROM a\nCOPY --from=b /x /y\n", 2, "COPY --from"},
		{"add url", "FROM a\nADD https://example.com/x.tgz /x\n", 2, "remote sources"},
		{"add git", "FROM a\nADD git@github.com:a/b.git /x\n", 2, "remote sources"},
		{"healthcheck", "FROM a\nHEALTHCHECK CMD true\n", 2, "HEALTHCHECK"},
		{"onbuild", "FROM a\nONBUILD RUN true\n", 2, "ONBUILD"},
		{"shell", "FROM a\nSHELL [\"/bin/zsh\", \"-c\"]\n", 2, "SHELL"},
		{"run mount", "FROM a\nRUN --mount=type=cache,target=/c true\n", 2, "RUN --mount"},
		{"heredoc", "FROM a\nRUN <<EOF\necho hi\nEOF\n", 2, "heredoc"},
		{"numeric user", "FROM a\nUSER 1000\n", 2, "numeric"},
		{"user group", "FROM a\nUSER app:staff\n", 2, "group"},
		{"escape context", "FROM a\nCOPY ../secret /x\n", 2, "outside the build context"},
		{"multi source dest", "FROM a\nCOPY a b /dest\n", 2, "ending in /"},
		{"bad chmod", "FROM a\nCOPY --chmod=u+x a /b\n", 2, "--chmod"},
		{"unknown instruction", "FROM a\nFROBNICATE x\n", 2, "unknown instruction"},
		{"syntax", "FROM a\nENV\n", 2, "ENV"},
		{"scratch", "FROM scratch\n", 1, "scratch"},
		{"platform", "FROM --platform=linux/arm64 a\n", 1, "--platform"},
		{"bad env name", "FROM a\nENV 1A=x\n", 2, "invalid variable name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.src), nil)
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if de.Line != c.line || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %q (line %d), want line %d and %q", err, de.Line, c.line, c.msg)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"FROM a\nRUN b\n", "ARG X=1\nFROM a:$X\nCOPY --chown=u a b/ /c/\nENV A=${X:-y}\nCMD [\"x\"]\n",
		"# escape=`\nFROM a\nRUN `\n", "FROM a\nADD x.tar /y\nENTRYPOINT [\"a\"\n", "FROM a\nRUN <<EOF\nx\nEOF\n",
		"FROM ${A:?err}\n", "FROM a\nWORKDIR $B\nUSER ${C}\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(strings.NewReader(src), map[string]string{"A": "b"})
		if err != nil {
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if tpl.From == "" {
			t.Fatal("no base without an error")
		}
		for _, s := range tpl.Steps {
			if s.Type == "" || len(s.Args) == 0 {
				t.Fatalf("empty step %+v", s)
			}
		}
	})
}
