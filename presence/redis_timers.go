package presence

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/timestamp"
)

// runDue runs the timers that are due: grace ends, the away checks handed
// over by a disconnect (redis_away.go), and typing expiries scheduled by
// earlier releases (this node's own are in memory: runTyping).
// Timers are claimed, fired, then acknowledged: a node that dies (or loses
// a reply) between the two leaves them claimed, and they fire again, on
// any node, once the claim runs out. Firing is idempotent: each script
// checks that its moment has come and its work is not done yet, and only
// a change it makes is announced.
func (e *RedisEngine) runDue(ctx context.Context, now time.Time) error {
	if due, err := e.anyDue(ctx); err != nil || !due {
		return err
	}
	for range 10 { // at most 10 × 200 timers per tick
		raw, err := claimDue.Run(ctx, e.rdb, []string{e.kDue, e.kClaimed}, e.clk(), 200, timerClaim.Milliseconds()).Slice()
		if err != nil || len(raw) == 0 {
			return unavailable("timers", err)
		}
		claim, items := raw[0], raw[1:]
		if len(items) == 0 {
			return nil
		}
		var b batch
		var failed int
		ack := []any{claim, e.clk()}
		for _, x := range items {
			it, _ := x.(string)
			ev, wait, err := e.fire(ctx, it, now)
			b = append(b, ev...)
			if err != nil {
				failed++
				wait = time.Second.Milliseconds() // retried in 1s
			}
			ack = append(ack, it, wait)
		}
		e.emit(ctx, b)
		err = ackDue.Run(ctx, e.rdb, []string{e.kDue, e.kClaimed}, ack...).Err()
		e.duePoll.scheduled() // (the ack may have scheduled some again)
		if err != nil {
			return unavailable("timers ack", err) // they fire again when the claim runs out
		}
		if failed > 0 {
			return unavailable("timers", fmt.Errorf("%d timers failed; retried in 1s", failed))
		}
		if len(items) < 200 {
			return nil
		}
	}
	return nil
}

// anyDue reports whether a timer may be due by this node's estimate of
// Redis's clock (redisNow), or, once a second, a claim have run out (its
// node died before acknowledging it; claims last timerClaim): one plain
// range read, where the claim script cost Redis a script call on every
// tick of every node (20 a second each), almost always to find nothing. An
// estimate behind Redis's clock finds a timer a tick later; one ahead of it
// runs the claim script, which goes by Redis's own clock and finds nothing
// yet.
//
// The due set is read only when it may hold something due (duePoll): at
// the earliest timer the last read found, on the tick after this node
// scheduled one, and otherwise once every dueRecheck, for the timers of
// a node that died before firing them (a live node fires its own: it reads
// the set on the tick after it scheduled them, and then at their moment).
// Before 2026-12-07 every tick read it, 20 reads a second on an idle node.
func (e *RedisEngine) anyDue(ctx context.Context) (bool, error) {
	ms := e.redisNow()
	now := strconv.FormatInt(ms, 10)
	gen, poll := e.duePoll.due(ms)
	pipe := e.rdb.Pipeline()
	var first *redis.ZSliceCmd
	if poll {
		first = pipe.ZRangeByScoreWithScores(ctx, e.kDue, &redis.ZRangeBy{Min: "-inf", Max: "+inf", Count: 1})
	}
	var claimed *redis.StringSliceCmd
	if at := e.claimsAt.Load(); ms >= at || ms < at-time.Second.Milliseconds() { // (or the clock went back)
		e.claimsAt.Store(ms + time.Second.Milliseconds())
		claimed = pipe.ZRangeByScore(ctx, e.kClaimed, &redis.ZRangeBy{Min: "-inf", Max: now, Count: 1})
	}
	if len(pipe.Cmds()) == 0 {
		return false, nil
	}
	if err := e.exec(ctx, pipe); err != nil {
		e.claimsAt.Store(0)
		return false, unavailable("timers", err)
	}
	due := false
	if first != nil {
		next := ms + dueRecheck.Milliseconds()
		if z := first.Val(); len(z) > 0 {
			next = min(next, int64(z[0].Score))
			due = int64(z[0].Score) <= ms
		}
		e.duePoll.read(gen, next)
	}
	return due || (claimed != nil && len(claimed.Val()) > 0), nil
}

// dueRecheck is how often a node reads the due set when it knows of no
// timer due sooner.
const dueRecheck = time.Second

// duePoll is when anyDue reads the due set next: at ms (redisNow), or at
// the next tick after a timer was scheduled here (scheduled) or was due.
type duePoll struct {
	mu  sync.Mutex
	at  int64  // ms; 0: at the next tick
	gen uint64 // timers scheduled here so far
}

// due reports whether the set is to be read at ms, and the count of
// timers scheduled so far, for read.
func (d *duePoll) due(ms int64) (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gen, ms >= d.at || ms < d.at-dueRecheck.Milliseconds() // (or the clock went back)
}

// read sets the next read at next (the earliest timer found, or
// dueRecheck on), unless a timer was scheduled here since the read was
// sent (gen): the read may have missed it.
func (d *duePoll) read(gen uint64, next int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen == gen {
		d.at = next
	}
}

