package presence

import (
	"container/heap"
	"context"
	"fmt"
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

// typingChange runs typingStart or typingStop in one round trip (the user's
// activity goes with the next batch, touch); the script answers -1 (not
// joined), 1 (announce) or 0.
func (e *RedisEngine) typingChange(ctx context.Context, socketID, conv string, start bool) error {
	s, err := e.joinedSocket(socketID, conv)
	if err != nil {
		return err
	}
	if err := e.touch(ctx, s.user); err != nil {
		return err
	}
	now := e.cfg.Now()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	var res *redis.Cmd
	if start {
		ttl := e.cfg.TypingTTL.Milliseconds()
		res = typingStart.Run(ctx, pipe, []string{k.ty, k.tyo, k.su, k.m}, socketID, s.user, e.clk(), ttl)
	} else {
		res = typingStop.Run(ctx, pipe, []string{k.ty, k.tyo, k.su, k.m}, socketID, s.user, e.clk())
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
		e.typing.set(conv, now.Add(e.cfg.TypingTTL))
		e.typingAlarm.set(time.Now().Add(e.cfg.TypingTTL)) // the alarm's clock is the real one
	}
	if err != nil {
		return unavailable("typing", err)
	}
	var b batch
	switch n, _ := res.Int(); n {
	case -1:
		return ErrNotJoined
	case 1:
		b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: start, ExceptSocket: socketID})
	}
	e.emit(ctx, b)
	return nil
}

// typingTimers are the moments at which typing entries this node wrote may
// have expired, per conversation: the node that recorded a typing start
// fires its expiry, as a Node server's timer per socket does, instead of a
// cluster-wide timer in Redis (P:{g}:due), which cost three scripts more
// per typing session (schedule, claim, acknowledge). Nothing is lost if the
// node dies: an entry's owner is the socket that typed last (tyo), and the
// removal of that socket (a leave, a disconnect, a dead node's reap)
// clears the entry. A moment rung early costs one script that finds the
// next expiry and sets the moment again.
type typingTimers struct {
	mu    sync.Mutex
	at    map[string]time.Time     // conversation → earliest moment (node clock)
	queue momentHeap[typingMoment] // the moments in order; an entry at doesn't hold any more is skipped
}

// set asks for the conversation's entries to be checked at t (or earlier,
// if an earlier moment is set).
func (t *typingTimers) set(conv string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.at[conv]; ok && !at.Before(cur) {
		return
	}
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	t.at[conv] = at
	heap.Push(&t.queue, typingMoment{conv, at})
}

// take removes and returns up to limit conversations whose moment has come.
func (t *typingTimers) take(now time.Time, limit int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []string
	for len(due) < limit && len(t.queue) > 0 && !t.queue[0].at.After(now) {
		m := heap.Pop(&t.queue).(typingMoment)
		if cur, ok := t.at[m.conv]; ok && cur.Equal(m.at) {
			due = append(due, m.conv)
			delete(t.at, m.conv)
		}
	}
	return due
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
func (e *RedisEngine) runTyping(ctx context.Context, now time.Time) error {
	for range 10 {
		convs := e.typing.take(now, typingBatch)
		if len(convs) == 0 {
			return nil
		}
		pipe := e.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(convs))
		for i, c := range convs {
			k := e.conv(c)
			cmds[i] = typingExpire.Run(ctx, pipe, []string{k.ty, k.tyo}, e.clk())
		}
		err := e.exec(ctx, pipe)
		var b batch
		var failed int
		for i, c := range convs {
			raw, cerr := cmds[i].Slice()
			if cerr != nil || len(raw) != 2 {
				failed++
				e.typing.set(c, now.Add(time.Second))
				continue
			}
			for _, u := range strs(raw[0]) {
				b = append(b, Event{Kind: EventTyping, ConversationID: c, UserID: u, At: now, Typing: false})
			}
			if wait := toInt(raw[1]); wait > 0 {
				e.typing.set(c, now.Add(time.Duration(wait)*time.Millisecond))
			}
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
