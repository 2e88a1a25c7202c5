package presence

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Away checks run on the nodes, not in Redis: each node watches the users
// it has sockets of, in memory, and asks Redis (userAway, on Redis's clock)
// when a user's time seems to have come. An away timer per online user in
// the shared due set cost 105 bytes of Redis memory per user and a ZADD per
// activity record.
//
// A node checks a user AwayAfter after it connected one of the user's
// sockets or recorded the user's activity; if the user's activity (from
// any node) is more recent, Redis says how long to wait, and the node
// checks again then. A node records a user's activity at most once per
// activityEvery, so when a check comes, the node may have seen activity it
// did not record (at most activityEvery old): it records that activity
// then, at the time it happened, instead of asking (deferred). A user
// turns away AwayAfter after their last activity, not after their last
// record. Every node with sockets of the user has checked it by the time
// the recorded activity is AwayAfter old (each armed its check at its own
// last record, no later), so each has recorded what it saw before any of
// them turns the user away; only checks of two nodes at the same moment
// can race, and then a deferred record that lands after the user turned
// away brings them back at once. A node stops watching a user who is away or offline
// (activity, on whichever node records it, starts that node watching), or
// whose sockets here are gone. The one gap: a user brought back online by
// a node that then loses its sockets of the user while others remain. The
// disconnect script hands that user to a timer in the shared due set
// (userDisconnect), which any node fires.

// awaySlack is how much later than AwayAfter after the recorded activity a
// node checks a user whose activity another node recorded last, and when
// the timer of a user handed to the shared due set fires: that node's own
// check comes at that moment, and records first what it saw and did not
// record yet (a tick, the batch window and a round trip).
func (e *RedisEngine) awaySlack() time.Duration {
	return max(200*time.Millisecond, min(time.Second, e.cfg.AwayAfter/10))
}

// awayBatch bounds the checks of one round trip.
const awayBatch = 500

// awayWatch is a node's watch over its users.
type awayWatch struct {
	mu    sync.Mutex
	users map[string]*awayUser
	q     momentHeap[awayEntry]
	gen   uint64
}

type awayUser struct {
	socks int   // this node's sockets of the user
	at    int64 // unix ns of the next check; 0: not watched
	last  int64 // unix ns of the user's last activity this node saw
	gen   uint64
}

// awayEntry stands for its user's check while its gen is the user's.
type awayEntry struct {
	at   int64
	user string
	gen  uint64
}

func (x awayEntry) moment() int64 { return x.at }

func newAwayWatch() *awayWatch { return &awayWatch{users: map[string]*awayUser{}} }

// add counts a socket of user on this node.
func (w *awayWatch) add(user string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	u := w.users[user]
	if u == nil {
		u = &awayUser{}
		w.users[user] = u
	}
	u.socks++
}

// remove uncounts a socket of user; the user's last one ends the watch,
// and remove then returns the user's last activity this node saw (zero if
// none, or if the user has sockets here still).
func (w *awayWatch) remove(user string) (last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if u := w.users[user]; u != nil {
		if u.socks--; u.socks <= 0 {
			delete(w.users, user) // its heap entry is dropped when it comes up
			if u.last != 0 {
				last = time.Unix(0, u.last)
			}
		}
	}
	return last
}

// saw notes user's activity at t on this node (recorded or not).
func (w *awayWatch) saw(user string, t time.Time) {
	w.mu.Lock()
	if u := w.users[user]; u != nil {
		u.last = max(u.last, t.UnixNano())
	}
	w.mu.Unlock()
}

// lastSeen is the user's last activity this node saw (zero: none, or no
// socket of the user here).
func (w *awayWatch) lastSeen(user string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if u := w.users[user]; u != nil && u.last != 0 {
		return time.Unix(0, u.last)
	}
	return time.Time{}
}

// arm checks user at t, if this node has sockets of the user: later than
// a check already due sooner (whose entry then moves on), or sooner.
func (w *awayWatch) arm(user string, t time.Time) {
	at := t.UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	u := w.users[user]
	if u == nil {
		return
	}
	if u.at != 0 && u.at <= at {
		u.at = at // the entry comes up at the old time and moves on
		return
	}
	w.gen++
	u.at, u.gen = at, w.gen
	heap.Push(&w.q, awayEntry{at: at, user: user, gen: u.gen})
}

// due returns up to max users whose check has come by now; they are not
// watched until armed again.
func (w *awayWatch) due(now time.Time, max int) []string {
	t := now.UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for len(w.q) > 0 && w.q[0].at <= t && len(out) < max {
		x := heap.Pop(&w.q).(awayEntry)
		u := w.users[x.user]
		if u == nil || u.gen != x.gen || u.at == 0 {
			continue // dropped, or stood for by a newer entry
		}
		if u.at > t {
			heap.Push(&w.q, awayEntry{at: u.at, user: x.user, gen: u.gen})
			continue
		}
		u.at = 0
		out = append(out, x.user)
	}
	return out
}

// runAway checks the users whose time has come, a round trip per
// awayBatch: those Redis finds idle turn away; the others are checked
// again when their activity's AwayAfter has passed.
func (e *RedisEngine) runAway(ctx context.Context, now time.Time) error {
	for range 20 {
		due := e.away.due(now, awayBatch)
		if len(due) == 0 {
			return nil
		}
		users := due[:0]
		for _, u := range due {
			// activity seen here but not recorded yet (activityEvery)
			// keeps the user online: recorded now, at its time, and
			// the check moves on with it (sendActivity arms it)
			if last := e.away.lastSeen(u); !last.IsZero() && now.Before(last.Add(e.cfg.AwayAfter)) {
				if !e.recordLater(u, last) {
					e.away.arm(u, now.Add(time.Second)) // Redis is failing: retried in 1s
				}
				continue
			}
			users = append(users, u)
		}
		if len(users) == 0 {
			if len(due) < awayBatch {
				return nil
			}
			continue
		}
		pipe := e.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(users))
		for i, u := range users {
			cmds[i] = userAway.Run(ctx, pipe, []string{e.kUsers}, u, e.clk(), e.cfg.AwayAfter.Milliseconds())
		}
		lost := e.exec(ctx, pipe)
		var b batch
		var failed error
		for i, u := range users {
			v, err := cmds[i].Int64Slice()
			if abandoned(lost) {
				err = lost
			}
			switch {
			case err != nil || len(v) != 2:
				failed = cmp.Or(err, errors.New("unexpected reply of the away script"))
				e.away.arm(u, now.Add(time.Second)) // retried in 1s
			case v[0] == 1:
				b = append(b, Event{Kind: EventStatus, UserID: u, At: now, Status: Away})
			case v[1] > 0: // another node recorded a later activity
				e.away.arm(u, now.Add(time.Duration(v[1])*time.Millisecond+e.awaySlack()))
			}
		}
		e.emit(ctx, b)
		if failed != nil {
			return unavailable("away", failed)
		}
		if len(due) < awayBatch {
			return nil
		}
	}
	return nil
}
