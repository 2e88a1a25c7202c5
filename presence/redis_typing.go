package presence

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func (e *RedisEngine) joinedSocket(socketID, conv string) (*rSocket, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.local[socketID]
	if !ok {
		return nil, ErrUnknown
	}
	if _, in := s.convs[conv]; !in {
		return nil, ErrNotJoined
	}
	return s, nil
}

// TypingStart implements Engine.
func (e *RedisEngine) TypingStart(ctx context.Context, socketID, conv string) error {
	return e.typingChange(ctx, socketID, conv, true)
}

// TypingStop implements Engine.
func (e *RedisEngine) TypingStop(ctx context.Context, socketID, conv string) error {
	return e.typingChange(ctx, socketID, conv, false)
}

// typingChange records a typing start or stop in one round trip of plain
// commands, not a script: a script call costs Redis several times its
// commands (measured in a typing window of 500 changes/s on one node:
// about 60 µs a call, of which 15 were the commands), and typing is the
// busiest write there is. Each command is atomic, which is what the
// announcement needs: of concurrent starts of one user only the one whose
// ZADD (GT) adds the entry announces it (or, rarely, also one that found it
// expired and not yet removed), of concurrent stops only the one whose
// ZREM removes it. The member record read beside them says whether Redis
// has the socket joined, as this node does (joinedSocket): if not (its
// entries were reaped, or Redis lost them, and the resync has not run
// yet), an entry the start added is taken back and the change refused.
func (e *RedisEngine) typingChange(ctx context.Context, socketID, conv string, start bool) error {
	s, err := e.joinedSocket(socketID, conv)
	if err != nil {
		return err
	}
	if err := e.touch(ctx, s.user); err != nil {
		return err
	}
	now := e.cfg.Now()
	rnow := e.redisNow()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	rec := pipe.HGet(ctx, k.m, s.user)
	legacy := pipe.HGet(ctx, k.su, socketID) // a record of a release before 2026-12-02 lists no sockets
	cur := pipe.ZScore(ctx, k.ty, s.user)
	var changed *redis.IntCmd
	if start {
		exp := float64(rnow + e.cfg.TypingTTL.Milliseconds())
		// GT: an entry that is there only moves later; the reply counts
		// the entries added, as NX's would
		changed = pipe.ZAddGT(ctx, k.ty, redis.Z{Score: exp, Member: s.user})
		pipe.HSet(ctx, k.tyo, s.user, socketID)
	} else {
		changed = pipe.ZRem(ctx, k.ty, s.user)
		pipe.HDel(ctx, k.tyo, s.user)
	}
	err = e.exec(ctx, pipe)
	if start {
		// the entry's expiry is this node's to fire (typingTimers), set
		// after the write, failed or not (it may have landed): a check
		// that ran meanwhile and missed the entry cannot have dropped it.
		// The alarm wakes the timer loop then: expiries fired on the
		// tick alone came in bursts, every 50 ms the fan-out of all those
		// due since the last, and the changes arriving meanwhile waited
		// behind it.
		e.typing.started(conv, s.user, now.Add(e.cfg.TypingTTL))
		e.typingAlarm.set(time.Now().Add(e.cfg.TypingTTL)) // the alarm's clock is the real one
	}
	if err == nil || errors.Is(err, redis.Nil) { // (exec's error is the first command's)
		err = failedCmd(pipe.Cmds())
	}
	if err != nil {
		return unavailable("typing", err)
	}
	if !start {
		e.typing.stopped(conv, s.user) // its ZREM ran
	}
	if !memberHas(rec.Val(), legacy.Val(), socketID, s.user) {
		if start && changed.Val() == 1 {
			undo := e.rdb.Pipeline()
			undo.ZRem(ctx, k.ty, s.user)
			undo.HDel(ctx, k.tyo, s.user)
			if err := e.exec(ctx, undo); err != nil {
				e.log.Warn("typing entry of a socket Redis does not have joined left for its expiry", "sid", socketID, "conversation_id", conv, "err", err)
			}
		}
		return ErrNotJoined
	}
	was, typed := cur.Val(), cur.Err() == nil // the expiry before this change
	var announce bool
	if start {
		announce = changed.Val() == 1 || typed && int64(was) <= rnow
	} else {
		announce = changed.Val() == 1 && int64(was) > rnow
	}
	if announce {
		e.emit(ctx, batch{{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: start, ExceptSocket: socketID}})
	}
	return nil
}

