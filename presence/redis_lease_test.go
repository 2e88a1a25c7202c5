package presence_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

// privateRedis starts a redis-server of this test's own (for faults that
// must not touch the shared server), killed at the end; restart kills it
// and starts it again on the same port after a pause.
func privateRedis(tb testing.TB, args ...string) (rdb redis.UniversalClient, addr string, restart func(pause time.Duration)) {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Skip("redis-server not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	var mu sync.Mutex
	var cmd *exec.Cmd
	start := func() {
		mu.Lock()
		defer mu.Unlock()
		cmd = exec.Command(bin, append([]string{"--port", fmt.Sprint(port), "--save", "", "--daemonize", "no"}, args...)...)
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
	}
	kill := func() {
		mu.Lock()
		defer mu.Unlock()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	start()
	tb.Cleanup(kill)
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	up := func() {
		for i := 0; c.Ping(context.Background()).Err() != nil; i++ {
			if i > 200 {
				tb.Fatal("private redis-server did not start")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	up()
	return c, addr, func(pause time.Duration) {
		kill()
		time.Sleep(pause)
		start()
		up()
	}
}

// runNode runs an engine's loop until the returned stop is called (a crash:
// no Close, the lease is left to lapse).
func runNode(eng *presence.RedisEngine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx) }()
	return func() { cancel(); <-done }
}

func rosterUsers(t *testing.T, eng presence.Engine, conv string) []string {
	t.Helper()
	r, err := eng.Roster(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range r.Online {
		out = append(out, m.UserID)
	}
	slices.Sort(out)
	return out
}

// Leases are kept on Redis's clock: two nodes whose clocks are 6 s apart
// (twice the lease) do not reap each other, and a node that stops
// renewing is still reaped within the lease and a renewal period.
func TestRedisClockSkew(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	const lease = 3 * time.Second // less than the skew; enough not to lapse on a loaded machine
	rec := &enginetest.Recorder{}
	node := func(id string, skew time.Duration) *presence.RedisEngine {
		return presence.NewRedisEngine(rdb, presence.Config{NodeID: id, LeaseTTL: lease, Sink: rec.Sink(),
			Now: func() time.Time { return time.Now().Add(skew) }}, presence.RedisConfig{Prefix: prefix})
	}
	n1, n2 := node("n1", 0), node("n2", 6*time.Second)
	connectJoin(t, n1, "a1", "alice", "c1")
	connectJoin(t, n2, "b1", "bob", "c1")
	stop1, stop2 := runNode(n1), runNode(n2)
	defer stop1()
	time.Sleep(2 * lease)
	if got := rosterUsers(t, n1, "c1"); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Fatalf("after %s of skewed clocks the roster is %v, want alice and bob", 2*lease, got)
	}
	for _, e := range rec.Take() {
		if strings.HasPrefix(e, "leave") || strings.HasSuffix(e, "offline") {
			t.Fatalf("event %q: a live node was reaped", e)
		}
	}
	if n := testutil.ToFloat64(n1.Collectors()[0]) + testutil.ToFloat64(n2.Collectors()[0]); n != 0 {
		t.Fatalf("%v nodes reaped, want none", n)
	}

	stop2() // n2 dies
	dead := time.Now()
	for !slices.Equal(rosterUsers(t, n1, "c1"), []string{"alice"}) {
		if time.Since(dead) > lease+2*time.Second {
			t.Fatalf("dead node not reaped within %s", lease+2*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("dead node reaped %s after its last renewal at most", time.Since(dead))
	// counted once the whole node is done, a moment after its last leave
	for deadline := time.Now().Add(2 * time.Second); testutil.ToFloat64(n1.Collectors()[0]) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := testutil.ToFloat64(n1.Collectors()[0]); n != 1 {
		t.Fatalf("presenced_nodes_reaped_total %v, want 1", n)
	}
	if got := rec.Take(); !slices.Contains(got, "leave c1 bob timeout") || !slices.Contains(got, "status bob offline") {
		t.Fatalf("events after the reap %q", got)
	}
}

// stalledFleet starts three nodes on rdb, each with one user in c1, waits
// a moment, runs fault (a stall or an outage of Redis), waits more than a
// lease, and checks that nobody was reaped: the roster is whole, no leave
// or offline status was announced, and no node counted a reap.
func stalledFleet(t *testing.T, rdb redis.UniversalClient, prefix, what string, fault func()) {
	t.Helper()
	ctx := context.Background()
	rec := &enginetest.Recorder{}
	var engs []*presence.RedisEngine
	for i := range 3 {
		eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: fmt.Sprintf("n%d", i), Sink: rec.Sink()}, presence.RedisConfig{Prefix: prefix})
		sid, user := fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i)
		if err := eng.Connect(ctx, presence.Socket{ID: sid, UserID: user}); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Join(ctx, sid, "c1"); err != nil {
			t.Fatal(err)
		}
		stop := runNode(eng)
		defer stop()
		engs = append(engs, eng)
	}
	rec.Take()
	time.Sleep(1500 * time.Millisecond)
	fault()
	time.Sleep(7 * time.Second) // more than a lease after the fault
	if got := rosterUsers(t, engs[0], "c1"); !slices.Equal(got, []string{"u0", "u1", "u2"}) {
		t.Fatalf("roster after %s: %v, want every user", what, got)
	}
	for _, e := range rec.Take() {
		if strings.HasPrefix(e, "leave") || strings.HasSuffix(e, "offline") {
			t.Fatalf("event %q after %s: a live node was reaped", e, what)
		}
	}
	for i, eng := range engs {
		if n := testutil.ToFloat64(eng.Collectors()[0]); n != 0 {
			t.Fatalf("node %d reaped %v nodes after %s", i, n, what)
		}
	}
}

// A stall of Redis longer than the lease (here DEBUG SLEEP 8 against a
// lease of 5 s) lapses every lease at once; no node reaps another, since
// a node reaps only once its own lease has been renewed without a gap for
// a full lease period, and every node renews within that.
func TestRedisStall(t *testing.T) {
	if testing.Short() {
		t.Skip("16 s")
	}
	rdb, addr, _ := privateRedis(t, "--appendonly", "no", "--enable-debug-command", "yes")
	stalledFleet(t, rdb, "stall", "an 8 s stall", func() {
		sleeper := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 20 * time.Second})
		defer sleeper.Close()
		if err := sleeper.Do(context.Background(), "DEBUG", "SLEEP", "8").Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// Redis down for 8 s (a crash and restart with its data, as a failover
// longer than the lease) lapses every lease at once; no node reaps another
// when it comes back. (With leases on the nodes' clocks, the first node to
// renew found every other lease 8 s old.)
func TestRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("16 s")
	}
	rdb, _, restart := privateRedis(t, "--appendonly", "yes", "--appendfsync", "always", "--dir", t.TempDir())
	stalledFleet(t, rdb, "outage", "an 8 s outage", func() { restart(8 * time.Second) })
}

// A node whose lease lapsed and that was reaped registers its sockets
// again, but not while the reap runs: the reaper would remove them again.
func TestRedisResyncAfterReap(t *testing.T) {
	f := newFakeClockRedis(t)
	rdb, prefix, clock, rec := f.rdb, f.prefix, f.clock, f.rec
	ctx := context.Background()
	n1, n2 := f.node(presence.Config{NodeID: "n1"}), f.node(presence.Config{NodeID: "n2"})
	connectJoin(t, n1, "a1", "alice", "c1")
	connectJoin(t, n2, "b1", "bob", "c1")
	tick := func(engs ...*presence.RedisEngine) {
		t.Helper()
		for _, e := range engs {
			if err := e.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec.Take()
	// n2 pauses; n1 reaps it once n1's own lease is 5 s old and n2's lapsed
	for range 7 {
		clock.Advance(time.Second)
		tick(n1)
	}
	if got := rosterUsers(t, n1, "c1"); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("roster %v, want alice (n2 reaped)", got)
	}
	rec.Take()
	// n2 comes back: its lease is claimed afresh and its socket registered
	// again; nobody reaps anybody after that.
	for range 8 {
		clock.Advance(time.Second)
		tick(n1, n2)
	}
	if got := rosterUsers(t, n1, "c1"); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Fatalf("roster %v after n2's resync, want alice and bob", got)
	}
	evs := rec.TakeEvents()
	got := render(evs)
	slices.Sort(got)
	if want := []string{"join c1 bob", "status bob online"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	// the reap told bob's leave to every socket of c1, b1 too: the join
	// that brings him back goes to b1 as well (before 2026-12-07 it left
	// b1 out, which showed its own user gone for good: a black-box audit)
	for _, ev := range evs {
		if ev.Kind == presence.EventJoin && ev.ExceptSocket != "" {
			t.Errorf("the join after the reap leaves out %s", ev.ExceptSocket)
		}
	}

	// While a reap of n2 is under way (claimed by a reaper that is still
	// at work), n2 waits: it registers nothing until the reap is done.
	holder, err := rdb.HGet(ctx, prefix+":{g}:holder", "n2").Result()
	if err != nil {
		t.Fatal(err)
	}
	item := "n2\t" + strings.Split(holder, "|")[0] + "\t0"
	far := float64(clock.Now().Add(time.Hour).UnixMilli())
	rdb.HDel(ctx, prefix+":{g}:holder", "n2")
	rdb.ZRem(ctx, prefix+":{g}:lease", "n2")
	rdb.ZAdd(ctx, prefix+":{g}:reap", redis.Z{Score: far, Member: item})
	rdb.HDel(ctx, prefix+":{c:c1}:m", "bob") // what the reaper removed so far
	for range 3 {
		clock.Advance(time.Second)
		tick(n2)
	}
	if err := rdb.HGet(ctx, prefix+":{c:c1}:m", "bob").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("n2 registered its socket again during the reap of it: %v", err)
	}
	rdb.ZRem(ctx, prefix+":{g}:reap", item) // the reap is done
	clock.Advance(time.Second)
	tick(n2)
	if m, err := rdb.HGet(ctx, prefix+":{c:c1}:m", "bob").Result(); err != nil || !strings.HasSuffix(m, presence.MemberTag("b1")) || strings.Contains(m, "|") {
		t.Fatalf("n2 did not register its socket again after the reap: %q, %v", m, err)
	}
}

// loseData deletes every key of prefix, as a restart of a Redis without
// persistence loses them.
func loseData(rdb redis.UniversalClient, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

// After Redis lost its data (a restart without persistence), the resync
// brings each of the node's users back as they were: away if the last
// activity this node saw is AwayAfter old, not online; and the typing
// entries this node wrote are written again, so that their expiry
// announces their stop (before, nobody did, and clients showed the user
// typing until their own ttlMs ran out).
func TestRedisResyncAfterDataLoss(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	n1 := f.node(presence.Config{NodeID: "n1", AwayAfter: 3 * time.Second, TypingTTL: 5 * time.Second})
	tick := func() { t.Helper(); f.tick(t, n1) }
	connectJoin(t, n1, "b1", "bob", "c1")
	for range 4 {
		tick()
	}
	connectJoin(t, n1, "a1", "alice", "c1")
	if err := n1.TypingStart(ctx, "a1", "c1"); err != nil {
		t.Fatal(err)
	}
	if got := f.rec.Take(); !slices.Contains(got, "status bob away") || !slices.Contains(got, "typing c1 alice true") {
		t.Fatalf("events before the loss %q, want bob away and alice typing", got)
	}
	loseData(f.rdb, f.prefix)
	tick() // the lease is found gone: the node registers its sockets again
	evs := f.rec.TakeEvents()
	got := render(evs)
	if slices.Contains(got, "status bob online") {
		t.Fatalf("events of the resync %q: bob, idle for 5 s, shown online", got)
	}
	// after a loss (no reap: nobody told the sockets a leave) a join
	// leaves out its own socket, as ever
	joins := 0
	for _, ev := range evs {
		if ev.Kind == presence.EventJoin {
			joins++
			if want := map[string]string{"alice": "a1", "bob": "b1"}[ev.UserID]; ev.ExceptSocket != want {
				t.Errorf("the resync's join of %s leaves out %q, want %q", ev.UserID, ev.ExceptSocket, want)
			}
		}
	}
	if joins != 2 {
		t.Errorf("events of the resync %q: %d joins, want alice's and bob's", got, joins)
	}
	ups, err := n1.Users(ctx, []string{"alice", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if ups[0].Status != presence.Online || ups[1].Status != presence.Away {
		t.Fatalf("after the resync alice %s, bob %s; want online and away", ups[0].Status, ups[1].Status)
	}
	if r, err := n1.Roster(ctx, "c1"); err != nil || !slices.Equal(r.Typing, []string{"alice"}) || len(r.Online) != 2 {
		t.Fatalf("roster after the resync %+v, %v; want alice and bob, alice typing", r, err)
	}
	for range 5 {
		tick()
	}
	if got := f.rec.Take(); !slices.Contains(got, "typing c1 alice false") {
		t.Fatalf("events after alice's typing expired %q, want its stop", got)
	}
}

// tick advances the fixture's clock by a second and runs eng's tick.
func (f *fakeClockRedis) tick(t *testing.T, eng *presence.RedisEngine) {
	t.Helper()
	f.clock.Advance(time.Second)
	if err := eng.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// leaseTTL is the lease of the node id tests (sameIDNodes).
const leaseTTL = 1500 * time.Millisecond

// sameIDNodes returns Redis, a fresh key prefix on it, and a maker of
// engines that all have node id id and a lease of leaseTTL.
func sameIDNodes(t *testing.T, id string) (redis.UniversalClient, string, func() *presence.RedisEngine) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	return rdb, prefix, func() *presence.RedisEngine {
		return presence.NewRedisEngine(rdb, presence.Config{NodeID: id, LeaseTTL: leaseTTL}, presence.RedisConfig{Prefix: prefix})
	}
}

// Node ids are unique: a second live instance under an id is refused; the
// id of a crashed instance is taken over once its lease lapsed, and that of
// a cleanly stopped one at once.
func TestRedisNodeIDUnique(t *testing.T) {
	_, _, node := sameIDNodes(t, "dup")
	ctx := context.Background()
	first := node()
	if err := first.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Connect(ctx, presence.Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	stop := runNode(first)

	t0 := time.Now()
	if err := node().Claim(ctx); !errors.Is(err, presence.ErrNodeIDTaken) {
		t.Fatalf("claim of a live node's id: %v, want ErrNodeIDTaken", err)
	}
	t.Logf("duplicate refused after %s", time.Since(t0))
	// A node that could not claim at start (Redis unreachable) finds out at
	// its first connection: its Run ends with ErrNodeIDTaken.
	late := node()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := late.Run(rctx); !errors.Is(err, presence.ErrNodeIDTaken) {
		t.Fatalf("Run of a duplicate: %v, want ErrNodeIDTaken", err)
	}
	if err := late.Connect(ctx, presence.Socket{ID: "x1", UserID: "mallory"}); err == nil {
		t.Fatal("a duplicate node connected a socket")
	}

	stop() // crash: the lease lapses
	t0 = time.Now()
	second := node()
	if err := second.Claim(ctx); err != nil {
		t.Fatalf("restart after a crash: %v", err)
	}
	if d := time.Since(t0); d > leaseTTL+time.Second {
		t.Fatalf("restart after a crash waited %s", d)
	}
	// the crashed instance's socket is reaped (by the new instance itself,
	// once its own lease is established)
	stop2 := runNode(second)
	defer stop2()
	for {
		ps, err := second.Users(ctx, []string{"alice"})
		if err != nil {
			t.Fatal(err)
		}
		if ps[0].Status == presence.Offline {
			break
		}
		if time.Since(t0) > 2*leaseTTL+2*time.Second {
			t.Fatal("the crashed instance's socket was not reaped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop2()
	if err := second.Close(); err != nil { // clean stop: the id is free at once
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := node().Claim(ctx); err != nil || time.Since(t0) > 200*time.Millisecond {
		t.Fatalf("claim after a clean stop: %v after %s", err, time.Since(t0))
	}
}

// A node that started while Redis was unreachable claims its id at its
// first connection. If Redis lost its data meanwhile, the id may be that of
// a running node, whose lease went with the data: the running node takes
// it back at its next renewal and keeps its sockets; the newcomer finds the
// id taken. A node that claims a free id at its start (Claim) is not
// tentative: a running node that comes back after it finds the id taken,
// as after a stall.
func TestRedisNodeIDTakenBackAfterDataLoss(t *testing.T) {
	rdb, prefix, node := sameIDNodes(t, "same")
	ctx := context.Background()
	running := node()
	if err := running.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	connectJoin(t, running, "s1", "alice", "c1")
	loseData(rdb, prefix)
	late := node() // started while Redis was unreachable: no Claim
	if err := late.Tick(ctx); err != nil {
		t.Fatalf("first connection of the late node: %v", err)
	}
	time.Sleep(leaseTTL / 3) // the running node's renewal is due
	if err := running.Tick(ctx); err != nil {
		t.Fatalf("the running node's renewal: %v, want the id taken back", err)
	}
	if r := rosterUsers(t, running, "c1"); len(r) != 1 || r[0] != "alice" {
		t.Fatalf("the running node's sockets after it took its id back: roster %v", r)
	}
	time.Sleep(leaseTTL / 3)
	err := late.Tick(ctx)
	if !errors.Is(err, presence.ErrNodeIDTaken) || !strings.Contains(err.Error(), "took it back") {
		t.Fatalf("the late node after the running one took its id back: %v, want ErrNodeIDTaken", err)
	}
	if err := late.Connect(ctx, presence.Socket{ID: "x1", UserID: "mallory"}); err == nil {
		t.Fatal("the late node connected a socket after losing the id")
	}
	time.Sleep(leaseTTL / 3)
	if err := running.Tick(ctx); err != nil {
		t.Fatalf("the running node's next renewal: %v", err)
	}

	// A claim at start is not tentative.
	loseData(rdb, prefix)
	fresh := node()
	if err := fresh.Claim(ctx); err != nil {
		t.Fatalf("claim of a free id at start: %v", err)
	}
	time.Sleep(leaseTTL / 3)
	if err := running.Tick(ctx); !errors.Is(err, presence.ErrNodeIDTaken) {
		t.Fatalf("the running node after a node claimed its free id at start: %v, want ErrNodeIDTaken", err)
	}
}

// A user's status is the one the timers on Redis's clock keep: a node
// whose clock runs 6 s ahead does not call a user away early.
func TestRedisStatusClockSkew(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	node := func(id string, skew time.Duration) *presence.RedisEngine {
		return presence.NewRedisEngine(rdb, presence.Config{NodeID: id, AwayAfter: 5 * time.Second,
			Now: func() time.Time { return time.Now().Add(skew) }}, presence.RedisConfig{Prefix: prefix})
	}
	n1, n2 := node("n1", 0), node("n2", 6*time.Second)
	if err := n1.Connect(ctx, presence.Socket{ID: "a1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	for i, eng := range []*presence.RedisEngine{n1, n2} {
		ps, err := eng.Users(ctx, []string{"alice"})
		if err != nil {
			t.Fatal(err)
		}
		if ps[0].Status != presence.Online {
			t.Fatalf("node %d: alice %s 2 s after her activity, want online", i+1, ps[0].Status)
		}
	}
}

// Writes Redis acknowledged and then lost (a failover to a replica that
// had not received them) while the node's lease stayed: the reconciliation
// finds a live socket whose registry line is missing twice in a row and
// registers it again, its user and joins with it; before, the socket's
// user stayed offline and out of the roster for good (failover audit).
func TestRedisReconcileRestoresLostWrites(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	n1 := f.node(presence.Config{NodeID: "n1", TTL: 4 * time.Second})
	tick := func() { t.Helper(); f.tick(t, n1) }
	connectJoin(t, n1, "a1", "alice", "c1")
	tick()
	// what Redis holds now; bob's connect and join come after it
	var keys []string
	iter := f.rdb.Scan(ctx, 0, f.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	held := map[string]string{}
	for _, k := range keys {
		held[k] = f.rdb.Dump(ctx, k).Val()
	}
	connectJoin(t, n1, "b1", "bob", "c1")
	f.rec.Take()
	// the failover: back to what Redis held before
	iter = f.rdb.Scan(ctx, 0, f.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if _, ok := held[iter.Val()]; !ok {
			f.rdb.Del(ctx, iter.Val())
		}
	}
	for k, v := range held {
		if err := f.rdb.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := n1.Roster(ctx, "c1"); err != nil || len(r.Online) != 1 {
		t.Fatalf("roster after the loss %+v, %v; want alice alone", r, err)
	}
	for range 5 { // reconciliations every 2 s: found missing at the first, registered at the second
		tick()
	}
	got := f.rec.Take()
	if !slices.Contains(got, "status bob online") || !slices.Contains(got, "join c1 bob") || slices.Contains(got, "join c1 alice") {
		t.Fatalf("events of the reconciliation %q, want bob online and joined again, and nothing of alice", got)
	}
	if r, err := n1.Roster(ctx, "c1"); err != nil || len(r.Online) != 2 {
		t.Fatalf("roster after the reconciliation %+v, %v; want alice and bob", r, err)
	}
	// and it is done once
	for range 4 {
		tick()
	}
	if got := f.rec.Take(); len(got) != 0 {
		t.Fatalf("events after %q, want none", got)
	}
}

// A typing start whose write failed was answered unavailable, and nobody
// was told. The resync after Redis lost its data wrote it again with the
// starts that were told, and announced it: the others saw the user typing
// after Redis came back though the start had been refused (a docs audit,
// 2026-12-07). The told start of another user is written again as ever.
func TestRedisResyncLeavesARefusedTypingStart(t *testing.T) {
	f := newFakeClockRedis(t)
	ctx := context.Background()
	n1 := f.node(presence.Config{NodeID: "n1", TypingTTL: 5 * time.Second})
	tick := func() { t.Helper(); f.tick(t, n1) }
	tick()
	connectJoin(t, n1, "a1", "alice", "c1")
	connectJoin(t, n1, "b1", "bob", "c1")
	if err := n1.TypingStart(ctx, "b1", "c1"); err != nil {
		t.Fatal(err)
	}
	f.rdb.AddHook(delayHook{})
	if err := n1.TypingStart(context.WithValue(ctx, roleKey{}, "fail"), "a1", "c1"); !errors.Is(err, presence.ErrUnavailable) {
		t.Fatalf("alice's start with Redis failing: %v, want unavailable", err)
	}
	f.rec.Take()
	loseData(f.rdb, f.prefix)
	var got []string
	for range 8 { // the resync, then past both starts' expiry
		tick()
		got = append(got, f.rec.Take()...)
	}
	if !slices.Contains(got, "typing c1 bob true") {
		t.Fatalf("events after the loss %q: bob's start, told, not written again", got)
	}
	for _, ev := range got {
		if strings.HasPrefix(ev, "typing c1 alice") {
			t.Errorf("events after the loss %q: %q of alice's refused start", got, ev)
		}
	}
}
