package presence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/internal/redistest"
)

// A due activity record goes in the background: Touch returns while its
// round trip is held. After a round trip failed, the next caller sends its
// own and gets the error; once one succeeds, records go in the background
// again.
func TestActivityInBackground(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "activity")
	gate := make(chan chan struct{}, 1) // a pipeline waits on the channel in it, if any
	down := make(chan error, 1)         // a pipeline fails with the error in it, if any
	errDown := errors.New("redis down (test)")
	hook := &countHook{fail: func(ctx context.Context) error {
		select {
		case g := <-gate:
			gate <- g
			select {
			case <-g:
			case <-ctx.Done():
				return ctx.Err()
			}
		default:
		}
		select {
		case err := <-down:
			down <- err
			return err
		default:
			return nil
		}
	}}
	clock := fakeclock.New(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	eng := NewRedisEngine(rdb, Config{NodeID: "n1", Now: clock.Now}, RedisConfig{Prefix: prefix})
	eng.fakeClock = clock.Now // the scripts' clock too
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eng.Connect(ctx, Socket{ID: "s1", UserID: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, sc := range scripts { // a script Redis lacks costs a second round trip
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rdb.AddHook(hook)
	record := func() string {
		t.Helper()
		v, err := rdb.HGet(ctx, eng.kUsers, "alice").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// touch calls Touch with its round trips held: it must return anyway.
	touch := func(step string) {
		t.Helper()
		clock.Advance(31 * time.Second) // past activityEvery (30 s)
		held := make(chan struct{})
		gate <- held
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		err := eng.Touch(tctx, "s1")
		tcancel()
		<-gate
		close(held)
		if err != nil {
			t.Fatalf("%s: Touch waited for its round trip: %v", step, err)
		}
	}

	was := record()
	before := hook.pipelines.Load()
	touch("first")
	eng.Settle()
	if got := hook.pipelines.Load() - before; got != 1 {
		t.Fatalf("one record: %d pipelines, want 1", got)
	}
	if now := record(); now == was {
		t.Fatalf("the record was not written: %q", now)
	}

	down <- errDown
	touch("Redis failing")
	eng.Settle() // the round trip failed
	clock.Advance(31 * time.Second)
	if err := eng.Touch(ctx, "s1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Touch after a failed round trip: %v, want its own failure", err)
	}
	<-down
	if err := eng.Touch(ctx, "s1"); err != nil { // due again: the failure forgot the note
		t.Fatalf("Touch once Redis is back: %v", err)
	}
	touch("after recovery")
	eng.Settle()
}

// activityCalls is a client hook that counts userActivity script calls and
// the users they carry.
type activityCalls struct {
	calls, users atomic.Int64
}

func (h *activityCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *activityCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *activityCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}
func (h *activityCalls) count(cmd redis.Cmder) {
	a := cmd.Args()
	if len(a) > 1 && a[0] == "evalsha" && a[1] == userActivity.Hash() {
		h.calls.Add(1)
		h.users.Add(int64(len(a)-6) / 2) // evalsha sha 1 key clock awayAfter (user ago)…
	}
}

// Joins right after a connect record no activity (the connect did); a
// batch of records is one script call per activityPerScript users, and
// each user gets its own answer: the one user who was away comes back.
func TestActivityScriptCalls(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "actcalls")
	clock := fakeclock.New(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var back []string
	sink := func(_ context.Context, evs []Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			if ev.Kind == EventStatus && ev.Status == Online {
				back = append(back, ev.UserID)
			}
		}
	}
	eng := NewRedisEngine(rdb, Config{NodeID: "n1", Now: clock.Now, Sink: sink}, RedisConfig{Prefix: prefix})
	eng.fakeClock = clock.Now
	ctx := context.Background()
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	hook := &activityCalls{}
	rdb.AddHook(hook)
	const n = 150
	for i := range n {
		sid, user := fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i)
		if err := eng.Connect(ctx, Socket{ID: sid, UserID: user}); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Join(ctx, sid, "c1"); err != nil {
			t.Fatal(err)
		}
	}
	if c := hook.calls.Load(); c != 0 {
		t.Fatalf("joins right after their connects made %d activity calls, want 0", c)
	}
	mu.Lock()
	back = nil
	mu.Unlock()
	// u7 is away: its record says so
	rec := rdb.HGet(ctx, eng.kUsers, "u7").Val()
	f := strings.Split(rec, "|")
	f[2] = "away"
	rdb.HSet(ctx, eng.kUsers, "u7", strings.Join(f, "|"))

	clock.Advance(31 * time.Second) // every record is due again (activityEvery 30 s)
	for i := range n {
		if err := eng.Touch(ctx, fmt.Sprintf("s%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	eng.Settle()
	if u := hook.users.Load(); u != n {
		t.Fatalf("%d users recorded, want %d", u, n)
	}
	if c := hook.calls.Load(); c >= n/10 {
		t.Fatalf("%d script calls for %d records, want one per batch of up to %d", c, n, activityPerScript)
	}
	want := strconv.FormatInt(clock.Now().UnixMilli(), 10)
	for i := range n {
		f := strings.Split(rdb.HGet(ctx, eng.kUsers, fmt.Sprintf("u%d", i)).Val(), "|")
		if len(f) < 3 || f[1] != want || f[2] != "on" {
			t.Fatalf("u%d's record %v, want activity %s and on", i, f, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(back) != 1 || back[0] != "u7" {
		t.Fatalf("back online: %v, want [u7]", back)
	}
}
