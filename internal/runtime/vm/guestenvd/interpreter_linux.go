package guestenvd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/moatsh/moat/internal/dialrace"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
)

// InterpreterPort is where envd's code interpreter listens inside the guest.
const InterpreterPort = 49999

// PythonKernelSpec is the file whose presence makes envd start the default
// Python context at boot (cmd/envd's pythonKernelSpec; a test there keeps
// the two equal).
const PythonKernelSpec = "/usr/share/jupyter/kernels/python3/kernel.json"

// WaitPythonContext polls the code interpreter of the guest at host (an
// IP address) until it lists a Python context: envd starts the default one
// by itself at boot when the guest has the Python kernelspec, and a
// template snapshot taken before that kernel is up would make every clone
// finish starting it (~20 s of CPU under TCG) before its first runCode.
func WaitPythonContext(ctx context.Context, host string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl := &http.Client{Timeout: 5 * time.Second, Transport: dialrace.NewTransport()}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(InterpreterPort)) + "/contexts"
	var last error
	for {
		ok, err := hasPythonContext(ctx, cl, url)
		if ok {
			return nil
		}
		last = err
		if err := qemu.Sleep(ctx, 250*time.Millisecond); err != nil {
			return fmt.Errorf("python context at %s: %w (last: %v)", url, err, last)
		}
	}
}

func hasPythonContext(ctx context.Context, cl *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("status %s", resp.Status)
	}
	var list []struct {
		Language string `json:"language"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return false, fmt.Errorf("decode contexts: %w", err)
	}
	for _, c := range list {
		if c.Language == "python" {
			return true, nil
		}
	}
	return false, fmt.Errorf("no python context yet (%d listed)", len(list))
}
