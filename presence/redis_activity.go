package presence

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Activity records are group-committed: the heartbeats of all sockets that
// arrive while one round trip is in flight go together in the next one.
// At low rates a record goes alone, at once (no added delay); under load
// one round trip carries many users, instead of each heartbeat's handler
// paying its own (a pipelined EVALSHA per user: the script's result is
// per user).

// activityBatchMax bounds the users of one round trip.
const activityBatchMax = 500

// activityFlushTimeout bounds one batch's round trip; a waiter gives up
// earlier when its own context ends.
const activityFlushTimeout = 5 * time.Second

type activityReq struct {
	user string
	back bool // the user came back from away
	err  error
	done chan struct{}
}

type activityBatcher struct {
	mu    sync.Mutex
	queue []*activityReq
	busy  bool // a flusher goroutine is running
}

// recordActivity records user's activity with the next batch (at Redis's
// time of the batch) and waits for its result: whether the user came back
// from away.
func (e *RedisEngine) recordActivity(ctx context.Context, user string) (bool, error) {
	r := &activityReq{user: user, done: make(chan struct{})}
	b := &e.act
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if !b.busy {
		b.busy = true
		go e.flushActivity()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.back, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// flushActivity sends queued records until the queue is empty.
func (e *RedisEngine) flushActivity() {
	b := &e.act
	for {
		b.mu.Lock()
		batch := b.queue
		if len(batch) > activityBatchMax {
			batch, b.queue = batch[:activityBatchMax], batch[activityBatchMax:]
		} else {
			b.queue = nil
		}
		if len(batch) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		e.sendActivity(batch)
	}
}

func (e *RedisEngine) sendActivity(batch []*activityReq) {
	ctx, cancel := context.WithTimeout(context.Background(), activityFlushTimeout)
	defer cancel()
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	away := e.cfg.AwayAfter.Milliseconds()
	for i, r := range batch {
		cmds[i] = userActivity.Run(ctx, pipe, []string{e.kUsers, e.kDue}, r.user, e.clk(), away)
	}
	_ = e.exec(ctx, pipe) // each command carries its own result or error
	for i, r := range batch {
		n, err := cmds[i].Int()
		r.back, r.err = n == 1, err
		close(r.done)
	}
}
