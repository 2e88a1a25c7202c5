package presence

import (
	"context"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/redistest"
)

// An alarm wakes its loop once the moment has come, never before, and
// keeps nothing after.
func TestAlarmRingsAtTheMoment(t *testing.T) {
	a := newAlarm(alarmStep, alarmGap)
	defer a.stop()
	start := time.Now()
	a.set(start.Add(30 * time.Millisecond))
	a.set(start.Add(30 * time.Millisecond)) // the same moment again: kept once
	a.set(start.Add(60 * time.Millisecond))
	if n := a.pending(); n != 2 {
		t.Fatalf("%d moments pending, want 2", n)
	}
	for _, moment := range []time.Duration{30 * time.Millisecond, 60 * time.Millisecond} {
		if moment > 30*time.Millisecond && a.pending() == 0 {
			// Both moments had come by the first wake (a loaded
			// machine): one wake covers them, by design.
			break
		}
		select {
		case <-a.C:
		case <-time.After(5 * time.Second):
			t.Fatalf("the alarm did not ring for %v", moment)
		}
		if d := time.Since(start); d < moment {
			t.Fatalf("rang after %v, before the moment (%v)", d, moment)
		}
	}
	if n := a.pending(); n != 0 {
		t.Fatalf("%d moments left after both rang", n)
	}
}

// Moments are rounded to the alarm's step, its wakes are at least its gap
// apart, and it keeps at most alarmMax moments: a storm of disconnects
// costs a bounded number of wakes.
func TestAlarmIsBounded(t *testing.T) {
	a := newAlarm(alarmStep, alarmGap)
	defer a.stop()
	base := time.Now().Add(time.Hour)
	for i := range 1000 {
		a.set(base.Add(time.Duration(i) * 100 * time.Microsecond)) // 100 ms of moments, 0.1 ms apart
	}
	if n, want := a.pending(), int(100*time.Millisecond/alarmStep); n > want+1 {
		t.Fatalf("%d moments for 100 ms of disconnects, want at most %d (one per %v)", n, want+1, alarmStep)
	}
	for i := range 2 * alarmMax {
		a.set(base.Add(time.Duration(i) * time.Second))
	}
	if n := a.pending(); n != alarmMax {
		t.Fatalf("%d moments kept, want the bound %d", n, alarmMax)
	}
	a.stop()
	if n := a.pending(); n != 0 {
		t.Fatalf("%d moments kept after stop", n)
	}

	// 100 moments 1 ms apart, from now: at most one wake per gap.
	b := newAlarm(alarmStep, alarmGap)
	defer b.stop()
	const storm = 100 * time.Millisecond
	start := time.Now()
	for i := range int(storm / time.Millisecond) {
		b.set(start.Add(time.Duration(i) * time.Millisecond))
	}
	wakes := 0
	for b.pending() > 0 || wakes == 0 {
		select {
		case <-b.C:
			wakes++
		case <-time.After(5 * time.Second):
			t.Fatalf("no wake for 5 s, %d moments pending", b.pending())
		}
	}
	if elapsed, max := time.Since(start), int(time.Since(start)/alarmGap)+1; wakes > max {
		t.Fatalf("%d wakes in %v, want at most %d (one per %v)", wakes, elapsed, max, alarmGap)
	}
}

// A disconnect with a flap grace sets the Redis engine's alarm for the
// grace's end.
func TestRedisDisconnectSetsAlarm(t *testing.T) {
	ctx := context.Background()
	e := alarmEngine(t, Config{NodeID: "n1", FlapGrace: time.Minute})
	before := time.Now()
	if err := e.Disconnect(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	oneMoment(t, e.alarm, before, time.Minute)
}

// alarmEngine is an engine of cfg on a test prefix, with socket s1 of
// alice connected; its alarms stop when t ends.
func alarmEngine(t *testing.T, cfg Config) *RedisEngine {
	t.Helper()
	rdb := redistest.Client(t)
	e := NewRedisEngine(rdb, cfg, RedisConfig{Prefix: redistest.Prefix(t, rdb, "alarm")})
	t.Cleanup(func() {
		e.alarm.stop()
		e.typingAlarm.stop()
	})
	if err := e.Connect(context.Background(), Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// oneMoment fails unless a holds one moment, d after a time between
// before and now, rounded up to a's step.
func oneMoment(t *testing.T, a *alarm, before time.Time, d time.Duration) {
	t.Helper()
	a.mu.Lock()
	at := append([]time.Time(nil), a.at...)
	a.mu.Unlock()
	if len(at) != 1 || at[0].Before(before.Add(d)) || at[0].After(time.Now().Add(d+a.step)) {
		t.Fatalf("alarm moments %v, want one at %v + %v", at, before, d)
	}
}

// A typing start sets the Redis engine's typing alarm for the entry's
// expiry, so that the stop goes out then rather than with the expiries
// of a whole tick.
func TestRedisTypingStartSetsAlarm(t *testing.T) {
	ctx := context.Background()
	e := alarmEngine(t, Config{NodeID: "n1", TypingTTL: time.Minute})
	if _, err := e.Join(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := e.TypingStart(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	oneMoment(t, e.typingAlarm, before, time.Minute) // the entry's expiry
	if n := e.alarm.pending(); n != 0 {
		t.Fatalf("%d grace moments after a typing start, want none", n)
	}
	// A start a few ms later keeps a moment of its own: its stop goes out
	// at its expiry, not with the first one's (until 2026-12-08 both were
	// rounded up to one 50 ms step, and their stops went out together).
	if err := e.Connect(ctx, Socket{ID: "s2", UserID: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Join(ctx, "s2", "c1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * typingAlarmStep)
	if err := e.TypingStart(ctx, "s2", "c1"); err != nil {
		t.Fatal(err)
	}
	if n := e.typingAlarm.pending(); n != 2 {
		t.Fatalf("%d typing alarm moments for two starts %v apart, want 2", n, 3*typingAlarmStep)
	}
	if e.typingAlarm.gap != typingAlarmGap {
		t.Fatalf("typing alarm gap %v, want %v", e.typingAlarm.gap, typingAlarmGap)
	}
}

func (a *alarm) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// The typing alarm keeps a moment for every start of a busy node: 2,000
// starts a second for a TTL of 5 s fit its steps under alarmMax, so none
// of their expiries waits for the tick.
func TestTypingAlarmKeepsABusyNodesMoments(t *testing.T) {
	a := newAlarm(typingAlarmStep, typingAlarmGap)
	defer a.stop()
	start := time.Now().Add(time.Hour)
	ttl := 5 * time.Second
	for i := range 10_000 {
		a.set(start.Add(time.Duration(i) * ttl / 10_000))
	}
	if n, limit := a.pending(), int(ttl/typingAlarmStep)+1; n > limit || n >= alarmMax {
		t.Fatalf("%d moments pending, want at most %d and under alarmMax %d", n, limit, alarmMax)
	}
}
