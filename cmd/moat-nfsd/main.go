// Command moat-nfsd is the NFSv3 server of one microVM sandbox's volumes
// (package nfsd). The vm runtime starts it jailed (internal/jail
// NSCommand, package volserver) with the volumes' idmapped mounts and a
// listening socket in the sandbox's network namespace; it is not meant to
// be run by hand. Build it statically: CGO_ENABLED=0 go build
// ./cmd/moat-nfsd (the jail needs that to drop capabilities on every
// thread).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/moatsh/moat/internal/jail"
	"github.com/moatsh/moat/internal/nfsd"
	"github.com/moatsh/moat/internal/nfsd/export"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(log); err != nil {
		log.Error("moat-nfsd stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	var cfg nfsd.ProcConfig
	if err := json.Unmarshal([]byte(os.Getenv(nfsd.ConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("config (%s): %w", nfsd.ConfigEnv, err)
	}
	os.Unsetenv(nfsd.ConfigEnv)
	log = log.With("sandbox", cfg.Sandbox)
	verf, err := cfg.VerifierBytes()
	if err != nil {
		return err
	}
	files, err := jail.EnterNS()
	if err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if len(files) != 1 {
		return errors.New("want exactly one descriptor: the listening socket")
	}
	ln, err := net.FileListener(files[0])
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	files[0].Close()
	unix.Umask(0) // clients send the modes they want, their umask applied
	var exports []*export.Export
	for i, name := range cfg.Exports {
		root, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("export %s: %w", name, err)
		}
		ex, err := export.Open(i, name, root)
		if err != nil {
			return err
		}
		exports = append(exports, ex)
	}
	s, err := nfsd.New(exports, verf, log)
	if err != nil {
		return err
	}
	log.Info("moat-nfsd serving", "exports", cfg.Exports, "addr", ln.Addr().String())
	return s.Serve(context.Background(), ln)
}
