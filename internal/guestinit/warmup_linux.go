package guestinit

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// warmEnvd is envd's address on the guest's loopback.
const warmEnvd = "127.0.0.1:49983"

// warmUser runs the warm-up command: the SDKs' default user.
const warmUser = "user"

// warmUp starts /bin/true as the SDKs' default user through envd on the
// loopback, once, right after a restore. A restored QEMU is a new process
// with an empty TCG translation cache: the first command pays for
// translating envd's process path (Connect handler, user lookup, fork and
// exec with credentials, pipes, the end event) and the kernel's and the
// dynamic loader's; doing it here, while the host still waits for /health
// and posts /init, leaves those translations to the client's first
// command (measured: Run("true") of `bash -l -c true` about 35 ms faster;
// warming with bash -l itself took ~290 ms, overlapped the client's Run
// and helped less). It leaves no file and no process; envd keeps the
// ended process for Connect by PID a few seconds, as every process.
// Errors are ignored: a template without the user only stays cold.
// Skipped with moat.warmup=0 on the kernel command line.
func warmUp() {
	start := time.Now()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	msg := []byte(`{"process":{"cmd":"/bin/true"},"stdin":false}`)
	var body bytes.Buffer
	body.WriteByte(0) // Connect streaming envelope: flags, length, message
	_ = binary.Write(&body, binary.BigEndian, uint32(len(msg)))
	body.Write(msg)
	req, err := http.NewRequest(http.MethodPost, "http://"+warmEnvd+"/process.Process/Start", &body)
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(warmUser+":")))
	resp, err := cl.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "moat-vminit: warm-up:", err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Fprintf(os.Stderr, "moat-vminit: warm-up %s in %s\n", resp.Status, time.Since(start).Round(time.Millisecond))
}

// warmUpOn says whether the command line leaves the warm-up on.
func warmUpOn() bool { return cmdline()[ArgWarmup] != "0" }
