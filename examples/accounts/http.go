package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/strand-io/strand/stream/topology/queryserver"
)

// startHTTP serves the read model with strand's query server
// (stream/topology/queryserver) and the App's metrics on one server; a busy
// port falls back to a free one, so that the example runs next to
// anything. Reads see committed state only (one consistent snapshot per
// request), so they are safe while the processor commits, and they never
// touch the broker:
//
//	GET /tables/balances/{id}        one account as JSON; 404 when unknown
//	GET /tables/balances?limit=N     a page of accounts (default 100, at most 10,000), with a next cursor
//	GET /stats                       the App's counters per source and partition
//	GET /healthz, GET /readyz        alive; caught up with the log
//	GET /metrics                     the App's metrics in Prometheus format
func (a *app) startHTTP() (stop func(), err error) {
	if a.cfg.http == "" {
		return func() {}, nil
	}
	opts := []queryserver.Option{queryserver.Table(a.balances), queryserver.WithLogger(a.log)}
	if a.tel != nil {
		opts = append(opts, queryserver.WithHandler("GET /metrics", a.tel.metrics))
	}
	if a.cfg.httpPublic {
		opts = append(opts, queryserver.AllowNonLoopback())
	}
	srv, err := queryserver.New(a.app, append(opts, queryserver.WithAddr(a.cfg.http))...)
	if err != nil {
		return nil, fmt.Errorf("-http: %w", err)
	}
	ln, err := srv.Listen()
	switch {
	case errors.Is(err, queryserver.ErrNotLoopback):
		return nil, fmt.Errorf("-http %s: %w (or give -http-public)", a.cfg.http, err)
	case err != nil:
		host, _, _ := net.SplitHostPort(a.cfg.http)
		a.log.Warn("HTTP address busy; using a free port", "addr", a.cfg.http, "err", err)
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			return nil, fmt.Errorf("listen for HTTP: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	a.httpAddr = ln.Addr().String()
	a.printf("query the read model: curl http://%s/tables/balances/1   (or /tables/balances?limit=10, /stats, /readyz, /metrics)", a.httpAddr)
	return func() {
		cancel()
		if err := <-done; err != nil {
			a.log.Error("query server", "err", err)
		}
	}, nil
}
