package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisLoggerThrottles: go-redis's messages come out as the server's
// JSON lines, one per kind per redisLogEvery with the count meanwhile.
func TestRedisLoggerThrottles(t *testing.T) {
	var out bytes.Buffer
	l := newRedisLogger(slog.New(slog.NewJSONHandler(&out, nil)))
	clock := time.Unix(1000, 0)
	l.now = func() time.Time { return clock }
	dial := "redis: connection pool: failed to dial after %d attempts: %v"
	for i := range 250 { // every 50 ms for 12.5 s
		l.Printf(context.Background(), dial, 1, "connection refused")
		if i == 3 {
			l.Printf(context.Background(), "redis: discarding bad PubSub connection: %v", "EOF")
		}
		clock = clock.Add(50 * time.Millisecond)
	}
	var lines []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("not a JSON line: %q", ln)
		}
		lines = append(lines, m)
	}
	want := []struct {
		msg   string
		count float64
	}{
		{"connection pool: failed to dial after 1 attempts: connection refused", 1},
		{"discarding bad PubSub connection: EOF", 1},
		{"connection pool: failed to dial after 1 attempts: connection refused", 200},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if lines[i]["msg"] != w.msg || lines[i]["count"] != w.count || lines[i]["level"] != "WARN" {
			t.Errorf("line %d: %v; want msg %q count %v at WARN", i, lines[i], w.msg, w.count)
		}
	}
}
