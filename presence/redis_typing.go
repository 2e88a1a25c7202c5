package presence

import (
	"context"

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
	return e.typing(ctx, socketID, conv, true)
}

// TypingStop implements Engine.
func (e *RedisEngine) TypingStop(ctx context.Context, socketID, conv string) error {
	return e.typing(ctx, socketID, conv, false)
}

// typing runs typingStart or typingStop, with the user's activity when
// due, in one round trip; the script answers -1 (not joined), 1 (announce) or 0.
func (e *RedisEngine) typing(ctx context.Context, socketID, conv string, start bool) error {
	s, err := e.joinedSocket(socketID, conv)
	if err != nil {
		return err
	}
	now := e.cfg.Now()
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	var res *redis.Cmd
	if start {
		ttl := e.cfg.TypingTTL.Milliseconds()
		res = typingStart.Run(ctx, pipe, []string{k.ty, k.tyo, k.su, k.m}, socketID, s.user, e.clk(), ttl)
		dueIn.Run(ctx, pipe, []string{e.kDue}, "t\t"+conv, ttl, 1, e.clk())
	} else {
		res = typingStop.Run(ctx, pipe, []string{k.ty, k.tyo, k.su, k.m}, socketID, s.user, e.clk())
	}
	// the user's activity goes along when due, as a heartbeat's does
	// (activityDue): a user typing in bursts records it once in a while
	var act *redis.Cmd
	if e.activityDue(s.user, now) {
		act = userActivity.Run(ctx, pipe, []string{e.kUsers}, s.user, e.clk())
	}
	if err := e.exec(ctx, pipe); err != nil {
		if act != nil {
			e.forgetActivity(s.user)
		}
		return unavailable("typing", err)
	}
	var b batch
	switch n, _ := res.Int(); n {
	case -1:
		return ErrNotJoined
	case 1:
		b = append(b, Event{Kind: EventTyping, ConversationID: conv, UserID: s.user, At: now, Typing: start, ExceptSocket: socketID})
	}
	if act != nil {
		if n, _ := act.Int(); n == 1 {
			b = append(b, Event{Kind: EventStatus, UserID: s.user, At: now, Status: Online})
		}
	}
	e.emit(ctx, b)
	return nil
}
