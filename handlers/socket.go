// Package handlers holds the Socket.IO event handlers and the REST
// handlers: decode, validate, one call into the domain, respond. Errors are
// mapped to ack codes and HTTP statuses in one place (errors.go).
package handlers

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/presenced/presenced/auth"
	"github.com/presenced/presenced/internal/defaults"
	"github.com/presenced/presenced/internal/stack"
	"github.com/presenced/presenced/metrics"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/timestamp"
	"github.com/presenced/presenced/transport"
)

// SessionConfig is what the socket handlers need to know. Zero values mean
// the documented defaults.
type SessionConfig struct {
	NodeID            string
	HeartbeatInterval time.Duration // default 15s
	HeartbeatJitter   time.Duration // default 5s
	TypingTTL         time.Duration // default 5s
	// MaxSocketsPerUser caps a user's sockets across the cluster (default
	// 20; negative: no cap). The engine counts them (presence.Socket.Max).
	MaxSocketsPerUser int
	// Limits are the per-socket event limits (limits.go; zero values: the
	// contract's defaults).
	Limits EventLimits
	// StateInterval is the least time between two `state` broadcasts of one
	// socket (default 100ms: at most 10/s, coalesced to the latest).
	StateInterval time.Duration
	// OpTimeout bounds one event's work (default 10s: under a connection
	// burst on a saturated machine, slow acks beat failed ones).
	OpTimeout time.Duration
}

func (c SessionConfig) withDefaults() SessionConfig {
	c.HeartbeatInterval = defaults.Positive(c.HeartbeatInterval, 15*time.Second)
	c.HeartbeatJitter = defaults.NonNegative(c.HeartbeatJitter, 5*time.Second)
	c.TypingTTL = defaults.Positive(c.TypingTTL, 5*time.Second)
	c.Limits = c.Limits.withDefaults()
	c.MaxSocketsPerUser = cmp.Or(c.MaxSocketsPerUser, 20)
	c.StateInterval = defaults.Positive(c.StateInterval, 100*time.Millisecond)
	c.OpTimeout = defaults.Positive(c.OpTimeout, 10*time.Second)
	return c
}

// SocketDeps are the domain services the socket handlers call.
type SocketDeps struct {
	Log        *slog.Logger
	Metrics    *metrics.Metrics
	Engine     presence.Engine
	Membership presence.Membership
	Rooms      *Rooms
	// Viewers answers presence:query; Subscriptions keeps
	// presence:subscribe. Without them those events answer "unavailable".
	Viewers       Viewers
	Subscriptions *Subscriptions
	// Activity, when set, is told of each heartbeat (the last-seen
	// pipeline coarsens these).
	Activity func(ctx context.Context, userID string, at time.Time)
}

// Sockets handles the life and events of authenticated sockets.
type Sockets struct {
	cfg        SessionConfig
	log        *slog.Logger
	metrics    *metrics.Metrics
	engine     presence.Engine
	membership presence.Membership
	rooms      *Rooms
	activity   func(ctx context.Context, userID string, at time.Time)
	viewers    Viewers
	subs       *Subscriptions
	now        func() time.Time
	epochs     memberEpochs // membership changes by conversation (cluster.go)

	open atomic.Int64 // sockets whose disconnect work has not run yet

	handlers map[string]handler   // events by name
	stats    map[string]eventInfo // events by name: their class and metrics, resolved once
	limits   limitTable           // each class's limit
	other    eventInfo            // unknown events
	opCtx    opContexts           // the contexts bounding events' work (opctx.go)
	direct   sync.Map             // Engine.IO connection id → *Conn (direct.go)
	clock    timestamp.Cache      // the heartbeat ack's server time

	unavailable unavailableLog // events failed with a backend down (events.go)

	lastStates lastStates // the latest state set of each user's, by conversation (events.go)

	redelivering atomic.Int64  // notices being told again (cluster.go)
	resyncing    atomic.Int32  // ResyncAfterGap calls running or due
	stop         chan struct{} // closed by Close
	stopOnce     sync.Once
}

// eventInfo is what serve needs of an event besides its handler: its
// limit class, and its metrics for the "ok" and "rate_limited" outcomes.
type eventInfo struct {
	class    limitClass
	count    prometheus.Counter
	duration prometheus.Observer
	limited  prometheus.Counter
	// roomEvents: the event may tell its conversation's room (a join,
	// leave or typing change); serve sends those after the ack.
	roomEvents bool
}

