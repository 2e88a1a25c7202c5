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

// joinedSocket returns a local socket joined to conv, and not leaving it.
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
	if _, leaving := e.leavingConv[sidConv{socketID, conv}]; leaving {
		return nil, ErrNotJoined
	}
	return s, nil
}

type sidConv struct{ sid, conv string }

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
// ZADD (GT) adds the entry announces it (or, rarely, also one that moved
// this node's expired start, not yet removed), of concurrent stops only
// the one whose ZREM removes it. A start is HGET and ZADD, a stop ZREM:
// until 2026-12-07 a start read the entry's expiry (ZSCORE) to tell an
// expired entry, which this node knows of its own starts (prior), and
// each change wrote the typist's socket (tyo), which this node knows too
// (typedBy). The member record read beside a start says whether
// Redis has the socket joined, as this node does (joinedSocket): if not (its
// entries were reaped, or Redis lost them, and the resync has not run
// yet), an entry the start added is taken back and the change refused.
// A member record of a release before 2026-12-02 lists no sockets: for
// one of those only, su is read as well, in a second round trip.
//
// A stop reads no member record: it can only take an entry away, and one
// that a start added passed that check; if Redis has lost the socket
// since, the stop of what the others were shown is still right to
// announce. Each command costs Redis its dispatch, statistics and latency
// histogram on top of its own work.
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
	exp := rnow + e.cfg.TypingTTL.Milliseconds()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	var rec *redis.StringCmd
	var changed *redis.IntCmd
	mark := e.typing.mark() // a stop forgets only the starts noted before it was sent
	// A stop goes to every socket told of the start: all but the one the
	// announcement left out, which is this one unless another socket of
	// the user's made the start (this one refreshed it, was told, and
	// stops it now), and unknown here if another node announced it (to
	// all then). Until 2026-12-07 the stopping socket was left out, and
	// showed its own user typing for good (a black-box audit).
	except := socketID
	if !start {
		except = e.typing.toldOf(conv, s.user)
	}
	var expired bool
	if start {
		expired = e.typing.sendStart(conv, s.user, socketID, exp, rnow)
	}
	if start {
		rec = pipe.HGet(ctx, k.m, s.user)
		// GT: an entry that is there only moves later; the reply counts
		// the entries added, as NX's would
		changed = pipe.ZAddGT(ctx, k.ty, redis.Z{Score: float64(exp), Member: s.user})
	} else {
		changed = pipe.ZRem(ctx, k.ty, s.user)
	}
	err = e.exec(ctx, pipe)
	if err == nil || errors.Is(err, redis.Nil) { // (exec's error is the first command's)
		err = failedCmd(pipe.Cmds())
	}
	if start {
		// the entry's expiry is this node's to fire (typingTimers), set
		// after the write, failed or not (it may have landed): a check
		// that ran meanwhile and missed the entry cannot have dropped it.
		// The alarm wakes the timer loop then: expiries fired on the
		// tick alone came in bursts, every 50 ms the fan-out of all those
		// due since the last, and the changes arriving meanwhile waited
		// behind it.
		if err != nil {
			e.typing.startFailed(conv, s.user, socketID, now.Add(e.cfg.TypingTTL), exp, now)
		} else {
			e.typing.started(conv, s.user, socketID, now.Add(e.cfg.TypingTTL), exp)
		}
		e.typing.sent(conv, s.user, socketID, exp)
		e.typingAlarm.set(time.Now().Add(e.cfg.TypingTTL)) // the alarm's clock is the real one
	}
	if err != nil {
		return unavailable("typing", err)
	}
	if !start {
		e.typing.stopped(conv, s.user, mark) // its ZREM ran
	} else if err := e.typingStartJoined(ctx, k, conv, s.user, socketID, rec.Val(), changed.Val() == 1); err != nil {
		return err
	} else if _, err := e.joinedSocket(socketID, conv); err != nil {
		return e.typingTakeBack(ctx, k, conv, s.user, socketID, exp, changed.Val() == 1, now)
	}
	// Whoever adds an entry announces the start, whoever removes one the
	// stop. A start that moved (GT) this node's last start of the user
	// there, expired and not yet removed (its expiry check had not run),
	// announces that one's stop first: nobody will remove the expired
	// entry then. If the check removed it meanwhile (and announced the
	// stop), the start added the entry anew: the start alone. A start that
	// moves an expired entry of another node's (in the few ms before that
	// node's check) announces nothing, and the check leaves the entry,
	// moved later: the others see the user typing on.
	var b batch
	switch {
	case changed.Val() == 1:
		if start {
			e.typing.announced(conv, s.user, socketID)
			e.typing.waitCheck(ctx, conv)
		}
	case start && expired: // this node's last start there had expired
		e.typing.announced(conv, s.user, socketID)
		b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: false})
	default:
		return nil
	}
	e.emit(ctx, append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: start, ExceptSocket: except}))
	return nil
}

