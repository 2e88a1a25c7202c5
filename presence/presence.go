// Package presence is the domain of who is here now: per-conversation
// rosters, typing indicators, and each user's connections across devices and
// nodes with their online / away / offline status.
//
// An Engine is one node's view of a shared backend. Two backends exist: an
// in-memory one (single node, the default; several Engines may share one
// Memory backend, which is how the shared suite simulates a cluster) and a
// Redis one (cluster mode). Both pass the same behaviour suite
// (presence/enginetest).
//
// Operations return what the caller's acknowledgement needs; everything that
// others must be told (joins, leaves, typing, status changes) is handed to
// the Sink as Events, synchronously for client operations and from Tick for
// timers (flap grace, typing expiry, sweeps of dead nodes).
package presence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/presenced/presenced/internal/defaults"
)

// LimitError is a join over Config.MaxConversations (Max): it is
// ErrLimit, and says the limit.
type LimitError struct{ Max int }

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v (at most %d)", ErrLimit, e.Max)
}

// Is makes a LimitError ErrLimit.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Errors of engine operations. Handlers map them to ack codes.
var (
	ErrNotJoined   = errors.New("presence: socket has not joined the conversation")
	ErrLimit       = errors.New("presence: too many conversations for this socket")
	ErrUnknown     = errors.New("presence: unknown socket")
	ErrUnavailable = errors.New("presence: backend unavailable")
	// ErrTooManySockets refuses a Connect over Socket.Max.
	ErrTooManySockets = errors.New("presence: too many sockets for this user")
)

// Status is a user's presence status.
type Status string

const (
	Online  Status = "online"
	Away    Status = "away"
	Offline Status = "offline"
)

// Leave reasons (CONTRACT §1 presence:leave).
const (
	ReasonLeft         = "left"
	ReasonDisconnected = "disconnected"
	ReasonTimeout      = "timeout"
)

// Config of an engine. Zero values mean the documented defaults.
type Config struct {
	NodeID           string
	TTL              time.Duration    // presence entry lifetime without refresh; Redis: the longest a stale entry of a live node lives, 45s
	TypingTTL        time.Duration    // 5s
	FlapGrace        time.Duration    // 3s
	AwayAfter        time.Duration    // 5m
	MaxConversations int              // per socket, 100
	LeaseTTL         time.Duration    // a node is dead this long after its last lease renewal (Redis: on Redis's clock), 5s
	Now              func() time.Time // clock, time.Now
	Sink             Sink             // receives events; required
}

// WithDefaults fills zero values.
func (c Config) WithDefaults() Config {
	c.TTL = defaults.Positive(c.TTL, 45*time.Second)
	c.TypingTTL = defaults.Positive(c.TypingTTL, 5*time.Second)
	c.FlapGrace = defaults.NonNegative(c.FlapGrace, 3*time.Second)
	c.AwayAfter = defaults.Positive(c.AwayAfter, 5*time.Minute)
	c.MaxConversations = defaults.Positive(c.MaxConversations, 100)
	c.LeaseTTL = defaults.Positive(c.LeaseTTL, 5*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sink == nil {
		c.Sink = func(context.Context, []Event) {}
	}
	return c
}

// EventKind says what an Event reports.
type EventKind int

const (
	EventJoin   EventKind = iota + 1 // a user's first socket joined a conversation
	EventLeave                       // a user's last socket left a conversation
	EventTyping                      // a user started or stopped typing
	EventStatus                      // a user's status changed (online, away, offline)
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventTyping:
		return "typing"
	case EventStatus:
		return "status"
	}
	return "unknown"
}

// Event is something others must be told.
type Event struct {
	Kind           EventKind
	ConversationID string // join, leave, typing
	UserID         string
	At             time.Time
	Reason         string // leave: left, disconnected, timeout
	Typing         bool   // typing: started (true) or stopped
	Status         Status // status: the new status
	// LastSeen is, for an offline status, the exact time the user's last
	// connection closed (or the dead node's last proof of life).
	LastSeen time.Time
	// ExceptSocket, when set, is the socket that caused the event and need
	// not be told (it gets an ack instead).
	ExceptSocket string
}

// Sink receives events to deliver. It must not call back into the engine.
type Sink func(ctx context.Context, events []Event)

// Socket identifies a connected socket.
type Socket struct {
	ID     string
	UserID string
	// Max, when positive, caps the sockets of the user across the cluster
	// (CONTRACT §1: 20 by default): Connect refuses the socket with
	// ErrTooManySockets if its user has Max sockets already, unless it is
	// one of them (a Connect tried again). The count and the socket's entry
	// are one step (for Redis, one script), so concurrent handshakes of a
	// user never admit more than Max.
	Max int
}

