package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/strand-io/strand/stream/topology/queryserver"
)

// listenHTTP listens on the -http address (a busy port falls back to a
// free one, so that the example runs next to anything); the query server
// serves on it once the App is open (serveHTTP). It listens first because
// an instance of a group announces its query address when it joins.
func (a *app) listenHTTP() error {
	if a.cfg.http == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(a.cfg.http)
	if err != nil {
		return fmt.Errorf("-http %q: %w", a.cfg.http, err)
	}
	if !a.cfg.httpPublic {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("-http %s: %w (or give -http-public)", a.cfg.http, queryserver.ErrNotLoopback)
		}
	}
	ln, err := net.Listen("tcp", a.cfg.http)
	if err != nil {
		a.log.Warn("HTTP address busy; using a free port", "addr", a.cfg.http, "err", err)
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			return fmt.Errorf("listen for HTTP: %w", err)
		}
	}
	a.ln, a.httpAddr = ln, ln.Addr().String()
	return nil
}

// serveHTTP serves the read model with strand's query server
// (stream/topology/queryserver) and the App's metrics on the listener of
// listenHTTP. Reads see committed state only (one consistent snapshot per
// request), so they are safe while the processor commits, and they never
// touch the broker:
//
//	GET /tables/balances/{id}        one account as JSON; 404 when unknown
//	GET /tables/balances?limit=N     a page of accounts (default 100, at most 10,000), with a next cursor
//	GET /stats                       the App's counters per source and partition
//	GET /healthz, GET /readyz        alive; caught up with the log
//	GET /metrics                     the App's metrics in Prometheus format
//	GET /group                       an instance of a group: its member, its partitions and their phases
//
// An instance of a group serves the accounts of the partitions it owns and
// forwards a get of any other account to its owner (the query server's
// default router follows the group's membership); a partition being
// restored answers 503 with Retry-After.
func (a *app) serveHTTP() (stop func(), err error) {
	if a.ln == nil {
		return func() {}, nil
	}
	opts := []queryserver.Option{queryserver.WithTable(a.balances), queryserver.WithLogger(a.log),
		queryserver.WithHandler("GET /group", http.HandlerFunc(a.handleGroup))}
	if a.tel != nil {
		opts = append(opts, queryserver.WithHandler("GET /metrics", a.tel.metrics))
	}
	if a.cfg.httpPublic {
		opts = append(opts, queryserver.WithNonLoopback())
	}
	srv, err := queryserver.New(a.app, opts...)
	if err != nil {
		return nil, fmt.Errorf("-http: %w", err)
	}
	ln := a.ln
	a.ln = nil
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	if a.cfg.group {
		// The parent of a -instances run reads this line for the address.
		a.printf("%s %d: http://%s", queryLine, a.cfg.instance, a.httpAddr)
	}
	until := "while it runs"
	switch {
	case a.cfg.role == "all" && !a.cfg.serve:
		until = "until the check is done, then this run exits; add -serve to keep serving until interrupted"
	case a.cfg.role == "all":
		until = "until interrupted (-serve)"
	case a.cfg.role == "processor" && a.cfg.drain:
		until = "until it has caught up (-drain), then it exits"
	case a.cfg.role == "processor":
		until = "until interrupted"
	}
	a.printf("query the read model (%s): curl http://%s/tables/balances/1   (or /tables/balances?limit=10, /stats, /readyz, /metrics%s)",
		until, a.httpAddr, map[bool]string{true: ", /group", false: ""}[a.cfg.group])
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
			a.log.Error("query server", "err", err)
		}
	}, nil
}

// closeListener closes a listener that never served (a run that failed
// before serveHTTP).
func (a *app) closeListener() {
	if a.ln != nil {
		_ = a.ln.Close()
		a.ln = nil
	}
}
