package presence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

func TestMemoryEngine(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) func(presence.Config) presence.Engine {
		m := presence.NewMemory()
		return func(cfg presence.Config) presence.Engine { return presence.NewMemoryEngine(m, cfg) }
	})
}

// With a short AwayAfter the memory engine's scans come often enough: a
// user idle for AwayAfter turns away within a twentieth of it, not up to
// a second late (the scan ran once a second: 1.9 s for an AwayAfter of 1s).
func TestMemoryAwayOnTimeWhenShort(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var away []time.Time
	sink := func(_ context.Context, evs []presence.Event) {
		for _, ev := range evs {
			if ev.Kind == presence.EventStatus && ev.Status == presence.Away {
				away = append(away, ev.At)
			}
		}
	}
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{
		NodeID: "n1", TTL: time.Minute, AwayAfter: time.Second, Now: clock, Sink: sink,
	})
	defer eng.Close()
	ctx := context.Background()
	if err := eng.Tick(ctx); err != nil { // a scan, then the user comes just after
		t.Fatal(err)
	}
	advance(100 * time.Millisecond)
	if err := eng.Connect(ctx, presence.Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	start := clock()
	for i := 0; i < 60 && len(away) == 0; i++ { // ticks 50 ms apart
		advance(50 * time.Millisecond)
		if err := eng.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(away) != 1 {
		t.Fatalf("away events %v, want one", away)
	}
	if late := away[0].Sub(start) - time.Second; late < 0 || late > 100*time.Millisecond {
		t.Errorf("away %s after the last activity, want 1s to 1.1s", away[0].Sub(start))
	}
}
