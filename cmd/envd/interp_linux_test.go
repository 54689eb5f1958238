package main

import (
	"testing"

	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
)

// The host waits for the default Python context before a template
// snapshot only where envd starts one: both look for the same file.
func TestPythonKernelSpecMatchesHost(t *testing.T) {
	if pythonKernelSpec != guestenvd.PythonKernelSpec {
		t.Fatalf("envd warms python on %q, the template snapshot waits on %q", pythonKernelSpec, guestenvd.PythonKernelSpec)
	}
}
