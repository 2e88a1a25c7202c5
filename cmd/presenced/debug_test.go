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
	// a name of an attacker's that resolves here (DNS rebinding) is refused
	req, _ := http.NewRequest("GET", url+"cmdline", nil)
	req.Host = "rebind.example:80"
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("Host rebind.example: %d, want 403", resp.StatusCode)
	}
	req.Host = "localhost:6060"
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
		t.Fatalf("Host localhost: %d, want 200", resp.StatusCode)
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
