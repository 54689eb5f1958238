package build

import (
	"errors"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/oci"
)

func TestCompile(t *testing.T) {
	tpl := func(steps ...Step) Spec { return Spec{FromTemplate: "base", Steps: steps} }
	tests := []struct {
		name    string
		spec    Spec
		kind    error  // nil: compiles
		msg     string // in the error
		env     map[string]string
		workdir string
		user    string
	}{
		{name: "no steps", spec: tpl()},
		{name: "env, workdir, user", spec: tpl(Step{Type: "ENV", Args: []string{"A", "1", "B", "x=y"}},
			Step{Type: "WORKDIR", Args: []string{"/tmp"}}, Step{Type: "USER", Args: []string{"root"}},
			Step{Type: "ENV", Args: []string{"A", "2"}}),
			env: map[string]string{"A": "2", "B": "x=y"}, workdir: "/tmp", user: "root"},
		{name: "relative workdir", spec: tpl(Step{Type: "WORKDIR", Args: []string{"app"}}, Step{Type: "WORKDIR", Args: []string{"../x/."}}),
			workdir: "/home/user/x"},
		{name: "image", spec: Spec{FromImage: "localhost:5000/a:1", Registry: &oci.Credentials{Username: "u", Password: "p"}}},
		{name: "both bases", spec: Spec{FromImage: "a", FromTemplate: "b"}, kind: errdefs.ErrInvalidArgument, msg: "exclusive"},
		{name: "no base", spec: Spec{}, kind: errdefs.ErrInvalidArgument, msg: "fromImage or fromTemplate"},
		{name: "registry without image", spec: Spec{FromTemplate: "b", Registry: &oci.Credentials{}}, kind: errdefs.ErrInvalidArgument, msg: "fromImageRegistry"},
		{name: "start and ready commands", spec: Spec{FromTemplate: "b", StartCmd: "server", ReadyCmd: "true"}},
		{name: "unknown step", spec: tpl(Step{Type: "ENV", Args: []string{"A", "1"}}, Step{Type: "ADD"}),
			kind: errdefs.ErrInvalidArgument, msg: `step 2 (ADD): unknown step type "ADD"`},
		{name: "run without command", spec: tpl(Step{Type: "RUN", Args: []string{" "}}), kind: errdefs.ErrInvalidArgument, msg: "step 1 (RUN)"},
		{name: "run", spec: tpl(Step{Type: "ENV", Args: []string{"A", "1"}}, Step{Type: "RUN", Args: []string{"make", "root"}}), env: map[string]string{"A": "1"}},
		{name: "run bad user", spec: tpl(Step{Type: "RUN", Args: []string{"id", "../x"}}), kind: errdefs.ErrInvalidArgument, msg: "step 1 (RUN)"},
		{name: "copy", spec: tpl(Step{Type: "COPY", Args: []string{"a/*.py", "/a", "root", "0644"}, FilesHash: strings.Repeat("0", 64)})},
		{name: "copy without hash", spec: tpl(Step{Type: "COPY", Args: []string{"a", "/a"}}), kind: errdefs.ErrInvalidArgument, msg: "step 1 (COPY)"},
		{name: "copy outside context", spec: tpl(Step{Type: "COPY", Args: []string{"../a", "/a"}, FilesHash: strings.Repeat("0", 64)}), kind: errdefs.ErrInvalidArgument, msg: "inside the build context"},
		{name: "copy bad mode", spec: tpl(Step{Type: "COPY", Args: []string{"a", "/a", "", "9"}, FilesHash: strings.Repeat("0", 64)}), kind: errdefs.ErrInvalidArgument, msg: "octal"},
		{name: "env odd args", spec: tpl(Step{Type: "ENV", Args: []string{"A"}}), kind: errdefs.ErrInvalidArgument, msg: "pairs"},
		{name: "env bad name", spec: tpl(Step{Type: "ENV", Args: []string{"A-B", "1"}}), kind: errdefs.ErrInvalidArgument, msg: "A-B"},
		{name: "workdir empty", spec: tpl(Step{Type: "WORKDIR", Args: []string{""}}), kind: errdefs.ErrInvalidArgument, msg: "WORKDIR"},
		{name: "user bad", spec: tpl(Step{Type: "USER", Args: []string{"../root"}}), kind: errdefs.ErrInvalidArgument, msg: "USER"},
		{name: "user two args", spec: tpl(Step{Type: "USER", Args: []string{"a", "b"}}), kind: errdefs.ErrInvalidArgument, msg: "USER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.spec)
			if tt.kind != nil {
				if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.kind, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Config.Env) != len(tt.env) {
				t.Fatalf("env = %v, want %v", p.Config.Env, tt.env)
			}
			for k, v := range tt.env {
				if p.Config.Env[k] != v {
					t.Fatalf("env = %v, want %v", p.Config.Env, tt.env)
				}
			}
			if p.Config.Workdir != tt.workdir || p.Config.User != tt.user {
				t.Fatalf("config = %+v", p.Config)
			}
		})
	}
}
