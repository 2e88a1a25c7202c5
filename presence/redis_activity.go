package presence

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Activity records are group-committed: the records of all sockets that
// come due within activityWindow, or while a round trip is in flight, go
// together in one round trip, in one script call per activityPerScript
// users (its answer is per user).
//
// The call that made a record does not wait for it (Touch, and the
// heartbeats through it): its result, whether the user came back from
// away, is emitted by the flusher. A record's round trip on a heartbeat's
// path cost more server CPU than the rest of the heartbeat, and real
// clients' heartbeats, 15-20 s apart, each carried one (activityEvery is
// 5 s): at 2,000 heartbeats/s from 5,000 sockets, one record per two
// heartbeats, the server's CPU per heartbeat was 150-182 µs with the
// records and 115-133 µs without them (docs/benchmarks/presence-load.md).
// While the last round trip failed (Redis unavailable), callers wait for
// theirs again, so that the error reaches them as it did.

// activityBatchMax bounds the users of one round trip.
const activityBatchMax = 500

// activityPerScript bounds the users of one userActivity call: Redis runs
// nothing else while a script runs (100 records: about 0.2 ms).
const activityPerScript = 100

// activityBack reads the i-th user's answer of a userActivity call: whether
// that user came back from away.
func activityBack(cmd *redis.Cmd, i int) (bool, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return false, err
	}
	if i >= len(v) {
		return false, errors.New("presence: userActivity: short reply")
	}
	return v[i] == 1, nil
}

// activityWindow is how long a record waits for others before its round
// trip: at most that later than the activity it records, far below
// activityEvery.
const activityWindow = 20 * time.Millisecond

// activityFlushTimeout bounds one batch's round trip; a waiter gives up
// earlier when its own context ends.
const activityFlushTimeout = 5 * time.Second

type activityReq struct {
	user  string
	clock string    // the script's clock argument, taken at the call (e.clk)
	at    time.Time // the activity (node clock): the away watch, the event
	ago   int64     // ms: how long before clock the activity was (a deferred record, runAway)
	back  bool
	err   error
	done  chan struct{} // nil: nobody waits (the flusher handles the result)
}

type activityBatcher struct {
	mu      sync.Mutex
	queue   []*activityReq
	busy    bool        // a flusher runs, or window will start one
	window  *time.Timer // non-nil while a flush waits for the window
	failing bool        // the last round trip failed: callers wait for theirs
	idle    sync.Cond   // on mu (NewRedisEngine): broadcast when busy ends (Settle)
}

// recordLater queues user's activity at at (node clock: the call's time,
// or an earlier activity the node did not record, runAway) for the next
// round trip without waiting for it. false: the last round trip failed, so
// the caller records it itself (recordActivity) and reports what happens.
func (e *RedisEngine) recordLater(user string, at time.Time) bool {
	ago := max(0, e.cfg.Now().Sub(at).Milliseconds())
	b := &e.act
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing {
		return false
	}
	b.queue = append(b.queue, &activityReq{user: user, clock: e.clk(), at: at, ago: ago})
	if !b.busy {
		b.busy = true
		b.window = time.AfterFunc(activityWindow, e.flushWindow)
	}
	return true
}

// recordActivity records user's activity with the next batch and waits
// for its result: whether the user came back from away. With no batch in
// flight the caller sends its record itself, on its own goroutine and
// under its own context; records that arrive meanwhile gather for a
// flusher goroutine.
func (e *RedisEngine) recordActivity(ctx context.Context, user string) (bool, error) {
	r := &activityReq{user: user, clock: e.clk(), done: make(chan struct{})}
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
			b.done()
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

// done ends a busy spell. Called with mu held.
func (b *activityBatcher) done() {
	b.busy = false
	b.idle.Broadcast()
}

// flushWindow is the window timer's: it flushes unless Settle took over.
func (e *RedisEngine) flushWindow() {
	b := &e.act
	b.mu.Lock()
	if b.window == nil {
		b.mu.Unlock()
		return
	}
	b.window = nil
	b.mu.Unlock()
	e.flushActivity()
}

// flushActivity sends queued records until the queue is empty.
func (e *RedisEngine) flushActivity() {
	b := &e.act
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.done()
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), activityFlushTimeout)
		e.sendActivity(ctx, batch)
		cancel()
	}
}

var _ Settler = (*RedisEngine)(nil)

// Settle implements Settler: it returns once the activity records queued
// before the call are sent (or failed), at once rather than after their
// window.
func (e *RedisEngine) Settle() {
	b := &e.act
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.window != nil && b.window.Stop() {
		b.window = nil
		go e.flushActivity()
	}
	for b.busy {
		b.idle.Wait()
	}
}