// Member is a user present in a conversation.
type Member struct {
	UserID string
	Status Status // online or away
	Since  time.Time
}

// JoinResult is what a join's ack carries.
type JoinResult struct {
	Online []Member
	Typing []string
}

// UserPresence is a user's cluster-wide state.
type UserPresence struct {
	UserID string
	Status Status    // online, away or offline
	Since  time.Time // online/away: last activity; zero when offline
	// LastSeen is set for offline users the engine still remembers (the
	// exact time of their last disconnect); zero otherwise.
	LastSeen time.Time
}

// The Engine's roles. A user of the engine declares (or takes) the
// smallest of them it needs; Engine composes them all.

// Connections is the lifecycle of this node's sockets.
type Connections interface {
	// Connect registers an authenticated socket of this node. The user comes
	// online unless they were already connected or are within flap grace.
	Connect(ctx context.Context, s Socket) error
	// Disconnect removes a socket; safe to call twice. Its conversations'
	// leaves and the user's offline are deferred by the flap grace.
	Disconnect(ctx context.Context, socketID string) error
	// DisconnectNow removes a socket the server took away on purpose (an
	// operator's disconnect): no flap grace, as its client does not come
	// back by itself. Its conversations' leaves (reason disconnected) and,
	// for the user's last socket, the offline status with this moment as
	// last-seen happen now. Safe to call twice, and after Disconnect.
	DisconnectNow(ctx context.Context, socketID string) error
}

// Rooms is a socket's membership of conversations.
type Rooms interface {
	// Join adds the socket to a conversation (idempotent) and returns the
	// roster. A user's first socket in it (cluster-wide) emits EventJoin.
	Join(ctx context.Context, socketID, conversationID string) (JoinResult, error)
	// Leave removes the socket from a conversation at the user's request;
	// the user's last socket there emits EventLeave with ReasonLeft at once.
	// Leaving a conversation not joined is not an error.
	Leave(ctx context.Context, socketID, conversationID string) error
	// EndGraces ends the flap graces of users in a conversation now, as
	// if they had run out: each user with no socket there and within the
	// grace leaves (EventLeave, ReasonDisconnected, at the disconnect; a
	// typing entry left goes too). For users removed from the
	// conversation's member list, who would else stay in its roster until
	// their grace ends. Their statuses keep their own grace. Any node may
	// call it; for the other users it does nothing.
	EndGraces(ctx context.Context, conversationID string, userIDs []string) error
}

// Activity records what a socket's user does.
type Activity interface {
	// Heartbeat reports that the socket is alive; it fails with ErrUnknown
	// for a socket this node does not have. An active heartbeat counts as
	// activity (away → online), as Touch does. The memory engine also
	// notes the time on the socket; the Redis engine writes nothing for an
	// inactive heartbeat.
	Heartbeat(ctx context.Context, socketID string, active bool) error
	// Touch records activity of the socket's user (any client event). The
	// Redis engine may send the record after it returns (see Settler);
	// the status event of a user back from away follows it then.
	Touch(ctx context.Context, socketID string) error
	// TypingStart records typing; only the start of a typing session emits.
	TypingStart(ctx context.Context, socketID, conversationID string) error
	// TypingStop clears typing; emits if the user was typing.
	TypingStop(ctx context.Context, socketID, conversationID string) error
}

// Settler is an Engine whose activity records can trail the calls that
// made them (the Redis engine sends them in batches, redis_activity.go).
// Settle returns once those made before the call are sent, or failed.
type Settler interface {
	Settle()
}

// Reader answers who is here.
type Reader interface {
	// Roster returns who is online and typing in a conversation.
	Roster(ctx context.Context, conversationID string) (JoinResult, error)
	// Users returns the presence of users, in the order asked.
	Users(ctx context.Context, userIDs []string) ([]UserPresence, error)
}

// Runner runs an engine's timers and ends it.
type Runner interface {
	// Tick runs the timers: this node's lease (and, in memory, the refresh
	// of its sockets; in Redis, the reconciliation of its entries), flap
	// grace expiry, typing expiry, away transitions, sweeps of expired
	// entries and dead nodes. Run calls it periodically.
	Tick(ctx context.Context) error
	// Run ticks until ctx ends.
	Run(ctx context.Context) error
	// Close releases the engine's resources; it does not disconnect sockets.
	Close() error
}

// Engine is one node's presence engine: all its roles.
type Engine interface {
	Connections
	Rooms
	Activity
	Reader
	Runner
}
