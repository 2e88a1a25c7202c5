package presence_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/presenced/presenced/presence"
)

// TestRedisBusBurst publishes a burst of status changes at once from one
// node and checks that the node watching those users gets each of them,
// intact.
func TestRedisBusBurst(t *testing.T) {
	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("u", i)
	}
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	sub := presence.NewRedisBus(rdb, prefix, nil) // the node watching the users
	sub.Watch(ids...)
	pub := presence.NewRedisBus(rdb, prefix, nil) // the node where they connect
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan presence.Event, n)
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, func(_ context.Context, e presence.Event) { got <- e }) }()
	first, last := prefix+":status:"+ids[0], prefix+":status:"+ids[n-1]
	deadline := time.Now().Add(5 * time.Second)
	for {
		counts, err := rdb.PubSubNumSub(ctx, first, last).Result()
		if err == nil && counts[first] == 1 && counts[last] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watching bus never subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	at := time.UnixMilli(time.Now().UnixMilli())
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := presence.Event{Kind: presence.EventStatus, UserID: id, Status: presence.Online, At: at.Add(time.Duration(i) * time.Millisecond)}
			if i%2 == 1 {
				e.Status, e.LastSeen = presence.Offline, e.At
			}
			if err := pub.Publish(ctx, e); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for range n {
		select {
		case e := <-got:
			var i int
			if _, err := fmt.Sscanf(e.UserID, "u%d", &i); err != nil || seen[e.UserID] {
				t.Fatalf("unexpected or repeated event %+v", e)
			}
			seen[e.UserID] = true
			want := at.Add(time.Duration(i) * time.Millisecond)
			wantStatus, wantLast := presence.Online, time.Time{}
			if i%2 == 1 {
				wantStatus, wantLast = presence.Offline, want
			}
			if e.Status != wantStatus || !e.At.Equal(want) || !e.LastSeen.Equal(wantLast) {
				t.Errorf("%s: %s at %v, last seen %v; want %s at %v, last seen %v", e.UserID, e.Status, e.At, e.LastSeen, wantStatus, want, wantLast)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d status changes arrived", len(seen), n)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
