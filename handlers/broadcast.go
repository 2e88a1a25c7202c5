package handlers

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/presence"
)

// Rooms delivers domain events to Socket.IO rooms. It is bound to the
// Socket.IO server once that exists; with a cluster adapter the emits reach
// every node.
type Rooms struct {
	io        atomic.Pointer[socket.Server]
	typingTTL time.Duration
	log       *slog.Logger

	mu       sync.RWMutex
	onStatus []func(context.Context, presence.Event)
}

// NewRooms creates an unbound Rooms.
func NewRooms(typingTTL time.Duration, log *slog.Logger) *Rooms {
	if typingTTL <= 0 {
		typingTTL = 5 * time.Second
	}
	return &Rooms{typingTTL: typingTTL, log: log}
}

// Bind attaches the Socket.IO server.
func (r *Rooms) Bind(io *socket.Server) { r.io.Store(io) }

// OnStatus registers a listener of user status events (last-seen recording,
// presence subscriptions).
func (r *Rooms) OnStatus(fn func(context.Context, presence.Event)) {
	r.mu.Lock()
	r.onStatus = append(r.onStatus, fn)
	r.mu.Unlock()
}

// JoinPayload is `presence:join`.
type JoinPayload struct {
	ConversationID string `json:"conversationId"`
	UserID         string `json:"userId"`
	At             string `json:"at"`
}

// LeavePayload is `presence:leave`.
type LeavePayload struct {
	ConversationID string `json:"conversationId"`
	UserID         string `json:"userId"`
	At             string `json:"at"`
	Reason         string `json:"reason"`
}

// TypingPayload is `typing`.
type TypingPayload struct {
	ConversationID string `json:"conversationId"`
	UserID         string `json:"userId"`
	Typing         bool   `json:"typing"`
	TTLMs          int64  `json:"ttlMs"`
}

// StatePayload is `state`.
type StatePayload struct {
	ConversationID string `json:"conversationId"`
	UserID         string `json:"userId"`
	State          any    `json:"state"`
}

// Sink is the presence engine's event sink.
func (r *Rooms) Sink() presence.Sink {
	return func(ctx context.Context, events []presence.Event) {
		for _, e := range events {
			r.deliver(ctx, e)
		}
	}
}

func (r *Rooms) deliver(ctx context.Context, e presence.Event) {
	switch e.Kind {
	case presence.EventJoin:
		r.emit(ConversationRoom(e.ConversationID), e.ExceptSocket, "presence:join", JoinPayload{
			ConversationID: e.ConversationID, UserID: e.UserID, At: Timestamp(e.At),
		})
	case presence.EventLeave:
		r.emit(ConversationRoom(e.ConversationID), e.ExceptSocket, "presence:leave", LeavePayload{
			ConversationID: e.ConversationID, UserID: e.UserID, At: Timestamp(e.At), Reason: e.Reason,
		})
	case presence.EventTyping:
		r.emit(ConversationRoom(e.ConversationID), e.ExceptSocket, "typing", TypingPayload{
			ConversationID: e.ConversationID, UserID: e.UserID, Typing: e.Typing, TTLMs: r.typingTTL.Milliseconds(),
		})
	case presence.EventStatus:
		r.mu.RLock()
		listeners := r.onStatus
		r.mu.RUnlock()
		for _, fn := range listeners {
			fn(ctx, e)
		}
	}
}

// emit sends an event to a room, except one socket if given.
func (r *Rooms) emit(room socket.Room, exceptSocket string, event string, payload any) {
	io := r.io.Load()
	if io == nil {
		return
	}
	op := io.To(room)
	if exceptSocket != "" {
		op = op.Except(socket.Room(exceptSocket))
	}
	if err := op.Emit(event, payload); err != nil {
		r.log.Warn("broadcast failed", "event", event, "room", string(room), "err", err)
	}
}

// State broadcasts a `state` event to a conversation except its sender.
func (r *Rooms) State(conv, userID, exceptSocket string, state any) {
	r.emit(ConversationRoom(conv), exceptSocket, "state", StatePayload{ConversationID: conv, UserID: userID, State: state})
}