// typingTakeBack takes back a start (its entry, written at score exp)
// whose socket left the conversation, or disconnected, while it was
// written: the leave, if its script ran before the start's ZADD, found no
// entry to take (typedBy), and the entry stayed until its expiry (1 race
// in 100 of TestTypingStartRacingDisconnect). If the entry is still the
// start's, it goes: unannounced if the start added it, else (it moved the
// user's entry, shown typing) with the stop. That entry may have been
// another socket's of the user, still typing: it shows typing again at
// its next start. The caller gets ErrNotJoined.
func (e *RedisEngine) typingTakeBack(ctx context.Context, k convKeys, conv, user, sid string, exp int64, added bool, now time.Time) error {
	removed, err := typingTakeBack.Run(ctx, e.rdb, []string{k.ty}, user, exp).Int()
	if err != nil {
		return unavailable("typing", err)
	}
	if removed == 1 {
		e.typing.forgetTyped(conv, user, sid, exp)
		if !added {
			e.emit(ctx, batch{{Kind: EventTyping, ConversationID: conv, UserID: user, At: now, Typing: false}})
		}
	}
	return ErrNotJoined
}

// typingStartJoined checks a start against the member record read beside
// it (rec): ErrNotJoined if Redis does not have the socket joined, and the
// entry the start added (added) taken back.
func (e *RedisEngine) typingStartJoined(ctx context.Context, k convKeys, conv, user, socketID, rec string, added bool) error {
	var legacySU string
	if legacyMember(rec) {
		var err error
		legacySU, err = e.rdb.HGet(ctx, k.su, socketID).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return unavailable("typing", err)
		}
	}
	if memberHas(rec, legacySU, socketID, user) {
		return nil
	}
	e.redisFailed() // Redis lost the record (or a leave is under way): check

	if added {
		if err := e.rdb.ZRem(ctx, k.ty, user).Err(); err != nil {
			e.log.Warn("typing entry of a socket Redis does not have joined left for its expiry", "sid", socketID, "conversation_id", conv, "err", err)
		}
	}
	return ErrNotJoined
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

// legacyMember reports whether a member record is of a release before
// 2026-12-02 ("n|since|graceDeadline|leftAt": no socket list; its sockets
// are in su).
func legacyMember(rec string) bool {
	_, _, legacy, ok := parseMember(rec)
	return ok && legacy
}

// memberHas reports whether a member record (see memberLib) lists socket
// sid, under its tag or its id; a record without a socket list has its
// sockets in su (legacySU: su's entry for sid, the user if it is there).
func memberHas(rec, legacySU, sid, user string) bool {
	_, socks, legacy, ok := parseMember(rec)
	if !ok {
		return false
	}
	if legacy {
		return legacySU == user
	}
	tag := memberTag(sid)
	for socks != "" {
		var one string
		one, socks, _ = strings.Cut(socks, ",")
		if one == tag || one == sid {
			return true
		}
	}
	return false
}

