package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
)

// Defaults of Config.
const (
	DefaultPrefix              = "socket.io" // the `key` / `channelPrefix` default of @socket.io/redis-adapter
	DefaultRequestsTimeout     = 5 * time.Second
	DefaultPublishTimeout      = time.Second
	DefaultMaxPendingPublishes = 4096
)

// Config configures a Builder. Zero values mean the documented defaults.
type Config struct {
	// Prefix of every channel: the `key` option of createAdapter, the
	// `channelPrefix` option of createShardedAdapter (both default to
	// "socket.io"). Every node and emitter of a cluster uses the same one.
	Prefix string

	// Sharded selects sharded Pub/Sub (SPUBLISH/SSUBSCRIBE, Redis 7+), the
	// wire format of createShardedAdapter (subscriptionMode "dynamic");
	// otherwise classic Pub/Sub (PUBLISH/PSUBSCRIBE), the format of
	// createAdapter. All nodes of a cluster use the same mode.
	Sharded bool

	// AcceptClassicEmitter, in sharded mode, also listens on the classic
	// channels @socket.io/redis-emitter publishes to (it only speaks PUBLISH),
	// so backends using it keep reaching this node's clients. Node's sharded
	// adapter does not do this. No effect in classic mode.
	AcceptClassicEmitter bool

	// RequestsTimeout bounds a cluster request (fetch sockets, all rooms,
	// server-side emit with acknowledgement) waiting for the other nodes'
	// answers. Default 5s, as in Node.
	RequestsTimeout time.Duration

	// PublishTimeout bounds one PUBLISH/SPUBLISH round trip (a pipelined
	// batch of them). Default 1s. The client must have ContextTimeoutEnabled for a
	// stalled Redis to be cut at this bound (see the package documentation).
	PublishTimeout time.Duration

	// MaxPendingPublishes bounds the messages waiting to be published (in
	// sharded mode on a Redis Cluster, to each master); past it a publish
	// fails at once (and is counted). Default 4096.
	MaxPendingPublishes int

	// Name identifies this node in the beacon of its Pub/Sub mode, which
	// a node of the other mode on the same Prefix finds (OtherMode): the
	// node id, say. Optional.
	Name string

	// Log receives the adapter's own logs; nil discards them.
	Log *slog.Logger

	// Observer counts publishes and receptions; nil counts nothing.
	Observer Observer

	// Delivered, if set, is called with the packet of each broadcast from
	// another node or an emitter once it went to this node's sockets (not
	// for one asking for acknowledgements), and the uid of the adapter (or
	// emitter) that sent it, on the subscription's goroutine: it must not
	// block.
	Delivered func(origin string, packet *parser.Packet)

	// OwnEvents and Peers: server-side events whose name starts with
	// OwnEvents (non-empty) are answered by this program's nodes only, not
	// by the other Socket.IO servers sharing the cluster (a Node server
	// has no listener for them, and so never acks), and Peers counts those
	// nodes, this one included. A ServerSideEmit of such an event with an
	// ack waits for the answers of at most Peers-1 servers (and of no more
	// than the server count's): before, one Node server in the cluster
	// made every such call wait out RequestsTimeout. A Peers that fails
	// leaves the server count alone.
	OwnEvents string
	Peers     func(ctx context.Context) (int64, error)

	// Regained, if set, is called with a namespace's name, on a goroutine
	// of its own, when this node's subscription to the channel its
	// server-side emits come on (classic: the request channel; sharded:
	// the main channel) is confirmed again after its connection was lost
	// (or after a first subscription failed): what the other nodes sent
	// meanwhile never reached this node, and Redis keeps nothing of it.
	// Pub/Sub delivers at most once.
	Regained func(nsp string)
}

// Observer is told about the adapter's traffic, e.g. to feed metrics. Its
// methods are called concurrently, from the adapter's goroutines and from
// the callers of Broadcast & co, and must not block.
type Observer interface {
	// Published is called once per message Redis accepted.
	Published()
	// PublishFailed is called once per message that could not be published:
	// Redis unreachable or slow (ErrRedisUnavailable, a timeout, ...) or the
	// pending queue full (ErrPublishQueueFull). channel is the Redis channel.
	PublishFailed(channel string, err error)
	// Received is called once per message read from a subscription.
	Received()
}

// Errors of this package.
var (
	// ErrPublishQueueFull: more than Config.MaxPendingPublishes messages
	// were waiting for Redis.
	ErrPublishQueueFull = errors.New("adapter: publish queue full")
	// ErrRedisUnavailable: a recent publish failed to reach Redis; publishes
	// fail at once for a short while instead of queueing behind it.
	ErrRedisUnavailable = errors.New("adapter: redis unavailable")
	// ErrClosed: the adapter or builder was closed.
	ErrClosed = errors.New("adapter: closed")
	// ErrPeersUnreachable: a server-side emit of one of Config.OwnEvents
	// was answered by every node subscribed, but Config.Peers counts more
	// nodes than Redis has subscribers: some node's subscription is lost
	// (its link to Redis), and the event did not reach it.
	ErrPeersUnreachable = errors.New("adapter: not every node is subscribed")
	// ErrTimeout: not every node answered a request within RequestsTimeout.
	ErrTimeout = errors.New("adapter: timeout reached while waiting for responses")
)

type nopObserver struct{}

func (nopObserver) Published()                  {}
func (nopObserver) PublishFailed(string, error) {}
func (nopObserver) Received()                   {}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.RequestsTimeout < 0 || c.PublishTimeout < 0 || c.MaxPendingPublishes < 0 {
		return c, fmt.Errorf("adapter: negative timeout or queue size in config")
	}
	if c.RequestsTimeout == 0 {
		c.RequestsTimeout = DefaultRequestsTimeout
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.MaxPendingPublishes == 0 {
		c.MaxPendingPublishes = DefaultMaxPendingPublishes
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return c, nil
}
