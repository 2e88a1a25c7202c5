package presence

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// memberTag is how a member record lists a socket (memberLib): the first
// 48 bits of the SHA-256 of its id, 8 characters of base64url, where the
// library's ids have 24. A conversation's roster reads every member record
// at each join, and a user's record in each of its conversations holds its
// sockets there: three conversations cost 48 bytes of Redis less per
// socket. Tags only tell apart the sockets of one user in one
// conversation; two of them share one with a chance of 2^-48 per pair.
func memberTag(sid string) string {
	h := sha256.Sum256([]byte(sid))
	return base64.RawURLEncoding.EncodeToString(h[:6])
}

// runJoin queues convJoin of socket sid of user in the conversation of k.
func (e *RedisEngine) runJoin(ctx context.Context, c redis.Scripter, k convKeys, sid, user string) *redis.Cmd {
	return convJoin.Run(ctx, c, []string{k.su, k.m, k.ty}, sid, user, e.clk(), memberTag(sid), e.shortMembers())
}

// runLeave queues convLeave of socket sid of user from conversation conv
// (see convLeave for mode, graceMs and at). A socket of this node is
// given its typing start here (typedBy); a reaper's (reaped) leave asks
// for the expiry of the user's typing entry instead, to adopt it.
func (e *RedisEngine) runLeave(ctx context.Context, c redis.Scripter, conv, sid, user, mode string, graceMs int64, at string, reaped bool) *redis.Cmd {
	k := e.conv(conv)
	typed, adopt := "", "0"
	if reaped {
		adopt = "1"
	} else {
		typed = e.typing.typedBy(conv, user, sid)
	}
	return convLeave.Run(ctx, c, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo}, sid, user, e.clk(), mode, graceMs, at, memberTag(sid), e.shortMembers(), typed, adopt)
}

// leaveTyping handles the typing part of convLeave's reply v for socket
// sid of user in conv: the stop to announce (false if none), and the
// entry a reaper adopts.
func (e *RedisEngine) leaveTyping(conv, sid, user string, v []int64) (stopped bool) {
	if len(v) >= 5 && v[4] > 0 {
		e.typing.forgetTyped(conv, user, sid, v[4])
	}
	if len(v) >= 4 && v[3] > 0 {
		in := time.Duration(v[3]-e.redisNow()) * time.Millisecond // until it expires
		e.typing.adopt(conv, user, e.cfg.Now().Add(in), v[3])
		e.typingAlarm.set(time.Now().Add(max(in, 0)))
	}
	return v[0] == 1
}

// Join implements Engine.
func (e *RedisEngine) Join(ctx context.Context, socketID, conv string) (JoinResult, error) {
	if err := e.Touch(ctx, socketID); err != nil {
		return JoinResult{}, err
	}
	e.mu.Lock()
	s, ok := e.local[socketID]
	if !ok {
		e.mu.Unlock()
		return JoinResult{}, ErrUnknown
	}
	_, already := s.convs[conv]
	if !already && len(s.convs) >= e.cfg.MaxConversations {
		e.mu.Unlock()
		return JoinResult{}, &LimitError{Max: e.cfg.MaxConversations}
	}
	s.convs[conv] = struct{}{}
	reg := registry(s)
	e.mu.Unlock()

	now := e.cfg.Now()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	regd := pipe.HSet(ctx, e.regKey(s), socketID, reg) // registered before the entry exists
	join := e.runJoin(ctx, pipe, k, socketID, s.user)
	members := pipe.HGetAll(ctx, k.m) // the roster (see convJoin)
	st := e.queueStatuses(ctx, pipe, k)
	// (a failure of the statuses' read alone is not the join's: rosterFrom
	// reads them again)
	if err := e.exec(ctx, pipe); err != nil && (regd.Err() != nil || join.Err() != nil) {
		if !already {
			e.undoJoin(s, conv)
		}
		return JoinResult{}, unavailable("join", err)
	}
	if already {
		e.mu.Lock()
		delete(s.unsure, conv) // joined now: its entry is the join's
		e.mu.Unlock()
	}
	raw, _ := join.Slice()
	var b batch
	if len(raw) == 3 && toInt(raw[0]) == 1 {
		b = append(b, Event{Kind: EventJoin, ConversationID: conv, UserID: s.user, At: now, ExceptSocket: socketID})
	}
	e.emit(ctx, b)
	e.cleanIfGone(s)
	if len(raw) != 3 {
		return JoinResult{}, unavailable("join", errors.New("unexpected script reply"))
	}
	if err := members.Err(); err != nil {
		return JoinResult{}, unavailable("join", err)
	}
	res, err := e.rosterFrom(ctx, st, members.Val(), toInt(raw[1]), strs(raw[2]))
	// The join is the user's activity (touch): the user is online, though
	// its record, read in the same round trip, may not say so yet (the
	// record goes with the next batch; a user turned away meanwhile comes
	// back with it, and its status event then).
	for i := range res.Online {
		if res.Online[i].UserID == s.user {
			res.Online[i].Status = Online
		}
	}
	return res, err
}

