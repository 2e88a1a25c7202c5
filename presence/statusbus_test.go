package presence_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
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

// After SENTINEL FAILOVER, status changes cross nodes again within about a
// second of the promotion: the bus subscribes again once the failover
// client's command connections reach the new master. Before, its
// subscription stayed on the demoted master, which answers PINGs and gets
// nothing published, until that had become a replica and caught up.
func TestRedisBusFollowsSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover: about 15 s")
	}
	replica, sc, addr := redistest.ReplicatedSentinel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subClient, pubClient := redistest.FailoverClient(t, addr), redistest.FailoverClient(t, addr)
	prefix := uniquePrefix(t, subClient)
	sub := presence.NewRedisBus(subClient, prefix, nil)
	sub.Watch("u1")
	pub := presence.NewRedisBus(pubClient, prefix, nil)
	got := make(chan presence.Event, 1024)
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, func(_ context.Context, e presence.Event) { got <- e }) }()
	// crossed publishes a status of u1 through pub every 50 ms until one
	// arrives, and says when, or fails the test after limit
	crossed := func(pub *presence.RedisBus, limit time.Duration) time.Time {
		t.Helper()
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
			// (a failure is Redis moving: the next publish may go)
			_ = pub.Publish(ctx, presence.Event{Kind: presence.EventStatus, UserID: "u1", Status: presence.Online, At: time.Now()})
			select {
			case <-got:
				return time.Now()
			case <-time.After(50 * time.Millisecond):
			}
		}
		t.Fatalf("no status change crossed in %v", limit)
		return time.Time{}
	}
	crossed(pub, 5*time.Second)
	// the command client's connections: a command of the watching node's
	// each second (a node's lease renewal)
	var pinging sync.WaitGroup
	pinging.Go(func() {
		for ctx.Err() == nil {
			_ = subClient.Ping(ctx).Err()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	defer pinging.Wait()
	promoted := redistest.FailOver(t, sc, replica)
	// published to the new master itself (a node of a failover client
	// may still publish to the old one for a moment, where the watching
	// bus would get it)
	newMaster := presence.NewRedisBus(replica.Client(), prefix, nil)
	for len(got) > 0 {
		<-got
	}
	after := crossed(newMaster, 15*time.Second).Sub(promoted)
	t.Logf("status changes crossed again %v after the promotion", after.Round(time.Millisecond))
	if after > 2500*time.Millisecond {
		t.Errorf("status changes crossed again %v after the promotion, want within 2.5 s", after)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A status change whose publish failed is published again once Redis
// answers, unless a later change of the user's went out first. Before
// 2026-12-07 it was lost, and subscribers kept the status before it (a
// black-box audit: a user shown offline for good after a Redis restart).
func TestRedisBusRetriesAFailedPublish(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	sub := presence.NewRedisBus(rdb, prefix, nil)
	sub.Watch("u1", "u2")
	var failing atomic.Bool
	pubClient := redistest.Client(t)
	pubClient.AddHook(redistest.FailHook{Fail: func(cmd redis.Cmder) bool { return failing.Load() && cmd.Name() == "publish" }})
	pub := presence.NewRedisBus(pubClient, prefix, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan presence.Event, 10)
	go func() { _ = sub.Run(ctx, func(_ context.Context, e presence.Event) { got <- e }) }()
	go func() { _ = pub.Run(ctx, func(context.Context, presence.Event) {}) }()
	ch := prefix + ":status:u2"
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, err := rdb.PubSubNumSub(ctx, ch).Result(); err == nil && n[ch] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watching bus never subscribed")
		}
	}
	at := time.UnixMilli(time.Now().UnixMilli())
	failing.Store(true)
	// u1: offline fails, then online goes out: the offline is not told later
	if err := pub.Publish(ctx, presence.Event{Kind: presence.EventStatus, UserID: "u1", Status: presence.Offline, At: at}); err == nil {
		t.Fatal("the failing publish succeeded")
	}
	// u2: online fails, and is told once Redis answers
	if err := pub.Publish(ctx, presence.Event{Kind: presence.EventStatus, UserID: "u2", Status: presence.Online, At: at}); err == nil {
		t.Fatal("the failing publish succeeded")
	}
	failing.Store(false)
	if err := pub.Publish(ctx, presence.Event{Kind: presence.EventStatus, UserID: "u1", Status: presence.Online, At: at.Add(time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	timeout := time.After(3500 * time.Millisecond)
	for done := false; !done; {
		select {
		case e := <-got:
			seen = append(seen, e.UserID+" "+string(e.Status))
		case <-timeout:
			done = true
		}
	}
	if want := []string{"u1 online", "u2 online"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("delivered %q, want %q", seen, want)
	}
}
