package admin

import (
	"strings"
	"testing"
	"time"
)

func TestSessions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := newSessions("token-0123456789abcdef", time.Hour)
	s.now = func() time.Time { return now }
	v := s.issue()
	nonce, ok := s.check(v)
	if !ok || nonce == "" {
		t.Fatalf("a fresh session %q refused", v)
	}
	f := strings.Split(v, ".")
	for name, bad := range map[string]string{
		"empty":            "",
		"two parts":        f[0] + "." + f[1],
		"later expiry":     "1900000000." + f[1] + "." + f[2],
		"other nonce":      f[0] + ".00" + f[1][2:] + "." + f[2],
		"mac of the csrf":  f[0] + "." + f[1] + "." + s.csrf(f[1]),
		"other token's":    newSessions("another-token-0123456789", time.Hour).issue(),
		"non-numeric time": "x." + f[1] + "." + s.mac("session", "x", f[1]),
	} {
		if _, ok := s.check(bad); ok {
			t.Errorf("%s: %q accepted", name, bad)
		}
	}
	now = now.Add(time.Hour)
	if _, ok := s.check(v); ok {
		t.Error("an expired session accepted")
	}
}

func TestFailuresWindow(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newFailures(2, time.Minute)
	f.now = func() time.Time { return now }
	f.add("1.2.3.4")
	if _, blocked := f.blocked("1.2.3.4"); blocked {
		t.Fatal("blocked after one failure")
	}
	f.add("1.2.3.4")
	if wait, blocked := f.blocked("1.2.3.4"); !blocked || wait != time.Minute {
		t.Fatalf("after two: blocked %v for %v", blocked, wait)
	}
	if _, blocked := f.blocked("5.6.7.8"); blocked {
		t.Fatal("another address blocked")
	}
	now = now.Add(time.Minute)
	if _, blocked := f.blocked("1.2.3.4"); blocked {
		t.Fatal("still blocked after the window")
	}
	if len(f.byIP) != 0 {
		t.Fatalf("forgotten failures kept: %v", f.byIP)
	}
}