func (e *RedisEngine) sendActivity(ctx context.Context, reqs []*activityReq) {
	pipe := e.rdb.Pipeline()
	// one script call per run of up to activityPerScript records made at
	// the same clock reading (in production they all read Redis's)
	type call struct {
		cmd   *redis.Cmd
		first int // index in reqs of the call's first user
	}
	var calls []call
	callOf := make([]int, len(reqs))
	for i := 0; i < len(reqs); {
		j := i + 1
		for j < len(reqs) && j-i < activityPerScript && reqs[j].clock == reqs[i].clock {
			j++
		}
		args := make([]any, 0, 2+2*(j-i))
		args = append(args, reqs[i].clock, e.cfg.AwayAfter.Milliseconds())
		for _, r := range reqs[i:j] {
			args = append(args, r.user, r.ago)
		}
		for k := i; k < j; k++ {
			callOf[k] = len(calls)
		}
		calls = append(calls, call{userActivity.Run(ctx, pipe, []string{e.kUsers}, args...), i})
		i = j
	}
	// each command carries its own result or error, unless the wait ended
	// before the replies came
	lost := e.exec(ctx, pipe)
	var back batch
	var failed error
	for i, r := range reqs {
		if abandoned(lost) {
			r.err = lost
		} else {
			c := calls[callOf[i]]
			r.back, r.err = activityBack(c.cmd, i-c.first)
		}
		if r.err != nil && failed == nil {
			failed = r.err
		}
		if r.done != nil {
			close(r.done)
			continue
		}
		// queued by recordLater: the result is the flusher's to handle
		if r.err != nil {
			e.forgetActivity(r.user) // the next activity is sent again
			if r.ago > 0 {           // deferred: its away check waits for it
				e.away.arm(r.user, e.cfg.Now().Add(time.Second))
			}
			continue
		}
		e.away.arm(r.user, r.at.Add(e.cfg.AwayAfter))
		if r.back {
			at := r.at
			if r.ago > 0 { // deferred: the user comes back now
				at = e.cfg.Now()
			}
			back = append(back, Event{Kind: EventStatus, UserID: r.user, At: at, Status: Online})
		}
	}
	e.act.mu.Lock()
	was := e.act.failing
	e.act.failing = failed != nil
	e.act.mu.Unlock()
	if failed != nil && !was {
		e.log.Warn("activity records failed; until one succeeds, each is sent by its caller, which waits for it", "users", len(reqs), "err", failed)
	}
	e.emit(ctx, back)
}

// Heartbeat implements Engine. A live socket's entries live as long as its
// node's lease (nothing re-scores them), so a heartbeat only has to record
// activity, and that at most once
// per activityEvery per user from this node: most heartbeats cost no Redis
// round trip at all, and none costs more than one whatever the number of
// conversations.
func (e *RedisEngine) Heartbeat(ctx context.Context, socketID string, active bool) error {
	s, err := e.socket(socketID)
	if err != nil || !active {
		return err
	}
	return e.touch(ctx, s.user) // Touch would look the socket up again
}

// activityEvery is how stale this node lets a user's recorded activity get
// before recording it again: a tenth of AwayAfter, at most 30 s. What
// it does not record is recorded when the user's away check comes
// (runAway), so the user does not turn away early. Before 2026-12-05 it was
// at most 5 s, and each check trusted the record: a user active in the
// last 5 s before going idle turned away up to 5 s early. In the typing
// benchmark (2,000 users, 500 changes/s) a record went with nearly every
// change: 400 a second, half of Redis's command time.
func (e *RedisEngine) activityEvery() time.Duration {
	return max(100*time.Millisecond, min(30*time.Second, e.cfg.AwayAfter/10))
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
	e.noteActivityLocked(user, now, every)
	return true
}

// noteActivity notes that user's activity was recorded at now by other
// means (a connect's userConnect sets it): the joins, heartbeats and other
// events that follow a connect do not record it again until due. Joins
// right after a connect sent a record each, which at most refreshed the
// time the connect had just written (a join burst of 5,000 sockets × 3
// conversations: 15,000 script calls in Redis).
func (e *RedisEngine) noteActivity(user string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.noteActivityLocked(user, now, e.activityEvery())
}

func (e *RedisEngine) noteActivityLocked(user string, now time.Time, every time.Duration) {
	e.lastAct[user] = now.Add(every - time.Duration(rand.Int64N(int64(every/4)+1)))
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
	return e.touch(ctx, s.user)
}

// touch records user's activity when due (activityDue), as every client
// event does: queued for the next batch (recordLater) without waiting for
// it, or, while the last batch failed, sent and waited for. Joins, leaves
// and typing changes sent their record in their own round trip, a script
// call per record: in a typing window of 500 changes/s, 290 calls/s.
func (e *RedisEngine) touch(ctx context.Context, user string) error {
	now := e.cfg.Now()
	e.away.saw(user, now)
	if !e.activityDue(user, now) || e.recordLater(user, now) {
		return nil
	}
	back, err := e.recordActivity(ctx, user)
	if err != nil {
		e.forgetActivity(user)
		return unavailable("activity", err)
	}
	e.away.arm(user, now.Add(e.cfg.AwayAfter))
	if back {
		e.emit(ctx, batch{{Kind: EventStatus, UserID: user, At: now, Status: Online}})
	}
	return nil
}