// typingTimers are the moments at which typing entries this node wrote may
// have expired, per conversation: the node that recorded a typing start
// fires its expiry, as a Node server's timer per socket does, instead of a
// cluster-wide timer in Redis (P:{g}:due), which cost three scripts more
// per typing session (schedule, claim, acknowledge). The node also knows
// which of its sockets typed last (own's sid): that socket's leave or
// disconnect takes the entry with it (convLeave, typedBy). Nothing is lost
// if the node dies: its reaper adopts the typing entries of the users it
// leaves in a conversation (adopt) and fires their expiries; a user that
// leaves altogether takes the entry with it. (Until 2026-12-07 each start
// wrote its socket into a hash, tyo, and each stop deleted it: a command
// more per change, for what the node knows.)
//
// The node keeps its own starts (own) until their stop, as a Node server
// clears a socket's timer: a conversation whose moment comes with none of
// them expired costs no round trip. Before, each moment ran typingExpire,
// which mostly found nothing (the stop had come) and set the next moment:
// in the typing benchmark at 100 changes/s, 100 script calls a second, the
// larger part of Redis's command time. A start that expired costs a check
// (runTyping), which removes the entries expired by then, the start's own
// among them if its expiry is still the one it wrote (score): one that a
// start on another node moved later is that node's to fire.
type typingTimers struct {
	mu    sync.Mutex
	at    map[string]time.Time            // conversation → earliest moment (node clock)
	own   map[string]map[string]ownTyping // conversation → user → this node's start, until its stop
	queue momentHeap[typingMoment]        // the moments in order; an entry at doesn't hold any more is skipped
	seq   uint64                          // starts noted so far (mark)
	// checking holds the conversations whose check is under way, each
	// with a channel closed once the check's stops are delivered
	// (waitCheck)
	checking map[string]chan struct{}
	// sending holds the starts whose write is under way, by
	// conversation, user and socket, with the expiry each writes: a
	// leave of the socket sent meanwhile takes the entry if the start's
	// write ran first (typedBy). Noted in own only once written.
	sending map[sendingStart]int64
}

type sendingStart struct{ conv, user, sid string }

// ownTyping is a start this node wrote: its socket, its expiry on the
// node's clock and as written in Redis (score: ms on the node's estimate
// of Redis's clock), and its place among the starts noted (seq).
type ownTyping struct {
	sid   string
	exp   time.Time
	score int64
	seq   uint64
	// claimed: a start took this expired one's stop to announce
	// (sendStart), so that concurrent starts announce it once
	claimed bool
	// untold: its write failed (startFailed), so nobody was told
	untold bool
	// told: the socket this node's announcement of the start left out
	// (announced); a refresh by another socket of the user's keeps it
	told string
}

// typingDue is a conversation due for a check, with the users whose
// starts here had expired (take), and the latest of their scores (upTo).
type typingDue struct {
	conv  string
	users []string
	upTo  int64
}

// started notes user's start in conv through socket sid, expiring at exp
// (written in Redis as score), and sets the conversation's moment (or
// keeps an earlier one).
func (t *typingTimers) started(conv, user, sid string, exp time.Time, score int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.startedLocked(conv, user, sid, exp, score)
}

func (t *typingTimers) startedLocked(conv, user, sid string, exp time.Time, score int64) {
	if t.own == nil {
		t.own = map[string]map[string]ownTyping{}
	}
	users := t.own[conv]
	if users == nil {
		users = map[string]ownTyping{}
		t.own[conv] = users
	}
	t.seq++
	users[user] = ownTyping{sid: sid, exp: exp, score: score, seq: t.seq, told: users[user].told}
	t.setLocked(conv, exp)
}

// announced notes that user's start in conv through socket sid was
// announced, to all of the room's sockets but sid.
func (t *typingTimers) announced(conv, user, sid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o, ok := t.own[conv][user]; ok {
		o.told = sid
		t.own[conv][user] = o
	}
}

// toldOf is the socket that the announcement of user's start in conv
// left out, if this node made it ("" if not).
func (t *typingTimers) toldOf(conv, user string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.own[conv][user].told
}

// startFailed notes a start whose write failed: its client was answered
// unavailable and nobody was told, but the write may have landed, so its
// expiry is fired like any other's. A resync does not write it again
// (owned leaves it out): it wrote it and announced it, and the others saw
// the user typing after Redis came back though the start had been
// refused (a docs audit, 2026-12-07). A start of the user's there that
// was told and has not expired by now keeps that standing.
func (t *typingTimers) startFailed(conv, user, sid string, exp time.Time, score int64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, had := t.own[conv][user]
	told := had && !prev.untold && prev.exp.After(now)
	t.startedLocked(conv, user, sid, exp, score)
	if !told {
		o := t.own[conv][user]
		o.untold = true
		t.own[conv][user] = o
	}
}

