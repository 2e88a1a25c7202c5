package presence_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
)

// roundTrips counts the client's round trips to Redis: one per command sent
// alone, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

func TestRedisCosts(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1", TTL: 45 * time.Second}, presence.RedisConfig{Prefix: prefix})
	if err := eng.Tick(ctx); err != nil { // registers the node, loads scripts
		t.Fatal(err)
	}
	const k = 20
	if err := eng.Connect(ctx, presence.Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	for i := range k {
		if _, err := eng.Join(ctx, "s1", fmt.Sprintf("c%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	counter := &roundTrips{}
	rdb.AddHook(counter)
	// The first active heartbeat records activity: one round trip, however
	// many conversations. Within the activity window, and when idle, a
	// heartbeat costs none: the node's batched refresh keeps the entries.
	for i, tc := range []struct {
		active bool
		want   int64
	}{{true, 1}, {true, 0}, {false, 0}} {
		counter.n.Store(0)
		if err := eng.Heartbeat(ctx, "s1", tc.active); err != nil {
			t.Fatal(err)
		}
		if got := counter.n.Load(); got != tc.want {
			t.Errorf("heartbeat %d (active=%v) of a socket in %d conversations: %d round trips, want %d", i, tc.active, k, got, tc.want)
		}
	}

	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%d", i)
	}
	counter.n.Store(0)
	if _, err := eng.Users(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if got := counter.n.Load(); got != 1 {
		t.Errorf("status of 1000 users: %d round trips, want 1", got)
	}
}

func TestRedisRefreshBatches(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	const sockets = 1000
	eng, clock := refreshFleet(t, rdb, presence.RedisConfig{Prefix: prefix, RefreshBatch: 1000}, sockets, 50)
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	counter := &roundTrips{}
	rdb.AddHook(counter)
	clock.Add((16 * time.Second).Milliseconds()) // past TTL/3: the refresh is due
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	// 3,000 socket-conversation entries at 500 per pipeline: 6 round trips,
	// plus the tick's lease, dead-node check and timers (a handful).
	if got := counter.n.Load(); got > 12 {
		t.Errorf("refresh of %d sockets in 3 conversations: %d round trips, want ≤ 12", sockets, got)
	}
	score, err := rdb.ZScore(ctx, prefix+":{c:c7}:sk", "s7").Result()
	if err != nil || int64(score) != clock.Load() {
		t.Errorf("socket s7 in c7 not re-scored: %v %v, want %d", score, err, clock.Load())
	}
}

// refreshFleet connects sockets s0… (users u0…) to an engine on a test
// clock, each joining 3 of convs conversations c0….
func refreshFleet(t *testing.T, rdb redis.UniversalClient, rcfg presence.RedisConfig, sockets, convs int) (*presence.RedisEngine, *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	clock := &atomic.Int64{}
	clock.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli())
	cfg := presence.Config{NodeID: "n1", TTL: 45 * time.Second, MaxConversations: 3, Now: func() time.Time { return time.UnixMilli(clock.Load()) }}
	eng := presence.NewRedisEngine(rdb, cfg, rcfg)
	presence.SetRedisClock(eng, cfg.Now)
	for i := range sockets {
		sid := fmt.Sprintf("s%d", i)
		if err := eng.Connect(ctx, presence.Socket{ID: sid, UserID: fmt.Sprintf("u%d", i)}); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			if _, err := eng.Join(ctx, sid, fmt.Sprintf("c%d", (i+j)%convs)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return eng, clock
}

// The refresh is spread over its period: each tick re-scores a slice of
// the conversations, and within one period every entry is re-scored.
func TestRedisRefreshSpread(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	const sockets, convs = 300, 60
	eng, clock := refreshFleet(t, rdb, presence.RedisConfig{Prefix: prefix, RefreshEvery: 15 * time.Second}, sockets, convs)
	if err := eng.Tick(ctx); err != nil { // the first tick refreshes everything
		t.Fatal(err)
	}
	scores := func() map[string]int64 { // "conv/socket" → score
		out := map[string]int64{}
		for c := range convs {
			zs, err := rdb.ZRangeWithScores(ctx, fmt.Sprintf("%s:{c:c%d}:sk", prefix, c), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, z := range zs {
				out[fmt.Sprintf("c%d/%v", c, z.Member)] = int64(z.Score)
			}
		}
		return out
	}
	before := scores()
	if len(before) != sockets*3 {
		t.Fatalf("%d entries, want %d", len(before), sockets*3)
	}
	maxTick := 0
	for range 15 {
		prev := scores()
		clock.Add(time.Second.Milliseconds())
		if err := eng.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		moved := 0
		for k, v := range scores() {
			if v != prev[k] {
				moved++
			}
		}
		maxTick = max(maxTick, moved)
	}
	if maxTick > len(before)/3 {
		t.Errorf("one tick re-scored %d of %d entries: the refresh is not spread", maxTick, len(before))
	}
	for k, v := range scores() {
		if v <= before[k] {
			t.Fatalf("entry %s not re-scored within the refresh period", k)
		}
	}
}

// After Redis lost its script cache (a restart, a failover), pipelined
// scripts answer NOSCRIPT: the engine loads them and sends the same
// commands again.
func TestRedisScriptCacheLost(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1"}, presence.RedisConfig{Prefix: prefix})
	if err := eng.Connect(ctx, presence.Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := eng.Join(ctx, "s1", "c1")
	if err != nil {
		t.Fatalf("join after SCRIPT FLUSH: %v", err)
	}
	if len(res.Online) != 1 || res.Online[0].UserID != "alice" {
		t.Fatalf("roster after SCRIPT FLUSH: %+v", res)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Disconnect(ctx, "s1"); err != nil {
		t.Fatalf("disconnect after SCRIPT FLUSH: %v", err)
	}
}

// Redis restarted without persistence (or failed over to an empty
// replica): every key is gone while sockets stay connected. The node sees
// its lease missing at the next renewal and registers its sockets again.
func TestRedisDataLossResync(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1", Now: now}, presence.RedisConfig{Prefix: prefix})
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eng.Connect(ctx, presence.Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Join(ctx, "s1", "c1"); err != nil {
		t.Fatal(err)
	}
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if r, _ := eng.Roster(ctx, "c1"); len(r.Online) != 0 {
		t.Fatalf("keys deleted but roster %+v", r)
	}
	clock.Add(2000)
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := eng.Roster(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Online) != 1 || r.Online[0].UserID != "alice" {
		t.Fatalf("roster after resync %+v, want alice", r)
	}
	ups, err := eng.Users(ctx, []string{"alice"})
	if err != nil || ups[0].Status != presence.Online {
		t.Fatalf("alice after resync: %+v %v", ups, err)
	}
}

// Concurrent heartbeats of many users are group-committed: the activity
// records that arrive while one round trip is in flight go together in the
// next, and each user's record lands.
func TestRedisActivityGroupCommit(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1", TTL: 45 * time.Second, AwayAfter: time.Minute, Now: now}, presence.RedisConfig{Prefix: prefix})
	presence.SetRedisClock(eng, now)
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	const users = 400
	for i := range users {
		if err := eng.Connect(ctx, presence.Socket{ID: fmt.Sprintf("s%d", i), UserID: fmt.Sprintf("u%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(20_000) // the heartbeats come 20 s after the connections
	at := clock.Load()
	counter := &roundTrips{}
	rdb.AddHook(counter)
	var wg sync.WaitGroup
	errs := make(chan error, users)
	for i := range users {
		wg.Go(func() {
			if err := eng.Heartbeat(ctx, fmt.Sprintf("s%d", i), true); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := counter.n.Load(); got < 1 || got >= users/2 {
		t.Errorf("%d concurrent heartbeats of distinct users: %d round trips, want fewer than %d", users, got, users/2)
	}
	t.Logf("%d concurrent heartbeats: %d round trips", users, counter.n.Load())
	// every user's away timer moved to the heartbeat's time + AwayAfter
	for i := range users {
		score, err := rdb.ZScore(ctx, prefix+":{g}:due", fmt.Sprintf("a\tu%d", i)).Result()
		if err != nil {
			t.Fatalf("u%d: no away timer after its heartbeat: %v", i, err)
		}
		if got, want := int64(score), at+time.Minute.Milliseconds(); got != want {
			t.Fatalf("u%d: away timer at %d, want %d (the heartbeat's activity)", i, got, want)
		}
	}
}
