package presence

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// graceNote is a flap grace this node started (a socket's removal in mode
// "grace"): the timers that end it live in the due set, P:{g}:due, and go
// if Redis loses {g}'s data (a Redis Cluster master without replica that
// came back empty, a restart without persistence). Nothing else ends a
// grace: the user stayed in the conversations' rosters (as away) for good,
// and the user's subscribers never got the offline status (a black-box
// audit, 2026-12-07). So the node keeps each grace it started until a lease
// renewal shows {g} intact past its end (the timers were there to fire),
// and after a resync (the lease found lost) ends them itself: runGraces.
type graceNote struct {
	user     string
	convs    []string  // the conversations whose grace timer it set
	userWide bool      // the user's last socket anywhere: the user's grace too
	at       time.Time // the disconnect (the user's last-seen)
	end      time.Time // node clock: when the grace ends
}

// graceSlack is how long past a grace's end a lease renewal must come to
// show that its timers were there to fire.
const graceSlack = 2 * time.Second

// noteGrace keeps a grace this node started (removeFrom).
func (e *RedisEngine) noteGrace(n graceNote) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.graces = append(e.graces, n)
}

// leaseIntact forgets the graces whose end a lease renewal at now, which
// found the node's lease in place (so {g} intact), is graceSlack past.
// Graces end in the order they start (one FlapGrace after), nearly.
func (e *RedisEngine) leaseIntact(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := 0
	for i < len(e.graces) && e.graces[i].end.Add(graceSlack).Before(now) {
		i++
	}
	if i > 0 {
		e.graces = append(e.graces[:0], e.graces[i:]...)
	}
}

// orphanGraces hands the graces kept to runGraces: the resync found the
// node's lease gone, with {g}'s timers maybe.
func (e *RedisEngine) orphanGraces() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.orphans = append(e.orphans, e.graces...)
	e.graces = nil
}

// runGraces ends the orphaned graces that are due: their conversations'
// timers are set again (convGrace ends each grace still there, and
// announces the leave, as ever; a timer still there is only moved), and a
// user whose record is gone, with no socket here, is announced offline,
// last seen at the disconnect (with a record, the user came back: nothing
// to end). A round trip that fails keeps them for the next tick.
func (e *RedisEngine) runGraces(ctx context.Context, now time.Time) error {
	e.mu.Lock()
	var due []graceNote
	keep := e.orphans[:0]
	for _, n := range e.orphans {
		if now.Before(n.end) {
			keep = append(keep, n)
		} else {
			due = append(due, n)
		}
	}
	e.orphans = keep
	e.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	pipe := e.rdb.Pipeline()
	recs := make([]*redis.BoolCmd, len(due))
	for i, n := range due {
		for _, c := range n.convs {
			dueIn.Run(ctx, pipe, []string{e.kDue}, "g\t"+c+"\t"+n.user, 0, 0, e.clk())
		}
		if n.userWide {
			recs[i] = pipe.HExists(ctx, e.kUsers, n.user)
		}
	}
	err := e.exec(ctx, pipe)
	e.duePoll.scheduled()
	if err != nil {
		e.mu.Lock()
		e.orphans = append(e.orphans, due...)
		e.mu.Unlock()
		return unavailable("flap graces", err)
	}
	var b batch
	for i, n := range due {
		if recs[i] == nil || recs[i].Val() {
			continue
		}
		if e.userHere(n.user).n == 0 {
			b = append(b, Event{Kind: EventStatus, UserID: n.user, At: now, Status: Offline, LastSeen: n.at})
		}
	}
	e.emit(ctx, b)
	return nil
}
