package main

import (
	"context"
	"net"
	"testing"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    options
		wantErr bool
	}{
		{"defaults", nil, options{port: 49983, code: ":49999"}, false},
		{"code off", []string{"--code-addr", "off"}, options{port: 49983}, false},
		{"code addr", []string{"--host", "--code-addr", "127.0.0.1:0"}, options{port: 49983, host: true, code: "127.0.0.1:0"}, false},
		{"host", []string{"--host", "--addr", "127.0.0.1:0", "--home", "/h", "--verbose"},
			options{port: 49983, addr: "127.0.0.1:0", host: true, home: "/h", verbose: true}, false},
		{"port", []string{"--port", "1234"}, options{port: 1234, code: ":49999"}, false},
		{"stray arg", []string{"x"}, options{}, true},
		{"bad flag", []string{"--nope"}, options{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err == nil && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestInternalEnv(t *testing.T) {
	t.Setenv("MOAT_SANDBOX_ID", "sbx")
	t.Setenv("MOAT_TEMPLATE_ID", "")
	env := internalEnv()
	if env["E2B_SANDBOX"] != "true" || env["E2B_SANDBOX_ID"] != "sbx" {
		t.Fatalf("env = %v", env)
	}
	if _, ok := env["E2B_TEMPLATE_ID"]; ok {
		t.Fatalf("empty template id exported: %v", env)
	}
}

// TestPlainTCP: envd's listeners are plain TCP (the //go:debug line of
// main.go), not Go's default Multipath TCP.
func TestPlainTCP(t *testing.T) {
	var lc net.ListenConfig
	if lc.MultipathTCP() {
		t.Fatal("envd would listen with Multipath TCP")
	}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if on, err := c.(*net.TCPConn).MultipathTCP(); on || err != nil {
		t.Fatalf("accepted connection: MPTCP %v (%v)", on, err)
	}
}
