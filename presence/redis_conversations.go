package presence

import (
	"context"
	"errors"
	"time"
)

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
		return JoinResult{}, ErrLimit
	}
	s.convs[conv] = struct{}{}
	reg := registry(s)
	e.mu.Unlock()

	now := e.cfg.Now()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	regd := pipe.HSet(ctx, e.kNode, socketID, reg) // registered before the entry exists
	join := convJoin.Run(ctx, pipe, []string{k.su, k.m, k.ty}, socketID, s.user, e.clk())
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
	k := e.conv(conv)
	err := convLeave.Run(ctx, e.rdb, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo},
		s.id, s.user, e.clk(), "left", 0, "").Err()
	if err != nil {
		e.log.Warn("join outcome unknown; kept for the disconnect to clean", "sid", s.id, "conversation_id", conv, "err", err)
		return
	}
	e.mu.Lock()
	delete(s.convs, conv)
	reg := registry(s)
	e.mu.Unlock()
	_ = e.rdb.HSet(ctx, e.kNode, s.id, reg).Err()
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
		k := e.conv(conv)
		pipe := e.rdb.Pipeline()
		leave := convLeave.Run(ctx, pipe, []string{k.on, k.sk, k.su, k.m, k.ty, k.tyo}, socketID, s.user, e.clk(), "left", 0, "")
		if err := e.exec(ctx, pipe); err != nil {
			return unavailable("leave", err)
		}
		e.mu.Lock()
		delete(s.convs, conv)
		reg := registry(s)
		e.mu.Unlock()
		if err := e.rdb.HSet(ctx, e.kNode, socketID, reg).Err(); err != nil {
			e.log.Warn("registry update failed", "sid", socketID, "err", err)
		}
		if v, _ := leave.Int64Slice(); len(v) == 3 {
			if v[0] == 1 {
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
