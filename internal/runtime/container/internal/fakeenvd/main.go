// Command fakeenvd is the probe of the container runtime's isolation tests,
// installed by name as /usr/local/bin/probe beside the real envd (never in
// its place): a static HTTP server on --port answering /health with 204,
// plus probes the tests drive from inside a sandbox.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	port := flag.Int("port", 49983, "listen port")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// /dial?addr=host:port: 200 when a TCP connection succeeds, 502 otherwise.
	mux.HandleFunc("GET /dial", func(w http.ResponseWriter, r *http.Request) {
		c, err := net.DialTimeout("tcp", r.URL.Query().Get("addr"), time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		c.Close()
		fmt.Fprintln(w, "connected")
	})
	mux.HandleFunc("GET /write", func(w http.ResponseWriter, r *http.Request) {
		if err := os.WriteFile(r.URL.Query().Get("path"), []byte(r.URL.Query().Get("data")), 0o644); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /read", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		_, _ = w.Write(b)
	})
	log.Fatal(http.ListenAndServe(fmt.Sprintf(":%d", *port), mux))
}