// typedBy is the expiry (ms, as written in Redis) of user's last start in
// conv on this node if socket sid made it, for convLeave: the socket's
// leave takes the entry with it unless a later start moved it. "" if sid
// is not the user's typist here.
func (t *typingTimers) typedBy(conv, user, sid string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var score int64
	if o, ok := t.own[conv][user]; ok && o.sid == sid && sid != "" {
		score = o.score
	}
	score = max(score, t.sending[sendingStart{conv, user, sid}])
	if score == 0 {
		return ""
	}
	return strconv.FormatInt(score, 10)
}

// forgetTyped forgets user's start in conv through socket sid, whose
// entry (expiry removed) went with the socket's leave (its stop is
// announced); a later start noted meanwhile stays.
func (t *typingTimers) forgetTyped(conv, user, sid string, removed int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if users := t.own[conv]; users != nil {
		if o, ok := users[user]; ok && o.sid == sid && o.score <= removed {
			delete(users, user)
		}
		if len(users) == 0 {
			delete(t.own, conv)
		}
	}
}

// adopt makes this node fire the expiry of user's typing entry in conv
// (exp on this node's clock, score as in Redis), which a node it reaped
// may have written: nobody else knows of it. A start of this node's there
// that expires later keeps its own expiry.
func (t *typingTimers) adopt(conv, user string, exp time.Time, score int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.own[conv][user]
	if ok && o.score >= score {
		return
	}
	t.startedLocked(conv, user, o.sid, exp, score)
}

// sendStart notes a start of user in conv through socket sid about to
// write expiry score (see sending), and claims the stop of user's last
// start there on this node if it had expired by rnow and no other start
// claimed it: expired reports whether this start is to announce that
// stop (if its ZADD moves the entry rather than adding it).
func (t *typingTimers) sendStart(conv, user, sid string, score, rnow int64) (expired bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sending == nil {
		t.sending = map[sendingStart]int64{}
	}
	k := sendingStart{conv, user, sid}
	t.sending[k] = max(t.sending[k], score)
	if o, ok := t.own[conv][user]; ok && !o.claimed && o.score <= rnow {
		o.claimed = true
		t.own[conv][user] = o
		return true
	}
	return false
}

// sent ends sendStart's note of a start whose write is done.
func (t *typingTimers) sent(conv, user, sid string, score int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := sendingStart{conv, user, sid}
	if t.sending[k] <= score {
		delete(t.sending, k)
	}
}

// ownStart is a start this node wrote that has not expired (owned).
type ownStart struct {
	conv, user, sid string
	exp             time.Time
	seq             uint64
}

// owned returns the starts noted that were told and have not expired by
// now.
func (t *typingTimers) owned(now time.Time) []ownStart {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []ownStart
	for conv, users := range t.own {
		for user, o := range users {
			if o.exp.After(now) && !o.untold {
				out = append(out, ownStart{conv, user, o.sid, o.exp, o.seq})
			}
		}
	}
	return out
}

// resyncTyping writes again the typing entries of this node's starts that
// have not expired, whose sockets are still joined here (after Redis lost
// its data, or the node was reaped: nobody would announce their stop
// otherwise, and the others' clients would show the user typing until
// their own ttlMs ran out). An entry the write adds is announced, as a
// start's is: the reap of this node announced its stop.
func (e *RedisEngine) resyncTyping(ctx context.Context, now time.Time) error {
	starts := e.typing.owned(now)
	e.mu.Lock()
	starts = slices.DeleteFunc(starts, func(o ownStart) bool {
		s := e.local[o.sid]
		if s == nil {
			// A socket whose disconnect failed (Redis was down): its
			// entry is written again too, for its expiry check to remove
			// and announce the stop. Its removal's retry finds no member
			// record and leaves the entry; until 2026-12-07 nobody
			// announced that stop, and the others showed the user typing
			// for good (a black-box audit, 3 of 3).
			s = e.pending[o.sid]
		}
		if s == nil || s.user != o.user {
			return true
		}
		_, in := s.convs[o.conv]
		return !in
	})
	e.mu.Unlock()
	if len(starts) == 0 {
		return nil
	}
	rnow := e.redisNow()
	pipe := e.rdb.Pipeline()
	added := make([]*redis.IntCmd, len(starts))
	for i, o := range starts {
		k := e.conv(o.conv)
		score := rnow + o.exp.Sub(now).Milliseconds()
		added[i] = pipe.ZAddGT(ctx, k.ty, redis.Z{Score: float64(score), Member: o.user})
		e.typing.rescored(o, score)
	}
	err := e.exec(ctx, pipe)
	var b batch
	for i, o := range starts {
		if added[i].Val() == 1 {
			e.typing.announced(o.conv, o.user, o.sid)
			b = append(b, Event{Kind: EventTyping, ConversationID: o.conv, UserID: o.user, At: now, Typing: true, ExceptSocket: o.sid})
		}
	}
	e.emit(ctx, b)
	if err != nil {
		return unavailable("resync", err)
	}
	return nil
}

