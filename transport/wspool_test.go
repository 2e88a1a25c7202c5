package transport

import (
	"sync"
	"testing"
	"time"
)

type fakeDirect struct {
	block chan struct{}
	mu    sync.Mutex
	seen  map[*any][]string
}

func (f *fakeDirect) DirectEvent(slot *any, _ func() string, args []any, _ Replier) bool {
	name, _ := args[0].(string)
	if name == "block" {
		<-f.block
	}
	f.mu.Lock()
	f.seen[slot] = append(f.seen[slot], name)
	f.mu.Unlock()
	return name != "decline"
}

func newPoolTransport(d Dispatcher) *wsTransport {
	return &wsTransport{direct: d, jobDone: make(chan bool, 1)}
}

// A handler stuck on its backend holds its own socket only; the pool
// shrinks back once the work is done; each socket's events run in order.
func TestDirectPool(t *testing.T) {
	d := &fakeDirect{block: make(chan struct{}), seen: map[*any][]string{}}
	p := newDirectPool(nil)
	// more stuck handlers than spare workers: the watcher must add workers
	const stuckN = 2 * directSpare
	stuckDone := make(chan bool, stuckN)
	for range stuckN {
		stuck := newPoolTransport(d)
		go func() { stuckDone <- p.run(stuck, []byte(`42["block"]`)) }()
	}

	const sockets, events = 200, 20
	ts := make([]*wsTransport, sockets)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range ts {
		ts[i] = newPoolTransport(d)
		wg.Add(1)
		go func(w *wsTransport) {
			defer wg.Done()
			for j := range events {
				name := "e" + string(rune('a'+j))
				if j == events-1 {
					name = "decline"
				}
				if got := p.run(w, []byte(`42["`+name+`",{}]`)); got != (name != "decline") {
					t.Errorf("run(%s) = %v", name, got)
				}
			}
		}(ts[i])
	}
	wg.Wait()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%d events took %v behind one stuck handler", sockets*events, d)
	}
	for _, w := range ts {
		got := d.seen[&w.slot]
		if len(got) != events || got[0] != "ea" || got[events-2] != "e"+string(rune('a'+events-2)) {
			t.Fatalf("a socket's events ran as %v", got)
		}
		for j := 1; j < events-1; j++ {
			if got[j] <= got[j-1] {
				t.Fatalf("a socket's events ran out of order: %v", got)
			}
		}
	}
	for deadline := time.Now().Add(2 * time.Second); p.inFlight.Load() != stuckN && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := p.inFlight.Load(); n != stuckN {
		t.Fatalf("%d events in flight with %d stuck, want %d (the connect gate narrows on it)", n, stuckN, stuckN)
	}
	close(d.block)
	for range stuckN {
		if !<-stuckDone {
			t.Fatal("a stuck event's result was lost")
		}
	}
	if n := p.inFlight.Load(); n != 0 {
		t.Fatalf("%d events in flight after all ran, want 0", n)
	}
	// workers beyond the spare ones leave as they finish
	deadline := time.Now().Add(2 * time.Second)
	for p.workers.Load() > directSpare && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := p.workers.Load(); n > directSpare {
		t.Fatalf("%d workers left after the burst, want at most %d", n, directSpare)
	}
}

// The inline events are found by their name only, with or without an ack
// id, and nothing else is taken for them.
func TestDirectPoolInlines(t *testing.T) {
	p := newDirectPool([]string{"heartbeat", `odd"name`})
	for msg, want := range map[string]bool{
		`42["heartbeat"]`:                true,
		`4217["heartbeat",{"a":1}]`:      true,
		`42["odd\"name"]`:                true,
		`42["heartbeats"]`:               false,
		`42["typing:start","heartbeat"]`: false,
		`42[ "heartbeat"]`:               false, // not as the client writes it: the pool's way
		`42`:                             false,
		`421`:                            false,
	} {
		if got := p.inlines([]byte(msg)); got != want {
			t.Errorf("inlines(%s) = %v, want %v", msg, got, want)
		}
	}
	if newDirectPool(nil).inlines([]byte(`42["heartbeat"]`)) {
		t.Error("no inline events: heartbeat inlined")
	}
}
