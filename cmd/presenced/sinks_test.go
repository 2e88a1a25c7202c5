package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
)

// Room events reach the rooms before the engine's operation returns (so a
// socket that joins afterwards is not told of a member its roster already
// lists); status events wait for the async workers, which take them to the
// rooms and the records, and nothing else.
func TestEventSinksRoomEventsAtOnce(t *testing.T) {
	var mu sync.Mutex
	var rooms, records []presence.EventKind
	hold := make(chan struct{})
	sink, async := eventSinks(func(_ context.Context, ev []presence.Event) {
		if ev[0].Kind == presence.EventStatus {
			<-hold // the workers' status events wait too, or they may land before the check below
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range ev {
			rooms = append(rooms, e.Kind)
		}
	}, func(_ context.Context, ev []presence.Event) {
		<-hold // the records are slow
		mu.Lock()
		defer mu.Unlock()
		for _, e := range ev {
			records = append(records, e.Kind)
		}
	})
	sink(context.Background(), []presence.Event{
		{Kind: presence.EventJoin, ConversationID: "c1", UserID: "u1"},
		{Kind: presence.EventStatus, UserID: "u1"},
		{Kind: presence.EventTyping, ConversationID: "c1", UserID: "u1"},
	})
	mu.Lock()
	got := append([]presence.EventKind(nil), rooms...)
	mu.Unlock()
	if len(got) != 2 || got[0] != presence.EventJoin || got[1] != presence.EventTyping {
		t.Fatalf("room events when the operation returned: %v, want join and typing", got)
	}
	close(hold)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := async.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rooms) != 3 || rooms[2] != presence.EventStatus {
		t.Fatalf("room sink got %v, want the status event last, from the workers", rooms)
	}
	if len(records) != 1 || records[0] != presence.EventStatus {
		t.Fatalf("records got %v, want the status event alone", records)
	}
}

// Inside an operation that holds its events for its reply, the room
// events wait for AfterReply.Run; status events and records still go to
// the workers at once.
func TestEventSinksRoomEventsAfterReply(t *testing.T) {
	var mu sync.Mutex
	var rooms []presence.EventKind
	sink, async := eventSinks(func(_ context.Context, ev []presence.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range ev {
			rooms = append(rooms, e.Kind)
		}
	}, func(context.Context, []presence.Event) {})
	roomsNow := func() []presence.EventKind {
		mu.Lock()
		defer mu.Unlock()
		return append([]presence.EventKind(nil), rooms...)
	}
	ctx, after := presence.WithAfterReply(context.Background())
	sink(ctx, []presence.Event{{Kind: presence.EventJoin, ConversationID: "c1", UserID: "u1"}})
	if got := roomsNow(); len(got) != 0 {
		t.Fatalf("room events before the reply: %v, want none", got)
	}
	after.Run()
	if got := roomsNow(); len(got) != 1 || got[0] != presence.EventJoin {
		t.Fatalf("room events after the reply: %v, want the join", got)
	}
	after.Run() // once
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := async.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if got := roomsNow(); len(got) != 1 {
		t.Fatalf("room events after a second Run: %v, want the join once", got)
	}
}
