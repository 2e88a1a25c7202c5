// Package handlers holds the Socket.IO event handlers and (later) the REST
// handlers: decode, validate, one call into the domain, respond. Errors are
// mapped to ack codes and HTTP statuses in one place (errors.go).
package handlers

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/metrics"
)

// SessionConfig is what the `session` event tells clients. Zero values mean
// the documented defaults.
type SessionConfig struct {
	NodeID            string
	HeartbeatInterval time.Duration // default 15s
	HeartbeatJitter   time.Duration // default 5s
	TypingTTL         time.Duration // default 5s
}

func (c SessionConfig) withDefaults() SessionConfig {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 15 * time.Second
	}
	if c.HeartbeatJitter < 0 {
		c.HeartbeatJitter = 0
	} else if c.HeartbeatJitter == 0 {
		c.HeartbeatJitter = 5 * time.Second
	}
	if c.TypingTTL <= 0 {
		c.TypingTTL = 5 * time.Second
	}
	return c
}

// Sockets handles the life of authenticated sockets.
type Sockets struct {
	cfg     SessionConfig
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time

	open atomic.Int64 // sockets whose disconnect work has not run yet
}

// NewSockets builds the socket handlers.
func NewSockets(cfg SessionConfig, log *slog.Logger, m *metrics.Metrics) *Sockets {
	return &Sockets{cfg: cfg.withDefaults(), log: log, metrics: m, now: time.Now}
}

// Conn is the server's state of one authenticated socket, kept in the
// socket's Data.
type Conn struct {
	UserID string
	sid    string
	closed sync.Once
}

// NewConn is created by the handshake middleware once the token is verified.
func NewConn(userID string) *Conn { return &Conn{UserID: userID} }

// UserRoom is the room every socket of a user joins (CONTRACT §1).
func UserRoom(userID string) socket.Room { return socket.Room("user:" + userID) }

// SessionPayload is the `session` event.
type SessionPayload struct {
	UserID      string           `json:"userId"`
	SocketID    string           `json:"socketId"`
	Node        string           `json:"node"`
	ServerTime  string           `json:"serverTime"`
	Heartbeat   HeartbeatPayload `json:"heartbeat"`
	TypingTTLMs int64            `json:"typingTtlMs"`
}

// HeartbeatPayload is the heartbeat hint inside `session`.
type HeartbeatPayload struct {
	IntervalMs int64 `json:"intervalMs"`
	JitterMs   int64 `json:"jitterMs"`
}

// Timestamp formats t as the contract's `at`: RFC 3339 UTC with milliseconds.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// Connect is called for every socket that passed authentication.
func (h *Sockets) Connect(s *socket.Socket) {
	c, ok := s.Data().(*Conn)
	if !ok || c == nil {
		// Cannot happen: the auth middleware sets Data before connection.
		h.log.Error("socket without auth state", "sid", s.Id())
		s.Disconnect(false)
		return
	}
	c.sid = string(s.Id())
	h.open.Add(1)
	h.metrics.SocketsConnected.Inc()

	s.On("disconnect", func(args ...any) {
		reason, _ := firstString(args)
		h.disconnect(c, reason)
	})
	// The library may have closed the socket between the middleware and
	// here; if so the disconnect event has already fired without us.
	if s.Disconnected() {
		h.disconnect(c, "closed before connect")
		return
	}

	s.Join(UserRoom(c.UserID))
	err := s.Emit("session", SessionPayload{
		UserID:     c.UserID,
		SocketID:   c.sid,
		Node:       h.cfg.NodeID,
		ServerTime: Timestamp(h.now()),
		Heartbeat: HeartbeatPayload{
			IntervalMs: h.cfg.HeartbeatInterval.Milliseconds(),
			JitterMs:   h.cfg.HeartbeatJitter.Milliseconds(),
		},
		TypingTTLMs: h.cfg.TypingTTL.Milliseconds(),
	})
	if err != nil {
		h.log.Warn("emit session failed", "sid", c.sid, "user_id", c.UserID, "err", err)
	}
	h.log.Debug("socket connected", "sid", c.sid, "user_id", c.UserID)
}

// disconnect runs a socket's disconnect work exactly once, however many
// times the library reports the disconnect.
func (h *Sockets) disconnect(c *Conn, reason string) {
	c.closed.Do(func() {
		h.open.Add(-1)
		h.metrics.SocketsConnected.Dec()
		h.metrics.Disconnects.WithLabelValues(reason).Inc()
		h.log.Debug("socket disconnected", "sid", c.sid, "user_id", c.UserID, "reason", reason)
	})
}

// Open is the number of sockets whose disconnect work has not run yet.
func (h *Sockets) Open() int64 { return h.open.Load() }

func firstString(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	s, ok := args[0].(string)
	return s, ok
}
