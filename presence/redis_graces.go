package presence

import (
	"cmp"
	"context"
	"time"
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
	if e.epochDue {
		return // (a resync's question is open: {g} may have been lost)
	}
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
// node's lease gone and {g}'s epoch changed, so its timers went too. (A
// node reaped in a stall also finds its lease gone, but {g} intact: the
// timers end its graces, and ending them here told the offline status
// twice; a review, 2026-12-07.)
func (e *RedisEngine) orphanGraces() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.orphans = append(e.orphans, e.graces...)
	e.graces = nil
}

// runGraces ends the orphaned graces that are due: each conversation's
// grace as its timer would (fire: convGrace ends it if it is still there,
// and its leave goes out), then, for a user whose record is gone with no
// socket here, the offline status, last seen at the disconnect (with a
// record, the user came back: nothing to end). What a failure, or Redis's
// clock, leaves of a grace is kept for a later tick.
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
	var back []graceNote
	var firstErr error
	for _, n := range due {
		b, rest, err := e.endGrace(ctx, n, now)
		e.emit(ctx, b)
		firstErr = cmp.Or(firstErr, err)
		if rest != nil {
			back = append(back, *rest)
		}
	}
	if len(back) > 0 {
		e.mu.Lock()
		e.orphans = append(e.orphans, back...)
		e.mu.Unlock()
	}
	return firstErr
}

// endGrace ends what it can of one orphaned grace (runGraces): it returns
// the events of what it ended, and what is left (nil: nothing). A
// conversation whose grace has not ended on Redis's clock gets its timer
// again and stays, with the user's status after it: the leaves go first.
// Before, a failure on one conversation dropped the leaves of those ended
// before it, never told again (a review, 2026-12-07).
func (e *RedisEngine) endGrace(ctx context.Context, n graceNote, now time.Time) (batch, *graceNote, error) {
	var b batch
	for i, c := range n.convs {
		item := "g\t" + c + "\t" + n.user
		ev, wait, noRecord, err := e.endConvGrace(ctx, c, n.user, false, now)
		if err == nil && noRecord {
			ev = append(ev, e.graceRecordLost(ctx, c, n, now)...)
		}
		if err == nil && wait > 0 {
			err = dueIn.Run(ctx, e.rdb, []string{e.kDue}, item, wait, 0, e.clk()).Err()
			e.duePoll.scheduled()
			if err == nil {
				n.end = now.Add(time.Duration(wait) * time.Millisecond)
			}
		}
		b = append(b, ev...)
		if err != nil || wait > 0 {
			n.convs = n.convs[i:]
			return b, &n, err
		}
	}
	n.convs = nil
	if !n.userWide {
		return b, nil, nil
	}
	pipe := e.rdb.Pipeline()
	rec := pipe.HExists(ctx, e.kUsers, n.user)
	first := pipe.SetNX(ctx, e.offlineToldKey(n.user), "1", e.offlineToldFor())
	if err := e.exec(ctx, pipe); err != nil {
		return b, &n, unavailable("flap graces", err)
	}
	// (a grace started after the loss, and before this node found it,
	// had its timers: one of them may have told the status already)
	if !rec.Val() && first.Val() && e.userHere(n.user).n == 0 {
		b = append(b, Event{Kind: EventStatus, UserID: n.user, At: now, Status: Offline, LastSeen: n.at})
	}
	return b, nil, nil
}

// graceRecordLost is the leave of an orphaned grace in conv whose member
// record is gone: Redis lost it with the grace's timers (a restart
// without persistence), and nobody else will announce it. Until
// 2026-12-07 nobody did, and the room's members kept the user for good
// (a black-box audit: the users who disconnected in the 3 s before a
// restart; their subscribers were told offline). Dated at the
// disconnect, now, unless a live socket of the user here is in conv (its
// removal says it), or Redis knows sockets of the user (on another node,
// whose reconciliation brings the record back if one is in conv): then it
// is held back and asked again (oweLeave). If the user came back and
// left since, the leave is told twice.
func (e *RedisEngine) graceRecordLost(ctx context.Context, conv string, n graceNote, now time.Time) batch {
	if isIn(e.userHere(n.user).convs, conv) {
		return nil
	}
	if has, err := e.rdb.HExists(ctx, e.kUsers, n.user).Result(); err != nil || has {
		e.oweLeave(conv, n.user, n.at, ReasonDisconnected, now)
		return nil
	}
	return batch{{Kind: EventLeave, ConversationID: conv, UserID: n.user, At: n.at, Reason: ReasonDisconnected}}
}

// offlineToldKey is P:{g}:off:U (userGrace).
func (e *RedisEngine) offlineToldKey(user string) string {
	return e.rcfg.Prefix + ":{g}:off:" + user
}

// offlineToldFor is how long userGrace notes a told offline status: past
// any grace that a node ends itself after {g}'s loss (endGrace), which
// ends within a lease renewal or two of its end.
func (e *RedisEngine) offlineToldFor() time.Duration {
	return e.cfg.FlapGrace + time.Minute
}
