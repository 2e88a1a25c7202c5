package handlers

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// sent is one emit recorded by a test's Rooms.
type sent struct {
	Room, Event string
	Payload     string // JSON
}

func recordingRooms(t *testing.T) (*Rooms, func() []sent) {
	t.Helper()
	r := NewRooms(0, slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	var got []sent
	r.send = func(room socket.Room, _ string, event string, payload any) {
		b, err := json.Marshal(payload)
		if err != nil {
			t.Errorf("payload of %s: %v", event, err)
		}
		mu.Lock()
		got = append(got, sent{string(room), event, string(b)})
		mu.Unlock()
	}
	return r, func() []sent { mu.Lock(); defer mu.Unlock(); return append([]sent(nil), got...) }
}

// fixedSettings answers from a map; slow, when set, holds each lookup.
type fixedSettings struct {
	v    map[string]store.Visibility
	slow time.Duration
}

func (f fixedSettings) Lookup(ctx context.Context, ids []string) map[string]store.Visibility {
	if f.slow > 0 {
		select {
		case <-time.After(f.slow):
		case <-ctx.Done():
		}
	}
	out := map[string]store.Visibility{}
	for _, id := range ids {
		if v, ok := f.v[id]; ok {
			out[id] = v
		}
	}
	return out
}

func (fixedSettings) Set(string, store.Visibility) {}
func (fixedSettings) Reload()                      {}

// Room events carry `at` rounded down to the minute, and null for a user
// whose setting is not everyone (or not known): CONTRACT §1.
func TestRoomEventTimes(t *testing.T) {
	r, got := recordingRooms(t)
	r.UseSettings(fixedSettings{v: map[string]store.Visibility{"e": store.Everyone, "c": store.Contacts, "n": store.Nobody}})
	at := time.Date(2026, 11, 30, 11, 47, 59, 999_000_000, time.UTC)
	var events []presence.Event
	for _, u := range []string{"e", "c", "n", "unknown"} {
		events = append(events,
			presence.Event{Kind: presence.EventJoin, ConversationID: "c1", UserID: u, At: at},
			presence.Event{Kind: presence.EventLeave, ConversationID: "c1", UserID: u, At: at, Reason: presence.ReasonTimeout})
	}
	r.Sink()(context.Background(), events)
	want := []sent{
		{"conversation:c1", "presence:join", `{"conversationId":"c1","userId":"e","at":"2026-11-30T11:47:00.000Z"}`},
		{"conversation:c1", "presence:leave", `{"conversationId":"c1","userId":"e","at":"2026-11-30T11:47:00.000Z","reason":"timeout"}`},
		{"conversation:c1", "presence:join", `{"conversationId":"c1","userId":"c","at":null}`},
		{"conversation:c1", "presence:leave", `{"conversationId":"c1","userId":"c","at":null,"reason":"timeout"}`},
		{"conversation:c1", "presence:join", `{"conversationId":"c1","userId":"n","at":null}`},
		{"conversation:c1", "presence:leave", `{"conversationId":"c1","userId":"n","at":null,"reason":"timeout"}`},
		{"conversation:c1", "presence:join", `{"conversationId":"c1","userId":"unknown","at":null}`},
		{"conversation:c1", "presence:leave", `{"conversationId":"c1","userId":"unknown","at":null,"reason":"timeout"}`},
	}
	g := got()
	if len(g) != len(want) {
		t.Fatalf("got %d emits, want %d: %+v", len(g), len(want), g)
	}
	for i := range want {
		if g[i] != want[i] {
			t.Errorf("emit %d:\n got  %+v\n want %+v", i, g[i], want[i])
		}
	}

	ms := r.Members(context.Background(), []presence.Member{
		{UserID: "e", Status: presence.Online, Since: at},
		{UserID: "n", Status: presence.Away, Since: at},
	})
	b, _ := json.Marshal(ms)
	if w := `[{"userId":"e","status":"online","since":"2026-11-30T11:47:00.000Z"},{"userId":"n","status":"away","since":null}]`; string(b) != w {
		t.Errorf("roster:\n got  %s\n want %s", b, w)
	}
}

// A stalled store delays a batch of room events once, by the settings
// cache's bound, not once per event nor for the store's seconds.
func TestRoomEventsDoNotWaitOnSlowStore(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	r, got := recordingRooms(t)
	r.UseSettings(lastseen.NewSettings(blockedStore{hold}, lastseen.SettingsConfig{Wait: 50 * time.Millisecond}))
	var events []presence.Event
	for i := range 200 {
		events = append(events, presence.Event{Kind: presence.EventLeave, ConversationID: "c1", UserID: "u" + string(rune('a'+i%26)) + string(rune('a'+i/26)), At: time.Now(), Reason: "timeout"})
	}
	start := time.Now()
	r.Sink()(context.Background(), events)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("200 leaves took %v on a stalled store", d)
	}
	if g := got(); len(g) != 200 || g[0].Payload != `{"conversationId":"c1","userId":"uaa","at":null,"reason":"timeout"}` {
		t.Fatalf("%d emits; first %+v", len(g), g[0])
	}
}

type blockedStore struct{ hold chan struct{} }

func (b blockedStore) Privacy(ctx context.Context, _ []string) (map[string]store.Visibility, error) {
	select {
	case <-b.hold:
	case <-ctx.Done():
	}
	return nil, context.Canceled
}