// scheduled asks for a read at the next tick: this node has just written a
// timer (whether or not the write succeeded: it may have landed), or fired
// some (which may be due again).
func (d *duePoll) scheduled() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	d.at = 0
}

// endConvGrace runs convGrace: user's flap grace in conv ends if it is
// due (or, early, if it runs). noRecord: the user has no member record
// there.
func (e *RedisEngine) endConvGrace(ctx context.Context, conv, user string, early bool, now time.Time) (b batch, wait int64, noRecord bool, err error) {
	return e.convGraceEnded(e.runConvGrace(ctx, e.rdb, conv, user, early), conv, user, now)
}

// runConvGrace queues (or runs, on e.rdb) convGrace for user in conv.
func (e *RedisEngine) runConvGrace(ctx context.Context, c redis.Scripter, conv, user string, early bool) *redis.Cmd {
	k := e.conv(conv)
	args := []any{user, e.clk()}
	if early {
		args = append(args, "1")
	}
	return convGrace.Run(ctx, c, []string{k.on, k.m, k.ty, k.tyo}, args...)
}

// convGraceEnded reads convGrace's reply (runConvGrace).
func (e *RedisEngine) convGraceEnded(cmd *redis.Cmd, conv, user string, now time.Time) (b batch, wait int64, noRecord bool, err error) {
	v, err := cmd.Int64Slice()
	if err != nil || len(v) < 4 {
		return nil, 0, false, unavailable("grace", err)
	}
	noRecord = len(v) >= 5 && v[4] == 1
	if v[2] == 1 {
		b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: user, At: now, Typing: false})
	}
	if v[0] == 1 {
		b = append(b, Event{Kind: EventLeave, ConversationID: conv, UserID: user, At: timestamp.FromMillis(v[1]), Reason: ReasonDisconnected})
	}
	return b, v[3], noRecord, nil
}

// endGracesChunk bounds the users of one EndGraces pipeline.
const endGracesChunk = 500

// EndGraces implements Engine: one pipeline per endGracesChunk users.
func (e *RedisEngine) EndGraces(ctx context.Context, conv string, users []string) error {
	now := e.cfg.Now()
	for len(users) > 0 {
		chunk := users[:min(len(users), endGracesChunk)]
		users = users[len(chunk):]
		pipe := e.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(chunk))
		for i, u := range chunk {
			cmds[i] = e.runConvGrace(ctx, pipe, conv, u, true)
		}
		_ = e.exec(ctx, pipe) // (each reply says its own)
		var b batch
		var firstErr error
		for i, u := range chunk {
			ev, _, _, err := e.convGraceEnded(cmds[i], conv, u, now)
			b = append(b, ev...)
			firstErr = cmp.Or(firstErr, err)
		}
		e.emit(ctx, b)
		if firstErr != nil {
			return firstErr
		}
	}
	return nil
}

// fire runs one timer and returns its events, and how long until it must
// run again (0: done). A timer that finds its moment not come yet (the
// timer's clock and the data's are different Redis servers, or a failover
// moved the clock) runs again when the time that remains has passed.
func (e *RedisEngine) fire(ctx context.Context, item string, now time.Time) (b batch, wait int64, err error) {
	f := strings.Split(item, "\t")
	switch {
	case f[0] == "t" && len(f) == 2: // scheduled by a release before 2026-12-04 (runTyping now)
		k := e.conv(f[1])
		raw, err := typingExpire.Run(ctx, e.rdb, []string{k.ty, k.tyo}, e.clk()).Slice()
		if err != nil || len(raw) != 2 {
			return nil, 0, unavailable("typing expiry", err)
		}
		for _, u := range strs(raw[0]) {
			b = append(b, Event{Kind: EventTyping, ConversationID: f[1], UserID: u, At: now, Typing: false})
		}
		return b, toInt(raw[1]), nil
	case f[0] == "g" && len(f) == 3:
		b, wait, _, err := e.endConvGrace(ctx, f[1], f[2], false, now)
		return b, wait, err
	case f[0] == "u" && len(f) == 2:
		v, err := userGrace.Run(ctx, e.rdb, []string{e.kUsers, e.kDue, e.offlineToldKey(f[1])}, f[1], e.clk(), e.offlineToldFor().Milliseconds()).Int64Slice()
		if err != nil || len(v) != 3 {
			return nil, 0, unavailable("grace", err)
		}
		if v[0] == 1 {
			b = append(b, Event{Kind: EventStatus, UserID: f[1], At: now, Status: Offline, LastSeen: timestamp.FromMillis(v[1])})
		}
		return b, v[2], nil
	case f[0] == "a" && len(f) == 2:
		v, err := userAway.Run(ctx, e.rdb, []string{e.kUsers}, f[1], e.clk(), e.cfg.AwayAfter.Milliseconds()).Int64Slice()
		if err != nil || len(v) != 2 {
			return nil, 0, unavailable("away", err)
		}
		if v[0] == 1 {
			b = append(b, Event{Kind: EventStatus, UserID: f[1], At: now, Status: Away})
		}
		if v[1] > 0 {
			v[1] += e.awaySlack().Milliseconds()
		}
		return b, v[1], nil
	}
	e.log.Warn("unknown timer dropped", "timer", item)
	return nil, 0, nil
}
