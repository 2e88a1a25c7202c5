package lastseen_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/store"
)

func TestRedisBuffer(t *testing.T) {
	runBufferSuite(t, func(t *testing.T) lastseen.Buffer {
		b, _ := redisBuffer(t)
		return b
	})
}

// The keys share the {lastseen} hash tag (one Redis Cluster slot for the
// scripts) under the configured prefix, and hold what they claim to.
func TestRedisKeys(t *testing.T) {
	ctx := t.Context()
	c := redisClient(t)
	prefix := "lstest:" + randHex(6)
	b := redisBufferAt(t, c, prefix)
	times, dirty, claimed := b.Keys()
	for got, want := range map[string]string{
		times:   prefix + ":{lastseen}",
		dirty:   prefix + ":{lastseen}:dirty",
		claimed: prefix + ":{lastseen}:claimed",
	} {
		if got != want {
			t.Errorf("key %q, want %q", got, want)
		}
	}
	must(t, b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0}, {UserID: "b", At: t0}}))
	if ms, err := c.ZScore(ctx, times, "a").Result(); err != nil || int64(ms) != t0.UnixMilli() {
		t.Fatalf("ZSCORE %s a = %v, %v", times, ms, err)
	}
	if n, _ := c.SCard(ctx, dirty).Result(); n != 2 {
		t.Fatalf("SCARD dirty = %d", n)
	}
	if _, err := b.Claim(ctx, 1, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := c.ZRangeWithScores(ctx, claimed, 0, -1).Result()
	if err != nil || len(got) != 1 || int64(got[0].Score) != t0.Add(time.Second).UnixMilli() {
		t.Fatalf("claimed zset = %v, %v", got, err)
	}

	if k, _, _ := lastseen.NewRedis(c, lastseen.RedisConfig{}).Keys(); k != "presence:{lastseen}" {
		t.Errorf("default key %q, want presence:{lastseen}", k)
	}
}

// The scripts survive SCRIPT FLUSH (EVALSHA falls back to EVAL). On a
// server of its own: SCRIPT FLUSH on the shared one would cost the tests
// running beside it a round trip they count.
func TestRedisScriptFlush(t *testing.T) {
	ctx := t.Context()
	c := redistest.StartProc(t).Client()
	b := lastseen.NewRedis(c, lastseen.RedisConfig{Prefix: "flush"})
	must(t, b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0}}))
	must(t, c.ScriptFlush(ctx).Err())
	must(t, b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0.Add(time.Second)}}))
	wantGet(t, b, []string{"a"}, []time.Time{t0.Add(time.Second)})
}

// An unreachable Redis is ErrUnavailable, for every operation.
func TestRedisUnavailable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	b := lastseen.NewRedis(c, lastseen.RedisConfig{Prefix: "x"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, lastseen.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", op, err)
		}
	}
	check("record", b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0}}))
	_, err := b.Get(ctx, []string{"a"})
	check("get", err)
	_, err = b.Claim(ctx, 1, t0)
	check("claim", err)
	check("ack", b.Ack(ctx, lastseen.Claim{At: 1, Entries: []store.LastSeen{{UserID: "a", At: t0}}}))
	check("release", b.Release(ctx, lastseen.Claim{At: 1, Entries: []store.LastSeen{{UserID: "a", At: t0}}}))
	_, err = b.Requeue(ctx, t0)
	check("requeue", err)
	_, err = b.Trim(ctx, t0, 1)
	check("trim", err)
	_, err = b.Stats(ctx)
	check("stats", err)
}

// Raise sends a chunk of RecordChunk users per ZADD, all in one pipeline.
func TestRedisRaiseChunks(t *testing.T) {
	ctx := t.Context()
	c := redisClient(t)
	prefix := "lstest:" + randHex(6)
	b := lastseen.NewRedis(c, lastseen.RedisConfig{Prefix: prefix, RecordChunk: 2})
	times, dirty, claimed := b.Keys()
	t.Cleanup(func() { c.Del(context.Background(), times, dirty, claimed) })
	ids := []string{"a", "b", "c", "d", "e"}
	var held, raised []store.LastSeen
	for _, id := range ids {
		held = append(held, store.LastSeen{UserID: id, At: t0})
		raised = append(raised, store.LastSeen{UserID: id, At: t0.Add(time.Minute)})
	}
	must(t, b.Record(ctx, held))
	raised = append(raised, store.LastSeen{UserID: "f", At: t0})
	must(t, b.Raise(ctx, raised))
	m := t0.Add(time.Minute)
	wantGet(t, b, append(ids, "f"), []time.Time{m, m, m, m, m, {}})
}

// Times recorded by this process and not yet flushed come back when Redis
// loses the buffer's keys (a restart without persistence, a Redis Cluster
// master without replica back empty): the next flush finds the epoch
// changed and records them again. Before, a user's last seen went back to
// an older one, or to none.
func TestRedisBufferLossRecordedAgain(t *testing.T) {
	ctx := t.Context()
	b, c := redisBuffer(t)
	other, _ := redisBuffer(t) // another buffer, under another prefix: untouched
	must(t, b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0}, {UserID: "b", At: t0.Add(time.Second)}}))
	_, err := b.Requeue(ctx, t0) // the epoch read
	must(t, err)
	must(t, b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0.Add(2 * time.Second)}}))
	times, dirty, claimed := b.Keys()
	must(t, c.Del(ctx, times, dirty, claimed, b.EpochKey()).Err())
	wantGet(t, b, []string{"a", "b"}, []time.Time{{}, {}})
	_, err = b.Requeue(ctx, t0)
	must(t, err)
	wantGet(t, b, []string{"a", "b"}, []time.Time{t0.Add(2 * time.Second), t0.Add(time.Second)})
	cl, err := b.Claim(ctx, 10, t0)
	must(t, err)
	if len(cl.Entries) != 2 {
		t.Fatalf("claimed %v after the loss, want a and b dirty again", cl.Entries)
	}
	// a Requeue with the epoch unchanged records nothing again
	must(t, b.Ack(ctx, cl))
	_, err = b.Requeue(ctx, t0)
	must(t, err)
	if cl, err := b.Claim(ctx, 10, t0); err != nil || len(cl.Entries) != 0 {
		t.Fatalf("claimed %v, %v with the epoch unchanged, want nothing", cl.Entries, err)
	}
	_, err = other.Requeue(ctx, t0)
	must(t, err)
}
