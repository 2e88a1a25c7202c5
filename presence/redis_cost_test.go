package presence_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/presence"
)

// redisCounter is a client hook that counts what the client sends to Redis:
// one per command sent alone, and per pipeline one (round trips) or one per
// command in it (commands; a script is one).
type redisCounter struct {
	n        atomic.Int64
	commands bool
}

// roundTrips counts the client's round trips to Redis.
func roundTrips() *redisCounter { return &redisCounter{} }

// commands counts the client's commands to Redis.
func commands() *redisCounter { return &redisCounter{commands: true} }

func (r *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if r.commands {
			r.n.Add(int64(len(cmds)))
		} else {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func TestRedisCosts(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	clock := fakeclock.New(time.Now())
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1", TTL: 45 * time.Second, Now: clock.Now}, presence.RedisConfig{Prefix: prefix})
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
	counter := roundTrips()
	rdb.AddHook(counter)
	clock.Advance(31 * time.Second) // past the activity the connect recorded (activityEvery 30 s)
	// The first active heartbeat records activity: one round trip, however
	// many conversations. Within the activity window, and when idle, a
	// heartbeat costs none: the entries live as long as the node's lease.
	for i, tc := range []struct {
		active bool
		want   int64
	}{{true, 1}, {true, 0}, {false, 0}} {
		counter.n.Store(0)
		if err := eng.Heartbeat(ctx, "s1", tc.active); err != nil {
			t.Fatal(err)
		}
		eng.Settle() // the record goes in the background
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

// fleet connects sockets s0… (users u0…) to an engine, each joining 3 of
// convs conversations c0….
func fleet(t *testing.T, eng *presence.RedisEngine, sockets, convs int) {
	t.Helper()
	ctx := context.Background()
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
}

// Idle users cost Redis nothing: a live node's entries live as long as its
// lease, so what an idle node sends (lease, dead-node check, timers, the
// reconciliation of its registry) grows with nodes, not users. Target:
// at most 0.02 commands per online user per second. (With every entry
// re-scored every TTL/3 it was about 0.45; with a read of the timers on
// every tick, until 2026-12-07, 0.046.)
func TestRedisIdleCost(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	const sockets, window = 500, 4 * time.Second
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1", MaxConversations: 3}, presence.RedisConfig{Prefix: prefix})
	fleet(t, eng, sockets, 50)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx) }()
	time.Sleep(time.Second) // the first tick's work done
	counter := commands()
	rdb.AddHook(counter)
	time.Sleep(window)
	cancel()
	<-done
	n := counter.n.Load()
	per := float64(n) / float64(sockets) / window.Seconds()
	t.Logf("%d idle sockets in 3 conversations each: %d commands in %s, %.4f per user per second", sockets, n, window, per)
	if per > 0.02 {
		t.Errorf("idle cost %.4f commands per user per second, want ≤ 0.02", per)
	}
	// the entries are all still there
	if n, err := rdb.HLen(context.Background(), prefix+":{c:c7}:m").Result(); err != nil || n != 3*sockets/50 {
		t.Errorf("conversation c7 holds %d members (%v), want %d", n, err, 3*sockets/50)
	}
}

// A stale entry of a live node (its socket's leave never reached Redis)
// is removed by the node's reconciliation within TTL, as timed out; the
// node's live sockets stay.
func TestRedisGhostEntry(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix, clock, rec := f.rdb, f.prefix, f.clock, f.rec
	ctx := context.Background()
	const ttl = 10 * time.Second
	eng := f.node(presence.Config{NodeID: "n1", TTL: ttl})
	connectJoin(t, eng, "a1", "alice", "c1")
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	// The ghost: socket g1 of user gus in c1, registered by this node
	// instance, which does not have it.
	holder, err := rdb.HGet(ctx, prefix+":{g}:holder", "n1").Result()
	if err != nil {
		t.Fatal(err)
	}
	token := strings.Split(holder, "|")[0]
	at := strconv.FormatInt(clock.Now().UnixMilli(), 10)
	c := prefix + ":{c:c1}:"
	pipe := rdb.TxPipeline()
	pipe.HSet(ctx, presence.RegistryBucketKey(prefix+":{n:n1}:"+token+":socks", "g1", presence.RegMinBuckets), "g1", "gus\tc1")
	pipe.HSet(ctx, c+"m", "gus", "1|"+at+"|0|0|g1")
	pipe.HSet(ctx, prefix+":{g}:users", "gus", "1|"+at+"|on|0|0|g1")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	rec.Take()
	start := clock.Now()
	for rosterHas(t, eng, "c1", "gus") {
		if clock.Now().Sub(start) > ttl {
			t.Fatalf("ghost entry still there after TTL (%s)", ttl)
		}
		clock.Advance(250 * time.Millisecond)
		if err := eng.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("ghost removed after %s", clock.Now().Sub(start))
	got := rec.Take()
	slices.Sort(got)
	if want := []string{"leave c1 gus timeout", "status gus offline"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if got := rosterUsers(t, eng, "c1"); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("roster %v, want alice", got)
	}
	if ps, err := eng.Users(ctx, []string{"gus", "alice"}); err != nil || ps[0].Status != presence.Offline || ps[1].Status != presence.Online {
		t.Fatalf("statuses %+v %v", ps, err)
	}
}

func rosterHas(t *testing.T, eng presence.Engine, conv, user string) bool {
	t.Helper()
	return slices.Contains(rosterUsers(t, eng, conv), user)
}

// After Redis lost its script cache (a restart, a failover), pipelined
// scripts answer NOSCRIPT: the engine loads them and sends the same
// commands again. On a server of its own: SCRIPT FLUSH on the shared one
// would cost the tests running beside it a round trip they count.
func TestRedisScriptCacheLost(t *testing.T) {
	rdb := redistest.StartProc(t).Client()
	prefix := "flush"
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
	connectJoin(t, eng, "s1", "alice", "c1")
	loseData(rdb, prefix)
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
	counter := roundTrips()
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
	eng.Settle()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := counter.n.Load(); got < 1 || got >= users/2 {
		t.Errorf("%d concurrent heartbeats of distinct users: %d round trips, want fewer than %d", users, got, users/2)
	}
	t.Logf("%d concurrent heartbeats: %d round trips", users, counter.n.Load())
	// every user's activity is the heartbeat's time
	for i := range users {
		rec, err := rdb.HGet(ctx, prefix+":{g}:users", fmt.Sprintf("u%d", i)).Result()
		if err != nil {
			t.Fatalf("u%d: no record after its heartbeat: %v", i, err)
		}
		if f := strings.Split(rec, "|"); len(f) < 2 || f[1] != strconv.FormatInt(at, 10) {
			t.Fatalf("u%d: record %q, want activity %d (the heartbeat's)", i, rec, at)
		}
	}
}
