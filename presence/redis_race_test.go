package presence_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

// delayHook holds back pipelines by the role in their context: "slow" ones
// go after a pause, "fail" ones fail after a pause without reaching Redis,
// "lost" ones run but their reply is lost.
// (Sleeps, not channels: the race detector must see no ordering between
// the two operations but the engine's own.)
type delayHook struct{}

type roleKey struct{}

func (delayHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch ctx.Value(roleKey{}) {
		case "slow":
			time.Sleep(30 * time.Millisecond)
		case "fail":
			time.Sleep(80 * time.Millisecond)
			return errors.New("injected failure")
		case "lost": // the commands run; their reply is lost
			_ = next(ctx, cmds)
			return errors.New("injected lost reply")
		}
		return next(ctx, cmds)
	}
}

// A socket's leave and its disconnect may run at once (a client leaves as
// its connection drops): the disconnect's removal reads the socket's
// conversations while the leave, its round trip done, deletes one. That
// was an unguarded map read against a write (a fatal "concurrent map
// iteration and map write"). Run with -race.
func TestRedisLeaveDuringDisconnect(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	eng := presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1"}, presence.RedisConfig{Prefix: prefix})
	connectJoin(t, eng, "s1", "alice", "c1", "c2", "c3")
	rdb.AddHook(delayHook{})
	left := make(chan error, 1)
	go func() { left <- eng.Leave(context.WithValue(ctx, roleKey{}, "slow"), "s1", "c1") }()
	time.Sleep(10 * time.Millisecond) // the leave holds the socket, its round trip under way
	if err := eng.Disconnect(context.WithValue(ctx, roleKey{}, "fail"), "s1"); err == nil {
		t.Fatal("disconnect with an injected failure succeeded")
	}
	if err := <-left; err != nil {
		t.Fatal(err)
	}
}

// A disconnect whose removal fails (Redis unreachable) is retried by
// Tick, and dated at the disconnect, not at the retry: the user's
// last-seen is when the socket went (before, the moment Redis came back,
// seconds later).
func TestRedisDisconnectRetriedAtItsMoment(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	clock := enginetest.NewClock()
	rec := &enginetest.Recorder{}
	eng := presence.NewRedisEngine(rdb, presence.Config{
		NodeID: "n1", FlapGrace: time.Second, Now: clock.Now, Sink: rec.Sink(),
	}, presence.RedisConfig{Prefix: prefix})
	presence.SetRedisClock(eng, clock.Now)
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	connectJoin(t, eng, "s1", "alice", "c1")
	rec.Take()
	rdb.AddHook(delayHook{})
	clock.Advance(time.Second)
	gone := clock.Now()
	if err := eng.Disconnect(context.WithValue(ctx, roleKey{}, "fail"), "s1"); err == nil {
		t.Fatal("disconnect with an injected failure succeeded")
	}
	clock.Advance(10 * time.Second) // Redis is back; the retry runs
	for range 3 {
		if err := eng.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	if err := eng.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range rec.TakeEvents() {
		got = append(got, enginetest.Render(x))
		switch {
		case x.Kind == presence.EventStatus && !x.LastSeen.Equal(gone):
			t.Errorf("lastSeen %v, want the disconnect %v", x.LastSeen, gone)
		case x.Kind == presence.EventLeave && !x.At.Equal(gone):
			t.Errorf("leave at %v, want the disconnect %v", x.At, gone)
		}
	}
	if want := []string{"leave c1 alice disconnected", "status alice offline"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}