// rescored notes the expiry that resyncTyping writes again for o, if o is
// still user's last start there (one noted since keeps its own): the later
// of the two scores, since the write may fail and leave the first.
func (t *typingTimers) rescored(o ownStart, score int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.own[o.conv][o.user]; ok && cur.seq == o.seq {
		cur.score = max(cur.score, score)
		t.own[o.conv][o.user] = cur
	}
}

// mark is the place of the last start noted, for stopped.
func (t *typingTimers) mark() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seq
}

// stopped forgets user's start in conv if it was noted by mark, taken
// before the stop was sent: its entry is gone from Redis (the stop's ZREM
// ran). A start noted after the mark may have reached Redis after the
// stop (two sockets of the user on this node, one stopping as the other
// starts): its entry would be there with nobody to fire its expiry, so it
// is kept, and at worst costs a check that finds nothing. The
// conversation's moment stays; take drops it.
func (t *typingTimers) stopped(conv, user string, mark uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if users := t.own[conv]; users != nil {
		if o, ok := users[user]; ok && o.seq <= mark {
			delete(users, user)
		}
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
// with one of this node's starts there expired, those starts' users and
// the latest of their scores. One whose starts have not expired gets the
// moment of its earliest; one without starts, none.
func (t *typingTimers) take(now time.Time, limit int) []typingDue {
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []typingDue
	for len(due) < limit && len(t.queue) > 0 && !t.queue[0].at.After(now) {
		m := heap.Pop(&t.queue).(typingMoment)
		if cur, ok := t.at[m.conv]; !ok || !cur.Equal(m.at) {
			continue
		}
		delete(t.at, m.conv)
		var next time.Time
		var expired []string
		var upTo int64
		for u, o := range t.own[m.conv] {
			if !o.exp.After(now) {
				expired = append(expired, u)
				upTo = max(upTo, o.score)
			} else if next.IsZero() || o.exp.Before(next) {
				next = o.exp
			}
		}
		switch {
		case len(expired) > 0:
			slices.Sort(expired)
			due = append(due, typingDue{m.conv, expired, upTo})
			if t.checking == nil {
				t.checking = map[string]chan struct{}{}
			}
			if t.checking[m.conv] == nil {
				t.checking[m.conv] = make(chan struct{})
			}
		case !next.IsZero():
			t.setLocked(m.conv, next)
		}
	}
	return due
}

// delivered ends the checks of due: their stops are delivered.
func (t *typingTimers) delivered(due []typingDue) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range due {
		if ch := t.checking[d.conv]; ch != nil {
			close(ch)
			delete(t.checking, d.conv)
		}
	}
}

// waitCheck waits until the stops of a check of conv under way, if any,
// are delivered (at most typingCheckWait). A start that added its user's
// entry just after a check removed it announces itself after the check's
// stop: announced as the replies came, the start could reach the others
// first, and they showed the user not typing for the rest of the new
// session (a black-box audit: 2 to 4 of 120 sessions started within a few
// ms of the expiry). A check on another node is not waited for.
func (t *typingTimers) waitCheck(ctx context.Context, conv string) {
	t.mu.Lock()
	ch := t.checking[conv]
	t.mu.Unlock()
	if ch == nil {
		return
	}
	timer := time.NewTimer(typingCheckWait)
	defer timer.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-timer.C:
	}
}

