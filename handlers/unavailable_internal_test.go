package handlers

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Events failing with a backend down are one line at once, then one per
// 10 s with their count. Events that succeed meanwhile (a heartbeat, a
// join on a Redis Cluster master that is up) do not end the run: only a
// success unavailableQuiet after the last failure does, with one line.
func TestUnavailableLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var u unavailableLog
	c := &Conn{sid: "s1", UserID: "alice"}
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for i := range 40 { // 4 s of an outage: a failure and a success every 100 ms
		u.fail(log, "conversation:join", c, errTest, at(i*100))
		u.recover(log, at(i*100+50))
	}
	count := func(s string) int { return strings.Count(buf.String(), s) }
	if n, r := count("events failed: backend unavailable"), count("events succeed again"); n != 1 || r != 0 {
		t.Fatalf("%d failure lines and %d recovery lines in a 4 s outage with successes, want 1 and 0:\n%s", n, r, buf.String())
	}
	u.recover(log, at(3900+unavailableQuietMs-1))
	if r := count("events succeed again"); r != 0 {
		t.Fatalf("a recovery line %v after the last failure:\n%s", unavailableQuiet, buf.String())
	}
	u.recover(log, at(3900+unavailableQuietMs))
	if r := count("msg=\"events succeed again\" failed_meanwhile=40"); r != 1 {
		t.Fatalf("want one recovery line counting the 40 failures:\n%s", buf.String())
	}
	if u.failing.Load() {
		t.Fatal("still failing after the recovery")
	}
	u.recover(log, at(20000))
	if r := count("events succeed again"); r != 1 {
		t.Fatalf("a second recovery line:\n%s", buf.String())
	}
}

const unavailableQuietMs = int(unavailableQuiet / time.Millisecond)

var errTest = testError("backend down")

type testError string

func (e testError) Error() string { return string(e) }
