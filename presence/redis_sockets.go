package presence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/timestamp"
	"github.com/redis/go-redis/v9"
)

// Connect implements Engine. The node's first connection claims its lease.
func (e *RedisEngine) Connect(ctx context.Context, s Socket) error {
	if err := redisSocketID(s.ID); err != nil {
		return err
	}
	if !e.held.Load() {
		if _, err := e.lease(ctx, e.cfg.Now(), false); err != nil {
			if errors.Is(err, errLeaseWait) {
				return unavailable("connect", err)
			}
			return err
		}
	}
	if err := e.registryRoom(ctx); err != nil {
		return unavailable("connect", err)
	}
	e.mu.Lock()
	if _, ok := e.local[s.ID]; ok {
		e.mu.Unlock()
		return nil
	}
	rs := &rSocket{id: s.ID, user: s.UserID, convs: map[string]struct{}{}, bucket: regHash(s.ID, e.regBuckets)}
	if p, ok := e.pending[s.ID]; ok {
		rs.bucket = p.bucket // its line, if any, stays where it is
	}
	e.local[s.ID] = rs
	e.away.add(s.UserID)    // under mu, as every change of local: paired with its remove
	delete(e.pending, s.ID) // a retried connect supersedes the cleanup of a failed one
	reg := registry(rs)     // under mu: a Join may already write rs.convs
	e.mu.Unlock()

	now := e.cfg.Now()
	pipe := e.rdb.Pipeline()
	pipe.HSet(ctx, e.regKey(rs), s.ID, reg)
	came := userConnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.UserID), e.userReserved(s.UserID)},
		s.UserID, s.ID, e.clk(), s.Max)
	if err := e.exec(ctx, pipe); err != nil {
		// The scripts may have run although the reply was lost: the
		// socket is cleaned up (idempotently) by the pending retries.
		e.mu.Lock()
		if e.local[s.ID] == rs { // not disconnected meanwhile
			delete(e.local, s.ID)
			e.away.remove(s.UserID)
		}
		e.pending[s.ID] = rs
		e.mu.Unlock()
		return unavailable("connect", err)
	}
	n, _ := came.Int()
	if n < 0 {
		e.refused(ctx, rs)
		return ErrTooManySockets
	}
	e.away.saw(s.UserID, now) // a connect is activity (a resync gives it again)
	e.away.arm(s.UserID, now.Add(e.cfg.AwayAfter))
	e.noteActivity(s.UserID, now) // userConnect recorded it
	if n == 1 {
		e.emit(ctx, batch{{Kind: EventStatus, UserID: s.UserID, At: now, Status: Online}})
	}
	e.cleanIfGone(rs)
	return nil
}

// refused takes back what Connect wrote for a socket that userConnect
// refused: its local entry and its registry line (in the same pipeline as
// the script: the registry is in the node's slot). A line that cannot be
// removed now is left to the pending cleanup, which finds the socket in
// no list.
func (e *RedisEngine) refused(ctx context.Context, rs *rSocket) {
	e.mu.Lock()
	if e.local[rs.id] == rs {
		delete(e.local, rs.id)
		e.away.remove(rs.user)
	}
	e.mu.Unlock()
	pipe := e.rdb.Pipeline()
	pipe.HDel(ctx, e.regKey(rs), rs.id)
	if err := e.exec(ctx, pipe); err != nil {
		e.mu.Lock()
		if _, live := e.local[rs.id]; !live {
			e.pending[rs.id] = rs
		}
		e.mu.Unlock()
	}
}

// redisSocketID refuses a socket id with a character that separates
// fields in the Redis layout (the library's ids are base64url).
func redisSocketID(id string) error {
	if id == "" || strings.ContainsAny(id, ",|\t") {
		return fmt.Errorf("presence: socket id %q is empty or has one of , | or a tab", id)
	}
	return nil
}

// cleanIfGone queues the removal of a socket that disconnected while an
// operation of it was under way: the disconnect's removal may have run in
// Redis before that operation's writes, which would be left behind.
func (e *RedisEngine) cleanIfGone(s *rSocket) {
	e.mu.Lock()
	if _, live := e.local[s.id]; !live {
		e.pending[s.id] = s
	}
	e.mu.Unlock()
}

// Disconnect implements Engine.
func (e *RedisEngine) Disconnect(ctx context.Context, socketID string) error {
	mode := "grace"
	if e.cfg.FlapGrace <= 0 {
		mode = "now"
	}
	return e.disconnect(ctx, socketID, mode)
}

// DisconnectNow implements Engine.
func (e *RedisEngine) DisconnectNow(ctx context.Context, socketID string) error {
	return e.disconnect(ctx, socketID, "now")
}