// failedCmd is the error of the first command that failed other than by
// finding nothing (redis.Nil), or nil.
func failedCmd(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// memberHas reports whether a member record ("n|since|graceDeadline|leftAt"
// and "|sockets" since 2026-12-02, see memberLib) lists socket sid; a
// record without a socket list has its sockets in su (legacySU: su's entry
// for sid, the user if it is there).
func memberHas(rec, legacySU, sid, user string) bool {
	if rec == "" {
		return false
	}
	f := strings.SplitN(rec, "|", 5)
	if len(f) < 4 {
		return false
	}
	if len(f) == 4 {
		return legacySU == user
	}
	for socks := f[4]; socks != ""; {
		var one string
		one, socks, _ = strings.Cut(socks, ",")
		if one == sid {
			return true
		}
	}
	return false
}

// typingTimers are the moments at which typing entries this node wrote may
// have expired, per conversation: the node that recorded a typing start
// fires its expiry, as a Node server's timer per socket does, instead of a
// cluster-wide timer in Redis (P:{g}:due), which cost three scripts more
// per typing session (schedule, claim, acknowledge). Nothing is lost if the
// node dies: an entry's owner is the socket that typed last (tyo), and the
// removal of that socket (a leave, a disconnect, a dead node's reap)
// clears the entry.
//
// The node keeps its own starts (own) until their stop, as a Node server
// clears a socket's timer: a conversation whose moment comes with none of
// them expired costs no round trip. Before, each moment ran typingExpire,
// which mostly found nothing (the stop had come) and set the next moment:
// in the typing benchmark at 100 changes/s, 100 script calls a second, the
// larger part of Redis's command time. A start that expired costs a check
// (runTyping); one the check did not find expired (the estimate of Redis's
// clock moved, or another node's start or stop of the same user came
// meanwhile) is checked once more, at the conversation's next expiry in
// Redis.
type typingTimers struct {
	mu    sync.Mutex
	at    map[string]time.Time            // conversation → earliest moment (node clock)
	own   map[string]map[string]ownTyping // conversation → user → this node's start, until its stop
	queue momentHeap[typingMoment]        // the moments in order; an entry at doesn't hold any more is skipped
}

// ownTyping is a start this node wrote: its expiry on the node's clock.
type ownTyping struct {
	exp       time.Time
	rechecked bool // a check did not find it expired: the next one is its last
}

// started notes user's start in conv, expiring at exp, and sets the
// conversation's moment (or keeps an earlier one).
func (t *typingTimers) started(conv, user string, exp time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.own == nil {
		t.own = map[string]map[string]ownTyping{}
	}
	users := t.own[conv]
	if users == nil {
		users = map[string]ownTyping{}
		t.own[conv] = users
	}
	users[user] = ownTyping{exp: exp}
	t.setLocked(conv, exp)
}

// stopped forgets user's start in conv: its entry is gone from Redis (a
// stop's ZREM ran). The conversation's moment stays; take drops it.
func (t *typingTimers) stopped(conv, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if users := t.own[conv]; users != nil {
		delete(users, user)
		if len(users) == 0 {
			delete(t.own, conv)
		}
	}
}

// set asks for the conversation's entries to be checked at t (or earlier,
// if an earlier moment is set).
func (t *typingTimers) set(conv string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setLocked(conv, at)
}

func (t *typingTimers) setLocked(conv string, at time.Time) {
	if cur, ok := t.at[conv]; ok && !at.Before(cur) {
		return
	}
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	t.at[conv] = at
	heap.Push(&t.queue, typingMoment{conv, at})
}

// take removes and returns up to limit conversations whose moment has come
// with one of this node's starts there expired. One whose starts have not
// expired gets the moment of its earliest; one without starts, none.
func (t *typingTimers) take(now time.Time, limit int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []string
	for len(due) < limit && len(t.queue) > 0 && !t.queue[0].at.After(now) {
		m := heap.Pop(&t.queue).(typingMoment)
		if cur, ok := t.at[m.conv]; !ok || !cur.Equal(m.at) {
			continue
		}
		delete(t.at, m.conv)
		var next time.Time
		for _, o := range t.own[m.conv] {
			if next.IsZero() || o.exp.Before(next) {
				next = o.exp
			}
		}
		switch {
		case next.IsZero():
		case next.After(now):
			t.setLocked(m.conv, next)
		default:
			due = append(due, m.conv)
		}
	}
	return due
}

// checked settles conv's starts after a check at now that removed the
// entries of users (typingCheck), with Redis's next expiry in the
// conversation wait from now (0: none). A start that had expired here but
// was not removed is checked once more at that expiry, then forgotten.
func (t *typingTimers) checked(conv string, now time.Time, removed []string, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	users := t.own[conv]
	for u, o := range users {
		if o.exp.After(now) {
			continue
		}
		if o.rechecked || wait <= 0 || slices.Contains(removed, u) {
			delete(users, u)
			continue
		}
		o.exp, o.rechecked = now.Add(wait), true
		users[u] = o
	}
	if len(users) == 0 {
		delete(t.own, conv)
	}
	var next time.Time
	for _, o := range users {
		if next.IsZero() || o.exp.Before(next) {
			next = o.exp
		}
	}
	if !next.IsZero() {
		t.setLocked(conv, next)
	}
}

type typingMoment struct {
	conv string
	at   time.Time
}

func (m typingMoment) moment() int64 { return m.at.UnixNano() }

// typingBatch is how many conversations' expiries go in one round trip.
const typingBatch = 500

// runTyping removes the expired typing entries of the conversations whose
// moment has come, one round trip per typingBatch of them, and announces
// each stop. A conversation with entries left is checked again when the
// next expires; one whose check failed, in a second.
//
// A check is a transaction of plain commands (typingCheck), not a script:
// at 100 expiries a second the script (TIME, its reads and writes, and the
// call itself) was most of Redis's command time in the typing benchmark.
func (e *RedisEngine) runTyping(ctx context.Context, now time.Time) error {
	for range 10 {
		convs := e.typing.take(now, typingBatch)
		if len(convs) == 0 {
			return nil
		}
		rnow := e.redisNow()
		checks := make([]typingCheck, len(convs))
		tx := func(from, to int) error {
			_, err := e.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				for i := from; i < to; i++ {
					checks[i] = queueTypingCheck(ctx, pipe, e.conv(convs[i]).ty, rnow)
				}
				return nil
			})
			return err
		}
		var err error
		if e.crossSlot {
			err = tx(0, len(convs))
		} else {
			// On a Redis Cluster a transaction stays in one hash slot: one
			// per conversation (a check that fails is retried alone).
			for i := range convs {
				err = cmp.Or(err, tx(i, i+1))
			}
		}
		var b batch
		var failed int
		for i, c := range convs {
			removed, wait, cerr := checks[i].result(rnow)
			if cerr != nil {
				failed++
				e.typing.set(c, now.Add(time.Second))
				continue
			}
			for _, u := range removed {
				b = append(b, Event{Kind: EventTyping, ConversationID: c, UserID: u, At: now, Typing: false})
			}
			e.typing.checked(c, now, removed, wait)
		}
		e.emit(ctx, b)
		if err == nil && failed > 0 {
			err = fmt.Errorf("%d conversations failed; checked again in 1s", failed)
		}
		if err != nil {
			return unavailable("typing expiry", err)
		}
		if len(convs) < typingBatch {
			return nil
		}
	}
	return nil
}

