// Command registry serves an OCI registry on 127.0.0.1 for the e2e tests
// of template builds from images (this machine reaches no public
// registry; the registry is package ocireg's). It pushes
// "test/busybox:1": a root with the host's static busybox as /bin/sh and
// its common applets (and a /bin/bash that execs it, for the SDKs'
// commands). With -rootfs DIR it also pushes that root filesystem (e.g.
// the base template's Debian rootfs) as "test/debian:12", one
// uncompressed layer. Then it prints "ready <host:port>" and serves until
// killed. With -user and -pass it requires HTTP basic authentication, as
// Docker's distribution does.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/moatsh/moat/internal/oci/ocireg"
)

func main() {
	user := flag.String("user", "", "require basic auth with this user")
	pass := flag.String("pass", "", "and this password")
	busybox := flag.String("busybox", "/usr/bin/busybox", "static busybox binary")
	rootfs := flag.String("rootfs", "", "also push this root filesystem directory as test/debian:12")
	flag.Parse()
	bb, err := os.ReadFile(*busybox)
	if err != nil {
		log.Fatalf("busybox: %v (apt-get install busybox-static)", err)
	}
	reg, err := ocireg.Start(*user, *pass)
	if err != nil {
		log.Fatal(err)
	}
	img, err := ocireg.BusyboxImage(bb)
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Push("test/busybox:1", img); err != nil {
		log.Fatal(err)
	}
	if *rootfs != "" {
		if err := reg.PushRootfs("test/debian:12", *rootfs, ocireg.DebianConfig); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("ready %s\n", reg.Host)
	select {}
}