// undoJoin takes back a join whose outcome is unknown (the reply was lost:
// the script may have run). Once Redis confirms, the conversation leaves
// the socket's local set; until then it stays there, so that the socket's
// disconnect, or a node reap, still removes whatever entry was made. Nobody
// was told of the join, so the undo tells nobody either.
func (e *RedisEngine) undoJoin(s *rSocket, conv string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := e.runLeave(ctx, e.rdb, conv, s.id, s.user, "left", 0, "", false).Err()
	if err != nil {
		e.log.Warn("join outcome unknown; kept for the disconnect to clean", "sid", s.id, "conversation_id", conv, "err", err)
		e.mu.Lock()
		if s.unsure == nil {
			s.unsure = map[string]struct{}{}
		}
		s.unsure[conv] = struct{}{}
		e.mu.Unlock()
		return
	}
	e.mu.Lock()
	delete(s.convs, conv)
	reg := registry(s)
	e.mu.Unlock()
	_ = e.rdb.HSet(ctx, e.regKey(s), s.id, reg).Err()
}

// Leave implements Engine.
func (e *RedisEngine) Leave(ctx context.Context, socketID, conv string) error {
	e.mu.Lock()
	s, ok := e.local[socketID]
	if !ok {
		e.mu.Unlock()
		return ErrUnknown
	}
	_, in := s.convs[conv]
	e.mu.Unlock()
	if err := e.touch(ctx, s.user); err != nil {
		return err
	}
	now := e.cfg.Now()
	var b batch
	if in {
		// A typing start of the socket there that is under way, and
		// passed joinedSocket before this mark, may write its entry after
		// the leave's script ran (its typedBy read before the start was
		// noted): its check after the write finds the mark (or the
		// conversation gone) and takes the entry back. Before, the
		// others saw the user typing until the entry's expiry (a review,
		// 2026-12-07).
		lc := sidConv{socketID, conv}
		e.mu.Lock()
		e.leavingConv[lc] = struct{}{}
		e.mu.Unlock()
		pipe := e.rdb.Pipeline()
		leave := e.runLeave(ctx, pipe, conv, socketID, s.user, "left", 0, "", false)
		if err := e.exec(ctx, pipe); err != nil {
			e.mu.Lock()
			delete(e.leavingConv, lc)
			e.mu.Unlock()
			return unavailable("leave", err)
		}
		e.mu.Lock()
		delete(e.leavingConv, lc)
		delete(s.convs, conv)
		delete(s.unsure, conv)
		reg := registry(s)
		e.mu.Unlock()
		if err := e.rdb.HSet(ctx, e.regKey(s), socketID, reg).Err(); err != nil {
			e.log.Warn("registry update failed", "sid", socketID, "err", err)
		}
		if v, _ := leave.Int64Slice(); len(v) >= 3 {
			if e.leaveTyping(conv, socketID, s.user, v) {
				b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: false})
			}
			if v[1] == 1 {
				b = append(b, Event{Kind: EventLeave, ConversationID: conv, UserID: s.user, At: now, Reason: ReasonLeft})
			}
		}
	}
	e.emit(ctx, b)
	return nil
}
