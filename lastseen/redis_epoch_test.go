package lastseen_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/store"
)

// A re-record after the buffer's loss that fails (Redis is often flaky
// just after it lost data) is tried again at the next flush: the epoch is
// kept as it was until it succeeds. Before, the new epoch was stored
// first, and the next flush found nothing to do (a review, 2026-12-07).
func TestRedisBufferLossReRecordRetried(t *testing.T) {
	ctx := t.Context()
	var on atomic.Bool
	b, c := redisBuffer(t, redistest.FailHook{Fail: func(cmd redis.Cmder) bool { return on.Load() && redistest.IsScript(cmd) }})
	must(t, b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0}}))
	_, err := b.Requeue(ctx, t0) // the epoch read
	must(t, err)
	times, dirty, claimed := b.Keys()
	must(t, c.Del(ctx, times, dirty, claimed, b.EpochKey()).Err())
	on.Store(true)
	if _, err := b.Requeue(ctx, t0); err == nil {
		t.Fatal("requeue with the re-record failing succeeded")
	}
	on.Store(false)
	_, err = b.Requeue(ctx, t0)
	must(t, err)
	wantGet(t, b, []string{"a"}, []time.Time{t0})
}

// A loss before the node's first flush is found at that flush: the epoch
// was read before the first record. Before, the first read was the
// flush's, which took the new epoch for the first, and the time recorded
// before the loss stayed lost (a black-box audit, 2026-12-07).
func TestRedisBufferLossBeforeTheFirstFlush(t *testing.T) {
	ctx := t.Context()
	b, c := redisBuffer(t, redistest.FailHook{Fail: func(redis.Cmder) bool { return false }})
	must(t, b.Record(ctx, []store.LastSeen{{UserID: "a", At: t0}}))
	times, dirty, claimed := b.Keys()
	must(t, c.Del(ctx, times, dirty, claimed, b.EpochKey()).Err())
	_, err := b.Requeue(ctx, t0) // the first flush
	must(t, err)
	wantGet(t, b, []string{"a"}, []time.Time{t0})
}