// disconnect removes a socket of this node, in mode "grace" (removeFrom)
// or "now".
func (e *RedisEngine) disconnect(ctx context.Context, socketID, mode string) error {
	e.mu.Lock()
	s, ok := e.local[socketID]
	if ok {
		s.mode, s.gone = mode, e.redisNow()
		delete(e.local, socketID)
		if last := e.away.remove(s.user); !last.IsZero() {
			s.act = s.gone - e.cfg.Now().Sub(last).Milliseconds()
		}
		e.leaving[socketID] = struct{}{} // not a ghost: the reconciliation leaves it alone
	}
	e.mu.Unlock()
	if !ok {
		return nil
	}
	now := e.cfg.Now()
	b, err := e.removeSocket(ctx, s, now, false)
	e.emit(ctx, b)
	e.mu.Lock()
	delete(e.leaving, socketID)
	if err != nil {
		// keep it for Tick to retry: no entry is left behind for good
		s.failed = true
		e.pending[socketID] = s
	}
	e.mu.Unlock()
	return err
}

// removeSocket removes a disconnected socket of this node, in the mode
// its Disconnect gave it ("grace" if none did). A retry (of a removal that
// failed: Redis was unreachable) dates it at its disconnect, not now: the
// user's last-seen is when the socket went.
func (e *RedisEngine) removeSocket(ctx context.Context, s *rSocket, now time.Time, retry bool) (batch, error) {
	mode := s.mode
	if mode == "" {
		mode = "grace"
	}
	var at time.Time
	if retry && s.gone != 0 {
		at = timestamp.FromMillis(s.gone)
	}
	return e.removeFrom(ctx, e.regKey(s), s, now, mode, at, false)
}

