// Command registry serves an OCI registry on 127.0.0.1 for the e2e tests
// of template builds from images (this machine reaches no public
// registry). It pushes one image, "test/busybox:1": a root with the
// host's static busybox as /bin/sh and its common applets (and a /bin/bash
// that execs it, for the SDKs' commands), then prints
// "ready <host:port>" and serves until killed. With -user and -pass it
// requires HTTP basic authentication, as Docker's distribution does.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var applets = []string{"sh", "ash", "cat", "chmod", "chown", "cp", "dirname", "echo", "env", "find", "id",
	"ls", "mkdir", "mktemp", "mv", "pwd", "rm", "sleep", "stat", "tar", "touch", "whoami", "grep", "test", "["}

func main() {
	user := flag.String("user", "", "require basic auth with this user")
	pass := flag.String("pass", "", "and this password")
	busybox := flag.String("busybox", "/usr/bin/busybox", "static busybox binary")
	flag.Parse()
	bb, err := os.ReadFile(*busybox)
	if err != nil {
		log.Fatalf("busybox: %v (apt-get install busybox-static)", err)
	}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		log.Fatal(http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if *user != "" {
				u, p, ok := r.BasicAuth()
				if !ok || u != *user || p != *pass {
					w.Header().Set("WWW-Authenticate", `Basic realm="e2e"`)
					http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
					return
				}
			}
			h.ServeHTTP(w, r)
		})))
	}()
	host := ln.Addr().String()
	img, err := image(bb)
	if err != nil {
		log.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/test/busybox:1")
	if err != nil {
		log.Fatal(err)
	}
	var opts []remote.Option
	if *user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: *user, Password: *pass}))
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ready %s\n", host)
	select {}
}

func image(bb []byte) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	for _, d := range []string{"bin/", "etc/", "srv/"} {
		if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}, nil); err != nil {
			return nil, err
		}
	}
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755}, bb); err != nil {
		return nil, err
	}
	for _, a := range applets {
		if err := add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	// The SDKs run commands with /bin/bash -l -c.
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/bash", Mode: 0o755},
		[]byte("#!/bin/busybox sh\nexec /bin/busybox sh \"$@\"\n")); err != nil {
		return nil, err
	}
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/os-release", Mode: 0o644}, []byte("ID=busybox\n")); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Env: []string{"PATH=/bin", "FROM_IMAGE=yes"}, WorkingDir: "/srv"}
	return mutate.ConfigFile(img, cf)
}