// NewSockets builds the socket handlers.
func NewSockets(cfg SessionConfig, d SocketDeps) *Sockets {
	if d.Membership == nil {
		d.Membership = presence.Open{}
	}
	h := &Sockets{
		cfg: cfg.withDefaults(), log: d.Log, metrics: d.Metrics, engine: d.Engine,
		membership: d.Membership, rooms: d.Rooms, activity: d.Activity,
		viewers: d.Viewers, subs: d.Subscriptions, now: time.Now, stop: make(chan struct{}),
	}
	h.opCtx.timeout = h.cfg.OpTimeout
	h.handlers = h.events()
	h.limits = h.cfg.Limits.table()
	h.stats = make(map[string]eventInfo, len(h.handlers))
	for name := range h.handlers {
		h.stats[name] = eventInfo{
			class:    classOf(name),
			count:    h.metrics.Events.WithLabelValues(name, "ok"),
			duration: h.metrics.EventDuration.WithLabelValues(name),
			limited:  h.metrics.EventsRateLimited.WithLabelValues(name),

			roomEvents: roomEventsOf[name],
		}
	}
	h.other = eventInfo{class: classOther, limited: h.metrics.EventsRateLimited.WithLabelValues("unknown")}
	return h
}

// Conn is the server's state of one authenticated socket, kept in the
// socket's Data.
type Conn struct {
	UserID   string
	sid      string
	engineID string // the Engine.IO connection's id
	sock     *socket.Socket
	rooms    roomSet // the socket's rooms: sock, or a fake in tests

	ready     chan struct{} // closed once the engine's connect is done (Prepare)
	started   atomic.Bool   // Connect has begun: the library connected the socket
	connected atomic.Bool   // the engine knows the socket
	connectMu sync.Mutex    // one late connect at a time (lateConnect)
	closed    sync.Once
	left      chan struct{} // closed when the socket's disconnect work runs
	kicked    atomic.Bool   // an operator disconnected it: no flap grace (DisconnectUser)

	limits socketLimits // the event limits' buckets (limits.go)

	mu     sync.Mutex
	expiry *time.Timer           // closes the connection when the token expires
	states map[string]*stateSlot // conversation → throttled `state`
	subs   map[string]subState   // presence subscriptions: user → what was last sent
	// arrivals are the arrival times of known events not handled yet, in
	// order (load shedding of events that waited too long).
	arrivals []time.Time
	gone     bool
	// pending counts known events the library has queued and not handled
	// yet: while any is, events take the library's path too (in order).
	pending atomic.Int32
	// marked counts messages handed to the library whose packets it has
	// not taken off the socket's queue yet (Mark; transport.Backlogger).
	marked atomic.Int64
	// slowUntil (unix ns): until then events take the library's path,
	// after a direct event held the reader too long (direct.go).
	slowUntil atomic.Int64
}

// roomSet is what the event handlers do with a socket's rooms.
type roomSet interface {
	InRoom(socket.Room) bool
	Join(...socket.Room)
	Leave(socket.Room)
}

// socketRooms is a socket's roomSet: membership read from the adapter's
// index (transport.InRoom), not from a copy of the socket's rooms.
type socketRooms struct{ *socket.Socket }

func (s socketRooms) InRoom(room socket.Room) bool { return transport.InRoom(s.Socket, room) }

// UserRoom is the room every socket of a user joins (CONTRACT §1).
func UserRoom(userID string) socket.Room { return socket.Room("user:" + userID) }

// ConversationRoom is the room of a conversation's sockets (CONTRACT §1).
func ConversationRoom(id string) socket.Room { return socket.Room("conversation:" + id) }

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

