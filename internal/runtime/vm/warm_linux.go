package vm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/moatsh/moat/api/envd/process"
	"github.com/moatsh/moat/api/envd/process/processconnect"
)

// warmCommands are run through envd in a template guest before it is
// snapshotted, so that every restore finds what a first command needs in
// the guest's page cache (the shell, the C library, login profiles)
// instead of reading it through virtio-blk under TCG: the SDKs run
// commands as /bin/bash -l -c as "user", tools as root. A command that
// fails (no bash, no such user) only leaves its files cold.
var warmCommands = []struct {
	user string
	argv []string
}{
	{"root", []string{"/bin/sh", "-c", "true"}},
	{"root", []string{"/bin/bash", "-l", "-c", "true"}},
	{"user", []string{"/bin/bash", "-l", "-c", "true"}},
}

// warmMetaLine marks, in a snapshot's meta, a snapshot taken after
// warmCommands ran. It is part of what names the snapshot, so snapshots
// taken before the warm-up existed are retaken once, and template GC
// counts snapshots without it as stale.
const warmMetaLine = "warmup 1"

// warmGuest runs warmCommands in the guest whose envd listens at addr.
func warmGuest(ctx context.Context, addr string) error {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	pc := processconnect.NewProcessClient(hc, "http://"+addr, connect.WithProtoJSON())
	var errs []error
	for _, w := range warmCommands {
		if err := runOnce(ctx, pc, w.user, w.argv); err != nil {
			errs = append(errs, fmt.Errorf("%s as %s: %w", w.argv, w.user, err))
		}
	}
	return errors.Join(errs...)
}

// runOnce runs argv as user through envd and waits for it to end.
func runOnce(ctx context.Context, pc processconnect.ProcessClient, user string, argv []string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	noStdin := false
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: argv[0], Args: argv[1:]}, Stdin: &noStdin})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			if !end.GetExited() || end.GetExitCode() != 0 {
				return fmt.Errorf("ended: %s", end.GetStatus())
			}
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	return errors.New("no end event")
}
