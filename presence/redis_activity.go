package presence

import (
	"context"
	"math/rand/v2"
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
// from away. With no batch in flight the caller sends its record itself,
// on its own goroutine and under its own context (a heartbeat on a quiet
// node wakes no other goroutine for it); records that arrive meanwhile
// gather for a flusher goroutine.
func (e *RedisEngine) recordActivity(ctx context.Context, user string) (bool, error) {
	r := &activityReq{user: user, done: make(chan struct{})}
	b := &e.act
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if !b.busy {
		// Nothing in flight, so the queue held nothing before r.
		b.busy = true
		batch := b.take()
		b.mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, activityFlushTimeout)
		e.sendActivity(sctx, batch)
		cancel()
		b.mu.Lock()
		if len(b.queue) > 0 {
			go e.flushActivity() // busy stays set
		} else {
			b.busy = false
		}
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.back, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// take removes the next batch from the queue. Called with mu held.
func (b *activityBatcher) take() []*activityReq {
	batch := b.queue
	if len(batch) > activityBatchMax {
		batch, b.queue = batch[:activityBatchMax], batch[activityBatchMax:]
	} else {
		b.queue = nil
	}
	return batch
}

// flushActivity sends queued records until the queue is empty.
func (e *RedisEngine) flushActivity() {
	b := &e.act
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), activityFlushTimeout)
		e.sendActivity(ctx, batch)
		cancel()
	}
}

func (e *RedisEngine) sendActivity(ctx context.Context, batch []*activityReq) {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, r := range batch {
		cmds[i] = userActivity.Run(ctx, pipe, []string{e.kUsers}, r.user, e.clk())
	}
	// each command carries its own result or error, unless the wait ended
	// before the replies came
	lost := e.exec(ctx, pipe)
	for i, r := range batch {
		if abandoned(lost) {
			r.err = lost
		} else {
			n, err := cmds[i].Int()
			r.back, r.err = n == 1, err
		}
		close(r.done)
	}
}

// Heartbeat implements Engine. A live socket's entries live as long as its
// node's lease (nothing re-scores them), so a heartbeat only has to record
// activity, and that at most once
// per activityEvery per user from this node: most heartbeats cost no Redis
// round trip at all, and none costs more than one whatever the number of
// conversations.
func (e *RedisEngine) Heartbeat(ctx context.Context, socketID string, active bool) error {
	if _, err := e.socket(socketID); err != nil {
		return err
	}
	if !active {
		return nil
	}
	return e.Touch(ctx, socketID)
}

// activityEvery is how stale this node lets a user's recorded activity get
// before recording it again: far below AwayAfter, so a user skipped here
// cannot be away.
func (e *RedisEngine) activityEvery() time.Duration {
	return max(100*time.Millisecond, min(5*time.Second, e.cfg.AwayAfter/10))
}

// activityDue reports whether user's activity must be sent now, and if so
// notes it as sent. The next one is due after activityEvery less up to a
// quarter, at random: users whose heartbeats started together (a node's
// restart, a benchmark) drift apart instead of all recording at the same
// moment every few seconds (a burst that held their heartbeats' acks).
func (e *RedisEngine) activityDue(user string, now time.Time) bool {
	every := e.activityEvery()
	e.mu.Lock()
	defer e.mu.Unlock()
	if next, ok := e.lastAct[user]; ok && now.Before(next) && next.Sub(now) <= every {
		return false // (a clock that went back more than every sends at once)
	}
	e.lastAct[user] = now.Add(every - time.Duration(rand.Int64N(int64(every/4)+1)))
	return true
}

// forgetActivity drops the note (the send failed, or the user's status
// changed elsewhere) so that the next activity is sent.
func (e *RedisEngine) forgetActivity(user string) {
	e.mu.Lock()
	delete(e.lastAct, user)
	e.mu.Unlock()
}

// Touch implements Engine.
func (e *RedisEngine) Touch(ctx context.Context, socketID string) error {
	s, err := e.socket(socketID)
	if err != nil {
		return err
	}
	now := e.cfg.Now()
	if !e.activityDue(s.user, now) {
		return nil
	}
	back, err := e.recordActivity(ctx, s.user)
	if err != nil {
		e.forgetActivity(s.user)
		return unavailable("activity", err)
	}
	e.away.arm(s.user, now.Add(e.cfg.AwayAfter))
	if back {
		e.emit(ctx, batch{{Kind: EventStatus, UserID: s.user, At: now, Status: Online}})
	}
	return nil
}
