package presence

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Users whose heartbeats start together drift apart: their activity
// records stop coming due all at once, and each user still records at
// least every activityEvery and at most a quarter more often.
func TestActivityRecordsDriftApart(t *testing.T) {
	e := &RedisEngine{lastAct: map[string]time.Time{}, cfg: Config{AwayAfter: time.Minute}}
	every := e.activityEvery()
	const users = 1000
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	last := map[string]time.Time{}
	worst := 0
	for step := time.Duration(0); step <= 60*time.Second; step += 100 * time.Millisecond {
		now := t0.Add(step)
		sent := 0
		for i := range users {
			u := fmt.Sprintf("u%d", i)
			if !e.activityDue(u, now) {
				if now.Sub(last[u]) > every {
					t.Fatalf("%s: no record for %v", u, now.Sub(last[u]))
				}
				continue
			}
			if l, ok := last[u]; ok && now.Sub(l) < every*3/4 {
				t.Fatalf("%s: records %v apart", u, now.Sub(l))
			}
			last[u] = now
			sent++
		}
		if step >= 30*time.Second {
			worst = max(worst, sent)
		}
	}
	// in step, every 100 ms step of 5 s would send all 1000 at once
	if worst > users/4 {
		t.Fatalf("after 30 s, %d of %d users still record in the same 100 ms", worst, users)
	}
}

// FuzzParseUser: a user record is five fields split by "|" (a record of
// a release before 2026-12-02, legacy) or six (the sixth its sockets), as
// strings.Split would have it; anything else is not a record.
func FuzzParseUser(f *testing.F) {
	for _, s := range []string{"1|1796160547136|online|0|0", "1|1796160547136|on|0|0|a1", "2|1|on|0|0|a1,a2", "0|0||0|0|",
		"0|0||0|0", "1|2|3|4", "1|2|3|4|5|6", "1|2|3|4|5|6|7", "", "||||", "a|b|c|d|e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseUser(s)
		fields := strings.Split(s, "|")
		if ok != (len(fields) == 5 || len(fields) == 6) {
			t.Fatalf("parseUser(%q) ok = %v, with %d fields", s, ok, len(fields))
		}
		if !ok {
			return
		}
		if got.st != fields[2] {
			t.Fatalf("parseUser(%q) status %q, want %q", s, got.st, fields[2])
		}
		if got.legacy != (len(fields) == 5) || (!got.legacy && got.socks != fields[5]) {
			t.Fatalf("parseUser(%q) legacy %v, sockets %q", s, got.legacy, got.socks)
		}
	})
}