// checked settles conv's starts after a check at now: users are the
// starts checked (take's), done with: the check removed each one's entry
// (and announced its stop), or found it gone (someone else stopped it), or
// found it moved later by a start on another node, whose expiry that node
// fires. A start noted anew meanwhile keeps its new expiry.
func (t *typingTimers) checked(conv string, now time.Time, users []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	own := t.own[conv]
	for _, u := range users {
		if o, ok := own[u]; ok && !o.exp.After(now) {
			delete(own, u)
		}
	}
	if len(own) == 0 {
		delete(t.own, conv)
	}
	var next time.Time
	for _, o := range own {
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
// each stop. A conversation with starts of this node's left is checked
// again when the next expires; one whose check failed, in a second.
//
// A check is a transaction of plain commands (typingCheck), not a script:
// at 100 expiries a second the script (TIME, its reads and writes, and the
// call itself) was most of Redis's command time in the typing benchmark.
func (e *RedisEngine) runTyping(ctx context.Context, now time.Time) error {
	for range 10 {
		due := e.typing.take(now, typingBatch)
		if len(due) == 0 {
			return nil
		}
		rnow := e.redisNow()
		checks := make([]typingCheck, len(due))
		// the checks hold the engine's loop, and the lease renewal with it:
		// a stalled server costs them at most typingCheckWait
		cctx, cancel := context.WithTimeout(ctx, typingCheckWait)
		tx := func(from, to int) error {
			_, err := e.rdb.TxPipelined(cctx, func(pipe redis.Pipeliner) error {
				for i := from; i < to; i++ {
					checks[i] = queueTypingCheck(cctx, pipe, e.conv(due[i].conv).ty, max(rnow, due[i].upTo))
				}
				return nil
			})
			return err
		}
		var err error
		if e.crossSlot {
			err = tx(0, len(due))
		} else {
			// On a Redis Cluster a transaction stays in one hash slot: one
			// per conversation, typingClusterChecks at a time, each to its
			// slot's master (a check that fails is retried alone).
			var wg sync.WaitGroup
			var mu sync.Mutex
			slots := make(chan struct{}, typingClusterChecks)
			for i := range due {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots }()
					if terr := tx(i, i+1); terr != nil {
						mu.Lock()
						err = cmp.Or(err, terr)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
		}
		cancel()
		var b batch
		var failed int
		for i, d := range due {
			removed, cerr := checks[i].expired.Result()
			if cerr != nil {
				failed++
				e.typing.set(d.conv, now.Add(time.Second))
				continue
			}
			for _, u := range removed {
				b = append(b, Event{Kind: EventTyping, ConversationID: d.conv, UserID: u, At: now, Typing: false})
			}
			e.typing.checked(d.conv, now, d.users)
		}
		e.emit(ctx, b)
		e.typing.delivered(due)
		if err == nil && failed > 0 {
			err = fmt.Errorf("%d conversations failed; checked again in 1s", failed)
		}
		if err != nil {
			return unavailable("typing expiry", err)
		}
		if len(due) < typingBatch {
			return nil
		}
	}
	return nil
}

const (
	// typingCheckWait bounds a round of expiry checks, far below the
	// lease (LeaseTTL 5 s, renewed every second) that waits behind it.
	typingCheckWait = 2 * time.Second
	// typingClusterChecks bounds the checks in flight at once on a Redis
	// Cluster, where each conversation has a transaction of its own.
	typingClusterChecks = 16
)

// typingCheck is one conversation's check in a transaction: the entries
// expired by upTo, and their removal. upTo is Redis's time (this node's
// estimate, as the starts wrote their expiries) or, if later, the latest
// expiry that the starts checked wrote: a start's entry is removed if its
// expiry is still the one it wrote, however the estimate has moved since,
// and not if a start on another node moved it later. (Before 2026-12-07 a
// check also read what was left of those starts' entries, ZMSCORE, and
// checked again when they expired.) Whoever removes an entry announces its
// stop, as a stop's ZREM does.
type typingCheck struct {
	expired *redis.StringSliceCmd
}

func queueTypingCheck(ctx context.Context, pipe redis.Pipeliner, ty string, upTo int64) typingCheck {
	to := strconv.FormatInt(upTo, 10)
	c := typingCheck{expired: pipe.ZRangeByScore(ctx, ty, &redis.ZRangeBy{Min: "-inf", Max: to})}
	pipe.ZRemRangeByScore(ctx, ty, "-inf", to)
	return c
}
