package app

import (
	"github.com/moatsh/moat/internal/runtime/container"
	"github.com/moatsh/moat/internal/runtime/vm"
	"github.com/moatsh/moat/internal/runtime/vm/vmbench"
)

// What `moat bench` (internal/cli/benchcmd) measures of the backends below
// the API: bound here, with the rest of the backends' wiring, so that the
// command imports no backend.
type (
	VMJailBench   = vmbench.JailBench
	VMStartBench  = vmbench.StartBench
	VMStartFloors = vmbench.StartFloors
)

// The backends' names, and their floors: a bare OCI-runtime run of a
// rootfs, the microVM jail's cost and the microVM start floors.
const (
	ContainerRuntime = container.Name
	VMRuntime        = vm.Name
)

var (
	BareRun        = container.BareRun
	CompareVMJail  = vmbench.CompareJail
	MeasureVMStart = vmbench.MeasureStart
)