// typingCheck is one conversation's check in a transaction: the entries
// expired at Redis's time rnow (this node's estimate, as the starts wrote
// their expiries), their removal, and the next expiry left. Whoever
// removes an entry announces its stop, as a stop's ZREM does. The typist's
// socket (tyo) stays: the user's next start overwrites it, or that
// socket's leave clears it (and finds no typing entry to stop).
type typingCheck struct {
	expired *redis.StringSliceCmd
	next    *redis.ZSliceCmd
}

func queueTypingCheck(ctx context.Context, pipe redis.Pipeliner, ty string, rnow int64) typingCheck {
	upTo := strconv.FormatInt(rnow, 10)
	c := typingCheck{expired: pipe.ZRangeByScore(ctx, ty, &redis.ZRangeBy{Min: "-inf", Max: upTo})}
	pipe.ZRemRangeByScore(ctx, ty, "-inf", upTo)
	c.next = pipe.ZRangeWithScores(ctx, ty, 0, 0)
	return c
}

// result is the users removed and the time from rnow to the next expiry
// (0: none left).
func (c typingCheck) result(rnow int64) ([]string, time.Duration, error) {
	users, err := c.expired.Result()
	if err != nil {
		return nil, 0, err
	}
	next, err := c.next.Result()
	if err != nil {
		return nil, 0, err
	}
	var wait time.Duration
	if len(next) > 0 {
		wait = max(time.Millisecond, time.Duration(int64(next[0].Score)-rnow)*time.Millisecond)
	}
	return users, wait, nil
}