// Prepare is called by the handshake middleware once the token is verified,
// before the library acknowledges the connection to the client. The engine
// counts the socket here, in the same step as the cap on the user's sockets
// (MaxSocketsPerUser; a user with that many is refused): one round trip
// before the client's CONNECT, where there were two (a reservation here,
// the count after the CONNECT), and the client's first events find the
// socket known. The event listeners are registered here too, not in
// Connect: the client may send events the instant it sees the CONNECT
// packet, and the library delivers them on another goroutine, possibly
// before the "connection" listeners would run.
//
// A token with an exp ends the connection when it expires (expireAt).
func (h *Sockets) Prepare(s *socket.Socket, claims auth.Claims) error {
	c := &Conn{UserID: claims.UserID, sid: string(s.Id()), engineID: s.Conn().Id(), sock: s, rooms: socketRooms{s}, ready: make(chan struct{}), left: make(chan struct{})}
	if err := h.connectEngine(c); err != nil {
		return err
	}
	if h.rooms != nil {
		h.rooms.prefetch(c.UserID) // for the rosters naming the user soon
	}
	s.SetData(c)
	h.register(s, c)
	h.direct.Store(c.engineID, c)
	if !claims.ExpiresAt.IsZero() {
		h.expireAt(c, claims.ExpiresAt)
	}
	// A socket the library never connects (its connection closed first)
	// gets no "disconnect" from it: its disconnect work runs here.
	_ = s.Conn().Once("close", func(...any) {
		h.direct.CompareAndDelete(c.engineID, c)
		c.stopExpiry()
		if !c.started.Load() {
			h.disconnect(c, "closed before connect")
		}
	})
	s.On("disconnect", func(args ...any) {
		reason, _ := firstString(args)
		h.disconnect(c, reason)
	})
	return nil
}

// errTooManySockets refuses a handshake over MaxSocketsPerUser.
var errTooManySockets = errorf(CodeUnauthorized, "too many connections")

// connectEngine has the engine count the socket, refused if its user has
// MaxSocketsPerUser sockets already (cluster-wide). When the engine cannot
// be reached the socket is let in, unknown to it until one of its events
// or connectLater connects it: the cap guards against abuse and is not
// worth refusing every user during an outage. The socket is open from here on
// (its disconnect work will run once).
func (h *Sockets) connectEngine(c *Conn) error {
	max := h.cfg.MaxSocketsPerUser
	if max < 0 {
		max = 0 // no cap
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
	defer cancel()
	err := h.engine.Connect(ctx, presence.Socket{ID: c.sid, UserID: c.UserID, Max: max})
	switch {
	case errors.Is(err, presence.ErrTooManySockets):
		h.metrics.SocketsRefused.Inc()
		h.log.Debug("too many sockets", "user_id", c.UserID, "max", max)
		return errTooManySockets
	case err != nil:
		h.log.Warn("presence connect failed; admitting", "sid", c.sid, "user_id", c.UserID, "err", err)
		go h.connectLater(c)
	default:
		c.connected.Store(true)
	}
	h.open.Add(1)
	h.metrics.SocketsConnected.Inc()
	close(c.ready)
	return nil
}

// Late connects of a socket admitted while the engine's backend was down:
// the first after lateConnectFirst (ns; tests shorten it), then each after
// twice the wait, at most lateConnectMax.
var lateConnectFirst atomic.Int64

const lateConnectMax = 10 * time.Second

func init() { lateConnectFirst.Store(int64(time.Second)) }

// connectLater connects to the engine a socket it did not take at its
// handshake, once its backend answers again, unless one of the socket's
// events did it first (lateConnect) or the socket closed. Before, only an
// event did: a client that sent none (it only listens) stayed unknown, its
// user offline, for as long as it stayed connected (failover audit).
func (h *Sockets) connectLater(c *Conn) {
	wait := time.Duration(lateConnectFirst.Load())
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-c.left:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
		err := h.lateConnect(ctx, c)
		cancel()
		if err == nil {
			return
		}
		wait = min(2*wait, lateConnectMax)
		t.Reset(wait)
	}
}

// lateConnect has the engine take a socket it did not take at its
// handshake (connectEngine admitted it with its backend down), one attempt
// at a time per socket; nil if the engine knows it (now or already).
func (h *Sockets) lateConnect(ctx context.Context, c *Conn) error {
	c.connectMu.Lock()
	defer c.connectMu.Unlock()
	if c.connected.Load() {
		return nil
	}
	if err := h.engine.Connect(ctx, presence.Socket{ID: c.sid, UserID: c.UserID}); err != nil {
		return err
	}
	c.connected.Store(true)
	select {
	case <-c.left:
		// closed meanwhile: its disconnect work may have skipped the
		// engine; the engine's Disconnect is idempotent
		_ = h.engineDisconnect(ctx, c)
		return errorf(CodeUnavailable, "connection is closing")
	default:
		return nil
	}
}

