package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/mcpserver"
)

// newMCPCmd is `moat mcp`: an MCP server (stdio, or streamable HTTP with
// --http) that is a client of a Moat server with one API key.
func newMCPCmd() *cobra.Command {
	var cf clientFlags
	var httpAddr, domain, token string
	var callTimeout time.Duration
	var maxOutput int
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the Model Context Protocol: let AI agents use sandboxes (stdio, or --http)",
		Long: "moat mcp is an MCP server for AI agents (Claude Desktop, Cursor, ...): tools to create sandboxes, run\n" +
			"commands and code, read and write files, expose ports, list and kill sandboxes. It is a client of a Moat\n" +
			"server with one API key (--api-key): it reaches only that key's team's sandboxes. It speaks MCP on\n" +
			"stdin/stdout, or streamable HTTP on --http ADDR (path /mcp). See docs/mcp.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cf.apiKey == "" {
				return errors.New("an API key is required: --api-key, MOAT_API_KEY or E2B_API_KEY")
			}
			ms, err := mcpserver.New(mcpserver.Config{Client: cf.client(), Domain: domain, CallTimeout: callTimeout,
				MaxOutput: maxOutput, Logger: slog.Default()})
			if err != nil {
				return err
			}
			if httpAddr == "" {
				return mcpserver.ServeStdio(cmd.Context(), ms)
			}
			return serveMCPHTTP(cmd.Context(), httpAddr, mcpserver.HTTPHandler(ms, token, slog.Default()))
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (path /mcp) instead of stdio, e.g. 127.0.0.1:8931")
	f.StringVar(&token, "http-token", envOr("", "MOAT_MCP_TOKEN"),
		"with --http: require 'Authorization: Bearer TOKEN' (env MOAT_MCP_TOKEN)")
	f.StringVar(&domain, "domain", envOr("", "MOAT_DOMAIN"),
		"the Moat server's --domain: expose_port returns {port}-{id}.DOMAIN URLs (env MOAT_DOMAIN)")
	f.DurationVar(&callTimeout, "call-timeout", mcpserver.DefaultCallTimeout, "longest a tool call may take")
	f.IntVar(&maxOutput, "max-output", mcpserver.DefaultMaxOutput, "bytes of each text a tool returns; more is truncated")
	return cmd
}

// serveMCPHTTP serves h on addr under /mcp until ctx ends.
func serveMCPHTTP(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mcp: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	slog.Info("moat mcp listening on http://" + ln.Addr().String() + "/mcp")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("mcp: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}
