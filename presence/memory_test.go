package presence_test

import (
	"context"
	"slices"
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

// The events of operations reach the sink in the order the operations ran:
// a typing start right after its expiry comes after the expiry's stop,
// even when the stop's delivery is slower than the start's (a black-box
// audit: delivered as the goroutines came, 4 of 120 sessions started
// within a few ms of the expiry showed the user not typing for the rest
// of the session).
func TestMemoryEventsInOrder(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var got []bool
	stopIn := make(chan struct{}, 1)
	sink := func(_ context.Context, evs []presence.Event) {
		for _, ev := range evs {
			if ev.Kind != presence.EventTyping {
				continue
			}
			if !ev.Typing {
				stopIn <- struct{}{}
				time.Sleep(200 * time.Millisecond) // a slow delivery
			}
			mu.Lock()
			got = append(got, ev.Typing)
			mu.Unlock()
		}
	}
	eng := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{
		NodeID: "n1", TypingTTL: time.Second, Now: clock, Sink: sink,
	})
	defer eng.Close()
	ctx := context.Background()
	connectJoin(t, eng, "s1", "alice", "c1")
	if err := eng.TypingStart(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	advance(time.Second)
	ticked := make(chan error, 1)
	go func() { ticked <- eng.Tick(ctx) }() // the expiry: its stop is delivered slowly
	<-stopIn
	if err := eng.TypingStart(ctx, "s1", "c1"); err != nil { // a new session
		t.Fatal(err)
	}
	if err := <-ticked; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{true, false, true}; !slices.Equal(got, want) {
		t.Fatalf("typing events %v, want %v", got, want)
	}
}
