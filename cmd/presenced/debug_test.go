package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestDebugListenerServesProfiles(t *testing.T) {
	addr, stop, err := serveDebug("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + "/debug/pprof/"
	resp, err := http.Get(url + "goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutine profile: %d %.200s", resp.StatusCode, body)
	}
	stop()
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Fatal("debug listener still serving after stop")
	}
	if _, _, err := serveDebug("127.0.0.1:-1", slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a bad address was accepted")
	}
}