// expireAt closes the socket's Engine.IO connection when its token
// expires. The transport is closed without a Socket.IO DISCONNECT packet:
// to socket.io-client that is a lost connection, so it reconnects by
// itself, and an `auth` callback can hand it a fresh token (README). A
// DISCONNECT would mean "the server sent you away" and stop reconnection.
//
// A token accepted after its exp (within auth.Leeway) is given the rest
// of the leeway rather than being closed at once: the client would only
// reconnect with the same token.
func (h *Sockets) expireAt(c *Conn, exp time.Time) {
	wait := time.Until(exp)
	if wait <= 0 {
		wait = time.Until(exp.Add(auth.Leeway))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expiry = time.AfterFunc(max(wait, 0), func() {
		h.log.Debug("token expired: closing the connection", "sid", c.sid, "user_id", c.UserID)
		h.metrics.TokensExpired.Inc()
		c.sock.Conn().Close(false)
	})
}

// stopExpiry stops the expiry timer of a socket that is gone.
func (c *Conn) stopExpiry() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expiry != nil {
		c.expiry.Stop()
	}
}

// Connect is called for every socket that passed authentication, after the
// library sent the CONNECT packet. The engine knows the socket already
// (Prepare).
func (h *Sockets) Connect(s *socket.Socket) {
	// The library runs this on a goroutine it has just started, and the
	// session's encoding (encoding/json) is deep.
	stack.Grow()
	c, ok := s.Data().(*Conn)
	if !ok || c == nil {
		h.log.Error("socket without auth state", "sid", s.Id())
		s.Disconnect(false)
		return
	}
	c.started.Store(true)
	// The socket may have closed meanwhile (its close hook then saw it not
	// started, or the library's disconnect came): its disconnect work runs
	// once, whichever calls it.
	if s.Disconnected() {
		h.disconnect(c, "closed before connect")
		return
	}
	s.Join(UserRoom(c.UserID))
	// encoded and queued as a broadcast's frame is (transport.Frame),
	// without the library's per-socket packet pipeline: in the connect
	// benchmark that pipeline was 4 % of the server's CPU
	transport.EventFrame(s.Nsp(), "session", SessionPayload{
		UserID:     c.UserID,
		SocketID:   c.sid,
		Node:       h.cfg.NodeID,
		ServerTime: timestamp.Format(h.now()),
		Heartbeat: HeartbeatPayload{
			IntervalMs: h.cfg.HeartbeatInterval.Milliseconds(),
			JitterMs:   h.cfg.HeartbeatJitter.Milliseconds(),
		},
		TypingTTLMs: h.cfg.TypingTTL.Milliseconds(),
	}).WriteTo(s)
}

// disconnect runs a socket's disconnect work exactly once, however many
// times the library reports the disconnect.
func (h *Sockets) disconnect(c *Conn, reason string) {
	c.closed.Do(func() {
		if c.left != nil {
			close(c.left)
		}
		h.direct.CompareAndDelete(c.engineID, c)
		c.stopExpiry()
		h.open.Add(-1)
		h.metrics.SocketsConnected.Dec()
		h.metrics.Disconnects.WithLabelValues(reason).Inc()
		if h.subs != nil {
			h.subs.Drop(c)
		}
		h.clearStates(c)
		if c.connected.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.OpTimeout)
			defer cancel()
			if err := h.engineDisconnect(ctx, c); err != nil {
				h.log.Warn("presence disconnect failed", "sid", c.sid, "user_id", c.UserID, "err", err)
			}
		}
		h.log.Debug("socket disconnected", "sid", c.sid, "user_id", c.UserID, "reason", reason)
	})
}

// engineDisconnect removes a closed socket from the engine: without the
// flap grace if an operator disconnected it.
func (h *Sockets) engineDisconnect(ctx context.Context, c *Conn) error {
	if c.kicked.Load() {
		return h.engine.DisconnectNow(ctx, c.sid)
	}
	return h.engine.Disconnect(ctx, c.sid)
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

// RemoteData is what another node's fetchSockets gets as the socket's
// data: {userId}, in the contract's casing (adapter.RemoteData).
func (c *Conn) RemoteData() any { return map[string]any{"userId": c.UserID} }
