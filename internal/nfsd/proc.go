package nfsd

import (
	"encoding/hex"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// The server runs as a process of its own per sandbox (cmd/moat-nfsd),
// started in a user-namespace jail (internal/jail NSCommand) by the vm
// runtime: ProcConfig is what it is told, in ConfigEnv.

// ConfigEnv names the environment variable that carries a ProcConfig.
const ConfigEnv = "MOAT_NFSD"

// Port is where the server listens (in the sandbox's network namespace,
// on the guest's gateway address) and where guests mount from.
const Port = 2049

// ProcConfig configures a server process.
type ProcConfig struct {
	Sandbox string `json:"sandbox"`
	// Exports are the served trees: export i is mounted at Exports[i] in
	// the jail and served under that name.
	Exports []string `json:"exports"`
	// Verifier is the write verifier, 16 hex digits.
	Verifier string `json:"verifier"`
}

// ExportName is the name of a sandbox's i-th volume, in the jail and on
// the wire ("/v0", "/v1", ...).
func ExportName(i int) string { return "/v" + strconv.Itoa(i) }

// VerifierBytes decodes c.Verifier.
func (c *ProcConfig) VerifierBytes() ([8]byte, error) {
	var v [8]byte
	b, err := hex.DecodeString(c.Verifier)
	if err != nil || len(b) != 8 {
		return v, fmt.Errorf("nfsd: verifier %q is not 8 bytes of hex", c.Verifier)
	}
	copy(v[:], b)
	return v, nil
}

// Caps are the capabilities a server process keeps, in its own user
// namespace only: switching a thread's filesystem IDs (SETUID, SETGID)
// and acting as the guest's root on the volume's files (the file
// capabilities, which the kernel gives a thread only while its fsuid is
// 0). No CAP_SYS_ADMIN (no mounts), CAP_MKNOD, CAP_NET_* or CAP_KILL.
var Caps = []int{unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER,
	unix.CAP_FSETID, unix.CAP_SETGID, unix.CAP_SETUID}
