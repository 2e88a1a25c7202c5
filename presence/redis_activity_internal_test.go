package presence

import (
	"context"
	"errors"
	"testing"
	"time"

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
		clock.Advance(10 * time.Second) // past activityEvery
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
	clock.Advance(10 * time.Second)
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
