package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"
)

// serveDebug serves Go's profiler (/debug/pprof/) on addr, apart from the
// public listener, until stop is called.
func serveDebug(addr string, log *slog.Logger) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("debug listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: literalHost(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	log.Info("debug listener", "addr", ln.Addr().String())
	return ln.Addr(), func() { _ = hs.Close() }, nil
}

// literalHost serves only requests whose Host is an IP address or
// localhost: a page in a browser on the machine could otherwise reach the
// listener through a name of its own that resolves to 127.0.0.1 (DNS
// rebinding) and read the profiles, the command line among them (an
// audit, 2026-12-07).
func literalHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if net.ParseIP(strings.Trim(host, "[]")) == nil && !strings.EqualFold(host, "localhost") {
			http.Error(w, "the debug listener answers requests to an IP address or localhost only", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