// removeFrom removes a socket from its conversations and user, and
// schedules the grace timers, in one pipelined round trip. mode "grace"
// (the leaves and offline wait for the flap grace), "now" (they happen
// now, reason disconnected) or "timeout" (now, reason timeout). lastProof,
// if set, is the moment the socket was last there (a dead node's last
// proof of life, or the disconnect of a retried removal); unset, now.
// reaped: s is a dead node's (see runLeave).
//
// A removal that is a reap's, or the retry of one that failed (s.failed),
// and finds no record of the user in a conversation (or no user record)
// announces the leave (or the offline status) itself, dated lastProof,
// unless the user has other sockets by Redis's user record, or a live
// socket of this node's holds the user there (their records come back
// with their node's reconciliation, which announces them; this node's
// are marked to make the announcement at their own removal, owe): Redis lost
// the records since the socket joined (a restart without persistence, or
// a Redis Cluster master without replica that came back empty), or the
// failed attempt ran and its reply was lost in mode "now". Nobody
// announced that user's leave, and the others' clients showed the user
// there for good (a black-box audit, 2026-12-07). Where the records went
// otherwise (this node was reaped while alive, or a grace ended between a
// lost reply and its retry), the leave is announced twice.
func (e *RedisEngine) removeFrom(ctx context.Context, regKey string, s *rSocket, now time.Time, mode string, lastProof time.Time, reaped bool) (batch, error) {
	at := ""
	if !lastProof.IsZero() {
		at = strconv.FormatInt(timestamp.Millis(lastProof), 10)
	}
	grace := e.cfg.FlapGrace.Milliseconds()
	delay := grace // until the grace's timers are due
	if !lastProof.IsZero() {
		// dated earlier (a retry): the grace ends that long after it
		// (maybe past: due at once), at the user's deadline, so that the
		// leaves go first, then the status, as always
		delay = timestamp.Millis(lastProof) + grace - e.redisNow()
	}
	// s.convs is written under mu by a Leave, Join or undoJoin of the same
	// socket that may still be running.
	e.mu.Lock()
	convs := sortedKeys(s.convs)
	lost := reaped || s.failed
	unsure := maps.Clone(s.unsure)
	e.mu.Unlock()
	pipe := e.rdb.Pipeline()
	leaves := make([]*redis.Cmd, len(convs))
	for i, c := range convs {
		leaves[i] = e.runLeave(ctx, pipe, c, s.id, s.user, mode, grace, at, reaped)
		if mode == "grace" {
			// The grace's timer goes in the same round trip, whether or
			// not this was the user's last socket there (if not, it finds
			// nothing to do): a retry after a failure, whose leave finds
			// the socket gone, still leaves the timer scheduled.
			dueIn.Run(ctx, pipe, []string{e.kDue}, "g\t"+c+"\t"+s.user, delay, 0, e.clk())
		}
	}
	act := ""
	if s.act != 0 {
		act = strconv.FormatInt(s.act, 10)
	}
	user := userDisconnect.Run(ctx, pipe, []string{e.kUsers, e.kDue, e.userSockets(s.user)}, s.user, s.id, e.clk(), mode, grace, at, (e.cfg.AwayAfter + e.awaySlack()).Milliseconds(), act)
	pipe.HDel(ctx, regKey, s.id)
	err := e.exec(ctx, pipe)
	e.duePoll.scheduled() // (a failed write may have landed)
	if err != nil {
		return nil, unavailable("disconnect", err)
	}
	lostAt := lastProof
	if lostAt.IsZero() {
		lostAt = now
	}
	u, _ := user.Int64Slice()
	if mode == "grace" && grace > 0 {
		// After the round trip: Redis's clock (the timers') has passed the
		// moment the grace started, if it is this machine's.
		e.alarm.set(time.Now().Add(e.cfg.FlapGrace))
		e.noteGrace(graceNote{user: s.user, convs: convs, at: lostAt, end: lostAt.Add(e.cfg.FlapGrace),
			userWide: len(u) >= 4 && u[0] == 0 && u[2] == 0 && u[3] == 0})
	}
	var here *userHere // this node's live sockets of the user, if lost asks
	var b batch
	var told []string // the conversations of leaves lost records made this removal tell
	for i, c := range convs {
		v, _ := leaves[i].Int64Slice()
		if len(v) < 3 {
			continue
		}
		if e.leaveTyping(c, s.id, s.user, v) {
			b = append(b, Event{Kind: EventTyping, ConversationID: c, UserID: s.user, At: now, Typing: false})
		}
		switch {
		case v[1] == 1:
			b = append(b, Event{Kind: EventLeave, ConversationID: c, UserID: s.user, At: timestamp.FromMillis(v[2]), Reason: reasonOf(mode)})
		case lost && len(v) >= 6 && v[5] == 1 && !isIn(unsure, c):
			if here == nil {
				here = e.userHere(s.user)
			}
			// the user's sockets on other nodes, by Redis's user record
			// (which counts this node's too): with any, the lost record
			// may be theirs to bring back (their node's reconciliation),
			// or they may not be in c: asked again later (owe)
			elsewhere := len(u) >= 4 && u[3] > int64(here.n)
			switch {
			case isIn(here.convs, c): // a live socket here says it (owe)
			case elsewhere:
				e.oweLeave(c, s.user, lostAt, reasonOf(mode), now)
			default:
				b = append(b, Event{Kind: EventLeave, ConversationID: c, UserID: s.user, At: lostAt, Reason: reasonOf(mode)})
				told = append(told, c)
			}
		}
	}
	if len(u) >= 2 && u[0] == 1 {
		b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Offline, LastSeen: timestamp.FromMillis(u[1])})
	} else if lost && len(u) >= 3 && u[2] == 1 {
		if here == nil {
			here = e.userHere(s.user)
		}
		if here.n == 0 {
			b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Offline, LastSeen: lostAt})
		}
	}
	if here != nil && here.n > 0 {
		e.owe(s.user) // what was held back for them
	}
	spoken := make([]owedKey, len(told))
	for i, c := range told {
		spoken[i] = owedKey{c, s.user}
	}
	e.markSpoken(ctx, spoken, now)
	return b, nil
}

// markSpoken notes in Redis, for a while, that each pair's user's
// presence in its conversation was spoken for after records were lost
// (best effort): a removal told the leave for the lost records, or a node
// registered a socket of the user there again (register; its join told, a leave to come is its
// node's). A leave of the user there that another node held back
// (oweLeave) before that moment is not told then. Before, when two sockets
// of a user on two nodes went during one outage, the second removal told
// the leave and the first node told it again minutes later; and so when
// the other node brought the record back and the user left normally
// through it (two reviews, 2026-12-07).
func (e *RedisEngine) markSpoken(ctx context.Context, pairs []owedKey, now time.Time) {
	if len(pairs) == 0 {
		return
	}
	at := strconv.FormatInt(timestamp.Millis(now), 10)
	pipe := e.rdb.Pipeline()
	for _, k := range pairs {
		pipe.Set(ctx, e.spokenKey(k.conv, k.user), at, e.owedAfter()+time.Minute)
	}
	if err := e.exec(ctx, pipe); err != nil {
		e.log.Warn("could not note presences spoken for after lost records", "records", len(pairs), "err", err)
	}
}

// spokenKey is P:{c:C}:ll:U (markSpoken).
func (e *RedisEngine) spokenKey(conv, user string) string {
	return e.rcfg.Prefix + ":{c:" + conv + "}:ll:" + user
}

// spokenSkew is how much earlier than a hold-back a markSpoken may be
// dated and still count as after it: the nodes' clocks differ.
const spokenSkew = 5 * time.Second

