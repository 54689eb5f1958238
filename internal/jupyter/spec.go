package jupyter

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// KernelSpecDirs are searched, in order, for <name>/kernel.json.
var KernelSpecDirs = []string{
	"/usr/local/share/jupyter/kernels",
	"/usr/share/jupyter/kernels",
}

// ErrNoKernelSpec is returned when no kernelspec matches a name.
var ErrNoKernelSpec = errors.New("jupyter: kernelspec not found")

// Spec describes how to launch a kernel (a kernel.json).
type Spec struct {
	Name          string            `json:"-"`
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode,omitempty"` // "signal" (default) or "message"
	Env           map[string]string `json:"env,omitempty"`
	// Dir is the kernel's working directory; empty means inherit.
	Dir string `json:"-"`
	// ExtraEnv is appended to the kernel environment after Env.
	ExtraEnv []string `json:"-"`
	// Credential runs the kernel as another user; the connection file is
	// chowned to it.
	Credential *syscall.Credential `json:"-"`
	// LateResultGrace, when set, is how long Execute keeps listening after
	// the kernel reported idle without an execute_result, for kernels that
	// publish the result late.
	LateResultGrace time.Duration `json:"-"`
}

// FindSpec looks a kernelspec up by name in dirs (KernelSpecDirs when nil).
func FindSpec(name string, dirs []string) (Spec, error) {
	if dirs == nil {
		dirs = KernelSpecDirs
	}
	for _, d := range dirs {
		path := filepath.Join(d, name, "kernel.json")
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var s Spec
		if err := json.Unmarshal(b, &s); err != nil {
			return Spec{}, fmt.Errorf("parse kernelspec %s: %w", path, err)
		}
		if len(s.Argv) == 0 {
			return Spec{}, fmt.Errorf("kernelspec %s: empty argv", path)
		}
		s.Name = name
		return s, nil
	}
	return Spec{}, fmt.Errorf("%w: %q in %v", ErrNoKernelSpec, name, dirs)
}

// PythonSpec returns the python3 kernelspec if one is installed, else the
// built-in ipykernel argv using the given interpreter ("python3" if empty).
func PythonSpec(python string) Spec {
	if s, err := FindSpec("python3", nil); err == nil {
		if python != "" && len(s.Argv) > 0 && filepath.Base(s.Argv[0]) == "python3" {
			s.Argv[0] = python
		}
		return s
	}
	if python == "" {
		python = "python3"
	}
	return Spec{
		Name:        "python3",
		Argv:        []string{python, "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		DisplayName: "Python 3",
		Language:    "python",
	}
}

// LookPath reports whether the spec's executable is available.
func (s Spec) LookPath() error {
	if len(s.Argv) == 0 {
		return errors.New("jupyter: empty kernel argv")
	}
	if _, err := exec.LookPath(s.Argv[0]); err != nil {
		return fmt.Errorf("kernel %q: %w", s.Name, err)
	}
	return nil
}

// argv substitutes {connection_file} in the spec's argv.
func (s Spec) argv(connFile string) []string {
	out := make([]string, len(s.Argv))
	for i, a := range s.Argv {
		out[i] = strings.ReplaceAll(a, "{connection_file}", connFile)
	}
	return out
}

// ConnectionInfo is the content of a kernel connection file.
type ConnectionInfo struct {
	IP              string `json:"ip"`
	Transport       string `json:"transport"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name"`
}

func (c ConnectionInfo) addr(port int) string {
	return fmt.Sprintf("%s://%s:%d", c.Transport, c.IP, port)
}

// newConnectionInfo picks five free loopback ports and a random key.
func newConnectionInfo(kernelName string) (ConnectionInfo, error) {
	ports := make([]int, 5)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ConnectionInfo{}, fmt.Errorf("pick free port: %w", err)
		}
		listeners = append(listeners, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return ConnectionInfo{}, fmt.Errorf("generate key: %w", err)
	}
	return ConnectionInfo{
		IP: "127.0.0.1", Transport: "tcp",
		ShellPort: ports[0], IOPubPort: ports[1], StdinPort: ports[2], ControlPort: ports[3], HBPort: ports[4],
		Key: hex.EncodeToString(key[:]), SignatureScheme: "hmac-sha256", KernelName: kernelName,
	}, nil
}

// writeConnectionFile writes info to a private temp file (owned by cred's
// user when set) and returns its path.
func writeConnectionFile(dir string, info ConnectionInfo, cred *syscall.Credential) (string, error) {
	f, err := os.CreateTemp(dir, "kernel-*.json")
	if err != nil {
		return "", fmt.Errorf("create connection file: %w", err)
	}
	defer f.Close()
	if cred != nil {
		if err := f.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
			os.Remove(f.Name())
			return "", fmt.Errorf("chown connection file: %w", err)
		}
	}
	if err := json.NewEncoder(f).Encode(info); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("write connection file: %w", err)
	}
	return f.Name(), nil
}
