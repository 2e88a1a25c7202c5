package presence_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/chantest"
	"github.com/presenced/presenced/presence"
)

// A join returns without waiting for a slow delivery of its events.
func TestAsyncSinkJoinDoesNotWaitForDelivery(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []presence.Event
	slow := func(_ context.Context, ev []presence.Event) {
		<-release
		mu.Lock()
		got = append(got, ev...)
		mu.Unlock()
	}
	async := presence.NewAsyncSink(slow, 4, 16)
	e := presence.NewMemoryEngine(presence.NewMemory(), presence.Config{NodeID: "n1", Sink: async.Sink()})
	ctx := context.Background()
	for _, s := range []presence.Socket{{ID: "s1", UserID: "alice"}, {ID: "s2", UserID: "bob"}} {
		if err := e.Connect(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Join(ctx, "s1", "c1")
		if err == nil {
			_, err = e.Join(ctx, "s2", "c1")
		}
		done <- err
	}()
	chantest.NoError(t, done, 2*time.Second, "the joins (which must not wait for the sink)")
	close(release)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := async.Close(cctx); err != nil {
		t.Fatal(err)
	}
	joins := 0
	for _, ev := range got {
		if ev.Kind == presence.EventJoin && ev.ConversationID == "c1" {
			joins++
		}
	}
	if joins != 2 {
		t.Fatalf("delivered %d joins of c1 after Close, want 2: %+v", joins, got)
	}
}

// Events of one conversation, and of one user's status, arrive in the
// order they were handed over, whatever the other queues do.
func TestAsyncSinkKeepsOrderPerConversation(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]int{}
	sink := func(_ context.Context, ev []presence.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range ev {
			key := e.ConversationID
			if key == "" {
				key = "user:" + e.UserID
			}
			var n int
			if _, err := fmt.Sscan(e.Reason, &n); err != nil {
				t.Errorf("reason %q: %v", e.Reason, err)
			}
			seen[key] = append(seen[key], n)
		}
	}
	async := presence.NewAsyncSink(sink, 3, 2) // small queues: senders wait
	var wg sync.WaitGroup
	const per = 200
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := fmt.Sprintf("c%d", g)
			for i := range per {
				// a batch mixing this conversation with a status event
				async.Sink()(context.Background(), []presence.Event{
					{Kind: presence.EventTyping, ConversationID: conv, Reason: fmt.Sprint(i)},
					{Kind: presence.EventStatus, UserID: conv, Reason: fmt.Sprint(i)},
				})
			}
		}()
	}
	wg.Wait()
	if err := async.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 8 {
		t.Fatalf("keys %d, want 8", len(seen))
	}
	for key, ns := range seen {
		if len(ns) != per {
			t.Fatalf("%s: %d events, want %d", key, len(ns), per)
		}
		for i, n := range ns {
			if n != i {
				t.Fatalf("%s: event %d is #%d", key, i, n)
			}
		}
	}
	// after Close, delivery is synchronous
	before := len(seen["c9"])
	async.Sink()(context.Background(), []presence.Event{{Kind: presence.EventTyping, ConversationID: "c9", Reason: "0"}})
	if len(seen["c9"]) != before+1 {
		t.Fatal("an event after Close was not delivered at once")
	}
}