// owe marks this node's live sockets of user: an announcement of the user's
// leave (or offline status) was held back for them (removeFrom's lost), and
// their own removal, if it finds the record still missing, makes it. Before,
// the user's last socket here left without a word when Redis had not listed
// it again meanwhile (a review, 2026-12-07).
func (e *RedisEngine) owe(user string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.local {
		if s.user == user {
			s.failed = true
		}
	}
}

type owedKey struct{ conv, user string }

// owedLeave is a leave held back for a user's sockets on other nodes.
type owedLeave struct {
	at     time.Time // the removal's moment (the leave's date)
	reason string
	held   time.Time // node clock: when it was held back
	due    time.Time // node clock: when to ask again
}

// oweLeave holds back the leave of user from conv, whose member record a
// lost removal found missing while Redis listed sockets of the user on
// other nodes: if one of them is in conv, its node's reconciliation brings
// the record back (a leave told meanwhile stood until then, minutes with a
// silent loss); if none is, nobody else will announce it. So the question is
// asked again once that reconciliation is sure to have run (owedAfter):
// until 2026-12-07 it never was, and a user whose other sockets were not
// in conv stayed in its rosters for good.
func (e *RedisEngine) oweLeave(conv, user string, at time.Time, reason string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := owedKey{conv, user}
	if _, ok := e.owed[k]; !ok {
		e.owed[k] = owedLeave{at: at, reason: reason, held: now, due: now.Add(e.owedAfter())}
	}
}

// owedAfter is how long a held-back leave waits: past the member checks
// of every node's reconciliation (two of every memberCheckEvery, the
// second registering again what both found missing: at most
// memberCheckEvery+1 reconciliations after a loss), with some to spare.
func (e *RedisEngine) owedAfter() time.Duration {
	return (memberCheckEvery + 4) * e.rcfg.ReconcileEvery
}

// runOwed announces the held-back leaves that are due whose member record
// is still missing, unless another node spoke for the user there since
// (markSpoken) or a live socket here has joined the conversation since
// (its own removal says it then). A read that fails keeps its leave
// for the next tick.
func (e *RedisEngine) runOwed(ctx context.Context, now time.Time) error {
	e.mu.Lock()
	var due []owedKey
	for k, o := range e.owed {
		if !now.Before(o.due) {
			due = append(due, k)
		}
	}
	e.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	pipe := e.rdb.Pipeline()
	recs := make([]*redis.BoolCmd, len(due))
	spoken := make([]*redis.StringCmd, len(due))
	for i, k := range due {
		recs[i] = pipe.HExists(ctx, e.conv(k.conv).m, k.user)
		spoken[i] = pipe.Get(ctx, e.spokenKey(k.conv, k.user))
	}
	err := e.exec(ctx, pipe)
	if errors.Is(err, redis.Nil) {
		err = failedCmd(pipe.Cmds())
	}
	var b batch
	for i, k := range due {
		if recs[i].Err() != nil || (spoken[i].Err() != nil && !errors.Is(spoken[i].Err(), redis.Nil)) {
			continue
		}
		here := e.userHere(k.user)
		e.mu.Lock()
		o := e.owed[k]
		delete(e.owed, k)
		e.mu.Unlock()
		ms, _ := strconv.ParseInt(spoken[i].Val(), 10, 64) // (0 if none)
		spokenSince := ms != 0 && !timestamp.FromMillis(ms).Before(o.held.Add(-spokenSkew))
		if !recs[i].Val() && !spokenSince && !isIn(here.convs, k.conv) {
			b = append(b, Event{Kind: EventLeave, ConversationID: k.conv, UserID: k.user, At: o.at, Reason: o.reason})
		}
	}
	e.emit(ctx, b)
	return unavailable("held-back leaves", err)
}

// userHere is what this node's live sockets of a user hold: how many they
// are, and the conversations they joined.
type userHere struct {
	n     int
	convs map[string]struct{}
}

// userHere reads this node's live sockets of user (a walk of them all:
// only for removeFrom's lost).
func (e *RedisEngine) userHere(user string) *userHere {
	h := &userHere{convs: map[string]struct{}{}}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.local {
		if s.user != user {
			continue
		}
		h.n++
		for c := range s.convs {
			h.convs[c] = struct{}{}
		}
	}
	return h
}

func reasonOf(mode string) string {
	switch mode {
	case "timeout":
		return ReasonTimeout
	case "left":
		return ReasonLeft
	}
	return ReasonDisconnected
}

func (e *RedisEngine) socket(id string) (*rSocket, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.local[id]
	if !ok {
		return nil, ErrUnknown
	}
	return s, nil
}
