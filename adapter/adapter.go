package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/internal/throttle"
	"github.com/presenced/presenced/transport"
)

// Builder creates one NamespaceAdapter per Socket.IO namespace; it is the
// socket.AdapterConstructor given to ServerOptions.SetAdapter or
// Server.SetAdapter. All adapters of a Builder share its Redis client and its
// publisher.
type Builder struct {
	client redis.UniversalClient
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	pub    *publisher
	mode   sync.WaitGroup // watchMode

	mu       sync.Mutex
	adapters map[*NamespaceAdapter]struct{}
	closed   bool
}

var _ socket.AdapterConstructor = (*Builder)(nil)

// New returns a Builder of Redis adapters over client. It does no I/O: the
// subscriptions are made in the background, and come back by themselves
// after a Redis outage; the beacon of its Pub/Sub mode is kept there too
// (watchMode). Its goroutines end with ctx or Close.
func New(ctx context.Context, client redis.UniversalClient, cfg Config) (*Builder, error) {
	if client == nil {
		return nil, errors.New("adapter: nil redis client")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Builder{
		client:   client,
		cfg:      cfg,
		log:      cfg.Log.With("component", "adapter"),
		adapters: map[*NamespaceAdapter]struct{}{},
	}
	b.cfg.Log = b.log
	b.ctx, b.cancel = context.WithCancel(ctx)
	b.pub = newPublisher(b.ctx, client, b.cfg)
	warnOptions(b.log, client)
	b.mode.Go(b.watchMode)
	return b, nil
}

// warnOptions logs client options that defeat the adapter's fail-fast.
func warnOptions(log *slog.Logger, client redis.UniversalClient) {
	var ctxTimeouts bool
	switch c := client.(type) {
	case *redis.Client:
		ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		ctxTimeouts = c.Options().ContextTimeoutEnabled
	default:
		return
	}
	if !ctxTimeouts {
		log.Warn("redis client without ContextTimeoutEnabled: publishes are bounded by its ReadTimeout/WriteTimeout, not PublishTimeout")
	}
}

// New makes the adapter of namespace nsp (called by the Socket.IO server).
func (b *Builder) New(nsp socket.Namespace) socket.Adapter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		b.log.Warn("adapter builder closed: namespace gets a local-only adapter", "nsp", nsp.Name())
		return socket.NewAdapter(nsp)
	}
	a := newNamespaceAdapter(b, nsp)
	b.adapters[a] = struct{}{}
	return a
}

// Close closes every adapter of b and stops its goroutines. Safe to call
// more than once.
func (b *Builder) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	adapters := make([]*NamespaceAdapter, 0, len(b.adapters))
	for a := range b.adapters {
		adapters = append(adapters, a)
	}
	b.mu.Unlock()
	for _, a := range adapters {
		a.Close()
	}
	b.cancel()
	b.pub.wait()
	b.mode.Wait()
	return nil
}

func (b *Builder) forget(a *NamespaceAdapter) {
	b.mu.Lock()
	delete(b.adapters, a)
	b.mu.Unlock()
}

// NamespaceAdapter is the adapter of one namespace: the library's in-memory
// adapter for this node's sockets (with transport.LocalAdapter's delivery),
// plus Redis Pub/Sub for the other nodes.
type NamespaceAdapter struct {
	socket.Adapter

	local   *transport.LocalAdapter // the embedded Adapter: this node's rooms
	b       *Builder
	nsp     socket.Namespace
	name    string
	uid     string
	sharded bool
	log     *slog.Logger

	// classic channels
	channel         string // prefix#nsp#  (also the sharded main channel)
	requestChannel  string // prefix-request#nsp#
	responseChannel string // prefix-response#nsp#   (sharded: prefix#nsp#uid#)
	specificChannel string // prefix-response#nsp#uid#

	sub *subscriber
	sse *serialQueue

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// ignoredMu guards ignored, the log of malformed messages dropped
	// (ignore): one warning per 10 s with their count
	ignoredMu sync.Mutex
	ignored   throttle.Log

	mu       sync.Mutex
	requests map[string]*request
	acks     map[string]*ackRequest
	closed   atomic.Bool
}

var _ socket.Adapter = (*NamespaceAdapter)(nil)

// RoomSockets returns this node's sockets in room (read only), without
// the copy the embedded Adapter's Rooms makes (transport.RoomSockets).
func (a *NamespaceAdapter) RoomSockets(room socket.Room) []socket.SocketId {
	return a.local.RoomSockets(room)
}

// SocketInRoom reports whether a socket of this node is in room, without
// the copy of its rooms the embedded Adapter makes (transport.InRoom).
func (a *NamespaceAdapter) SocketInRoom(id socket.SocketId, room socket.Room) bool {
	return a.local.SocketInRoom(id, room)
}

// delivered tells Config.Delivered of a broadcast from elsewhere: origin
// is the uid of the node (or emitter) that sent it.
func (a *NamespaceAdapter) delivered(origin string, packet *parser.Packet) {
	if f := a.b.cfg.Delivered; f != nil {
		f(origin, packet)
	}
}

func newNamespaceAdapter(b *Builder, nsp socket.Namespace) *NamespaceAdapter {
	// Local delivery: encoded once for all this node's recipients
	// (transport.LocalAdapter).
	base := transport.NewLocalAdapter()
	a := &NamespaceAdapter{
		Adapter:  base,
		local:    base,
		b:        b,
		nsp:      nsp,
		name:     nsp.Name(),
		sharded:  b.cfg.Sharded,
		requests: map[string]*request{},
		acks:     map[string]*ackRequest{},
	}
	base.Prototype(a)
	base.Construct(nsp)

	prefix := b.cfg.Prefix
	a.channel = prefix + "#" + a.name + "#"
	a.requestChannel = prefix + "-request#" + a.name + "#"
	if a.sharded {
		a.uid = randomID()
		a.responseChannel = a.channel + a.uid + "#"
	} else {
		a.uid = uid2(6)
		a.responseChannel = prefix + "-response#" + a.name + "#"
		a.specificChannel = a.responseChannel + a.uid + "#"
	}
	a.log = b.log.With("nsp", a.name, "adapter_uid", a.uid)
	a.ctx, a.cancel = context.WithCancel(b.ctx)
	a.sse = newSerialQueue(a.ctx, &a.wg)
	var regained func(string)
	if b.cfg.Regained != nil {
		requests := a.requestChannel // where server-side emits come
		if a.sharded {
			requests = a.channel
		}
		regained = func(ch string) {
			if ch == requests {
				b.cfg.Regained(a.name)
			}
		}
	}
	a.sub = newSubscriber(a.ctx, b.client, prefix+"-probe#"+a.name+"#"+a.uid+"#", a.onRedisMessage, regained, a.log, b.cfg.Observer)

	if a.sharded {
		a.sub.add(kindShard, a.channel, a.responseChannel)
		if b.cfg.AcceptClassicEmitter {
			a.sub.add(kindPattern, globEscape(a.channel)+"*")
			a.sub.add(kindChannel, a.requestChannel)
		}
		_ = a.On("create-room", func(args ...any) {
			if room, ok := roomArg(args); ok && a.usesDynamicChannel(room) {
				a.sub.add(kindShard, a.channel+string(room)+"#")
			}
		})
		_ = a.On("delete-room", func(args ...any) {
			if room, ok := roomArg(args); ok {
				a.sub.remove(a.channel + string(room) + "#")
			}
		})
	} else {
		a.sub.add(kindPattern, globEscape(a.channel)+"*")
		a.sub.add(kindChannel, a.requestChannel, a.responseChannel, a.specificChannel)
	}
	return a
}

// RoomNames returns the names of this node's rooms (transport.RoomNames).
func (a *NamespaceAdapter) RoomNames() []socket.Room { return a.local.RoomNames() }

func roomArg(args []any) (socket.Room, bool) {
	if len(args) == 0 {
		return "", false
	}
	switch r := args[0].(type) {
	case socket.Room:
		return r, true
	case string:
		return socket.Room(r), true
	}
	return "", false
}

// usesDynamicChannel reports whether, in sharded mode, broadcasts to room
// may arrive on the room's own channel: Node's subscriptionMode "dynamic"
// subscribes to public rooms (not a socket id). Node publishes to a socket
// id room on that room's channel too unless the id is 20 characters long,
// and this library's ids are 24: so this node also subscribes to its own
// sockets' rooms when their id is not 20 characters long.
func (a *NamespaceAdapter) usesDynamicChannel(room socket.Room) bool {
	isSid := a.local.HasSocket(socket.SocketId(room))
	return !isSid || !looksLikeASocketID(string(room))
}

// globEscape escapes the glob characters of a PSUBSCRIBE pattern.
func globEscape(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// UID is this node's id on the wire (the uid of its messages).
func (a *NamespaceAdapter) UID() string { return a.uid }

// Subscribed reports whether Redis confirmed this adapter's subscription to
// the channel of room (sharded mode, where each public room has its own
// channel) or, for room "", to the adapter's own channels. Meant for tests
// and readiness checks.
func (a *NamespaceAdapter) Subscribed(room socket.Room) bool {
	if room != "" {
		if !a.sharded || !a.usesDynamicChannel(room) {
			return a.Subscribed("")
		}
		return a.sub.isSubscribed(a.channel + string(room) + "#")
	}
	if a.sharded {
		return a.sub.isSubscribed(a.channel) && a.sub.isSubscribed(a.responseChannel)
	}
	return a.sub.isSubscribed(globEscape(a.channel)+"*") && a.sub.isSubscribed(a.requestChannel) &&
		a.sub.isSubscribed(a.responseChannel)
}

// Reachable returns nil while this node is in touch with the other nodes:
// its subscriptions are confirmed and its publishes do not fail at once
// (the breaker of a failure to reach Redis is closed). Otherwise an error
// wrapping ErrRedisUnavailable: a broadcast would reach this node's
// sockets alone. A lost subscription is found within the subscriber's
// silence bound (4 s), a closed connection at once.
func (a *NamespaceAdapter) Reachable() error {
	if err := a.b.pub.unavailable(); err != nil {
		return err
	}
	if !a.Subscribed("") {
		return fmt.Errorf("%w: not subscribed", ErrRedisUnavailable)
	}
	return nil
}

// ReachableRoom is Reachable for a broadcast to room alone. In sharded mode
// on a Redis Cluster, where a room has a channel of its own on the master
// of its slot, only that master counts: the breaker of its lane here, and
// this node's subscription there. Reachable's one open breaker anywhere
// made every room refuse `state:set` while one master was down (for good
// if it had no replica; a black-box audit of 2026-12-06). A subscription
// lost, or that failed (lost too), refuses, and so does one still being
// made (a first member here has just joined) on a master whose connection
// failed; otherwise its lane's breaker alone counts, as for one made:
// falling back to Reachable refused a healthy room while another master
// was down (two reviews, 2026-12-07).
func (a *NamespaceAdapter) ReachableRoom(room socket.Room) error {
	if !a.sharded || !a.b.pub.perMaster() || !a.usesDynamicChannel(room) {
		return a.Reachable()
	}
	ch := a.channel + string(room) + "#"
	if a.sub.isLost(ch) || (!a.sub.isSubscribed(ch) && a.sub.routeDown(ch)) {
		return fmt.Errorf("%w: the subscription to the room's channel is lost", ErrRedisUnavailable)
	}
	return a.b.pub.unavailableFor(ch)
}

// Close ends the adapter's subscriptions and pending requests. The Socket.IO
// server calls it on Close; Builder.Close calls it too.
func (a *NamespaceAdapter) Close() {
	if !a.closed.CompareAndSwap(false, true) {
		return
	}
	a.sub.close()
	a.cancel()
	a.mu.Lock()
	requests := a.requests
	a.requests = map[string]*request{}
	for id, ack := range a.acks {
		ack.timer.Stop()
		delete(a.acks, id)
	}
	a.mu.Unlock()
	for _, r := range requests {
		r.finish(ErrClosed)
	}
	a.wg.Wait()
	a.Adapter.Close()
	a.b.forget(a)
}

// publish queues a message for Redis.
func (a *NamespaceAdapter) publish(channel string, payload []byte, sharded bool, done func(error)) {
	a.b.pub.publish(outMsg{channel: channel, payload: payload, sharded: sharded, done: done})
}

func (a *NamespaceAdapter) encodeFailed(what string, err error) {
	a.log.Error("cannot encode message", "what", what, "err", err)
	a.b.cfg.Observer.PublishFailed(a.channel, err)
}

// Broadcast sends packet to the matching sockets of every node. The local
// delivery does not wait for Redis.
func (a *NamespaceAdapter) Broadcast(packet *parser.Packet, opts *socket.BroadcastOptions) {
	packet.Nsp = a.name
	// This node's sockets first: their writes are done by the time the
	// publisher goroutine, woken by the publication, takes a processor.
	a.Adapter.Broadcast(packet, opts)
	if !isLocal(opts) && !a.closed.Load() {
		if a.sharded {
			a.shardedBroadcast(packet, opts)
		} else {
			a.classicBroadcast(packet, opts)
		}
	}
}

// BroadcastWithAck sends packet to the matching sockets of every node and
// reports each node's client count and each client's acknowledgement. The
// request is registered before it is published, so this node never takes
// its own request for another node's.
func (a *NamespaceAdapter) BroadcastWithAck(packet *parser.Packet, opts *socket.BroadcastOptions, clientCountCallback func(uint64), ack socket.Ack) {
	packet.Nsp = a.name
	if !isLocal(opts) && !a.closed.Load() {
		requestID := a.newRequestID()
		timeout := a.b.cfg.RequestsTimeout
		if opts != nil && opts.Flags != nil && opts.Flags.Timeout != nil {
			timeout = *opts.Flags.Timeout
		}
		ar := &ackRequest{clientCount: clientCountCallback, ack: ack}
		a.mu.Lock()
		a.acks[requestID] = ar
		ar.timer = time.AfterFunc(timeout, func() {
			a.mu.Lock()
			delete(a.acks, requestID)
			a.mu.Unlock()
		})
		a.mu.Unlock()
		if a.sharded {
			a.shardedBroadcastWithAck(requestID, packet, opts)
		} else {
			a.classicBroadcastWithAck(requestID, packet, opts)
		}
	}
	// The library's BroadcastOperator reads packet.Id from its timeout
	// timer's goroutine, while its in-memory adapter writes packet.Id here,
	// unsynchronized (a data race). The in-memory adapter gets a copy, and
	// the acks of its sockets that never answered are dropped here at the
	// timeout instead, as the operator would have done.
	local := *packet
	a.Adapter.BroadcastWithAck(&local, opts, clientCountCallback, ack)
	if local.Id != nil && opts != nil && opts.Flags != nil && opts.Flags.Timeout != nil {
		id := *local.Id
		time.AfterFunc(*opts.Flags.Timeout, func() {
			a.nsp.Sockets().Range(func(_ socket.SocketId, s *socket.Socket) bool {
				s.Acks().Delete(id)
				return true
			})
		})
	}
}

// ackRequest is a broadcast with acknowledgements awaiting other nodes.
type ackRequest struct {
	clientCount func(uint64)
	ack         socket.Ack
	timer       *time.Timer
}

func (a *NamespaceAdapter) ackRequest(requestID string) *ackRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acks[requestID]
}

// onBroadcastResponse handles a node's answer to one of our broadcasts
// with acks: how many clients it reached (count: m's clientCount), or one
// client's acknowledgement (m's packet). On the wire an acknowledgement is
// the client's first ack argument, a single value (which may be an array):
// the Go callback gets it as the one element of its args. Both protocols
// (classic.go, sharded.go) send the same fields, under their own types.
func (a *NamespaceAdapter) onBroadcastResponse(requestID string, count bool, m map[string]any) {
	ar := a.ackRequest(requestID)
	if ar == nil {
		return
	}
	if !count {
		ar.ack([]any{m["packet"]}, nil)
	} else if n, _ := num(m, "clientCount"); n >= 0 {
		ar.clientCount(uint64(n))
	}
}

// ackArg is what goes on the wire for a client's acknowledgement: its first
// argument only, as in Node (absent when there is none).
func ackArg(args []any) (any, bool) {
	if len(args) == 0 {
		return nil, false
	}
	return args[0], true
}

// ServerCount returns the number of Socket.IO servers of the namespace in
// the cluster, this one included (1 if Redis cannot say within
// PublishTimeout).
func (a *NamespaceAdapter) ServerCount() int64 {
	ctx, cancel := context.WithTimeout(a.ctx, a.b.cfg.PublishTimeout)
	defer cancel()
	n, err := a.ServerCountContext(ctx)
	if err != nil {
		a.log.Warn("server count unavailable", "err", err)
		return 1
	}
	return n
}

// ServerCountContext counts the subscribers of the namespace's request
// channel (classic: PUBSUB NUMSUB) or main channel (sharded: PUBSUB
// SHARDNUMSUB), summed over every node of a Redis Cluster.
func (a *NamespaceAdapter) ServerCountContext(ctx context.Context) (int64, error) {
	if err := a.b.pub.unavailable(); err != nil {
		return 0, fmt.Errorf("adapter: server count: %w", err)
	}
	channel, shard := a.requestChannel, false
	if a.sharded {
		channel, shard = a.channel, true
	}
	count := func(ctx context.Context, c redis.Cmdable) (int64, error) {
		var res map[string]int64
		var err error
		if shard {
			res, err = c.PubSubShardNumSub(ctx, channel).Result()
		} else {
			res, err = c.PubSubNumSub(ctx, channel).Result()
		}
		return res[channel], err
	}
	cc, ok := a.b.client.(*redis.ClusterClient)
	if !ok {
		n, err := count(ctx, a.b.client)
		if err != nil {
			return 0, fmt.Errorf("adapter: server count: %w", err)
		}
		return max(n, 1), nil
	}
	var total atomic.Int64
	err := cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := count(ctx, node)
		total.Add(n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("adapter: server count: %w", err)
	}
	return max(total.Load(), 1), nil
}

// AddSockets makes the matching sockets of every node join rooms.
func (a *NamespaceAdapter) AddSockets(opts *socket.BroadcastOptions, rooms []socket.Room) {
	a.socketsRequest(opts, clusterSocketsJoin, classicRemoteJoin, kv{"rooms", roomSlice(rooms)})
	a.Adapter.AddSockets(opts, rooms)
}

// DelSockets makes the matching sockets of every node leave rooms.
func (a *NamespaceAdapter) DelSockets(opts *socket.BroadcastOptions, rooms []socket.Room) {
	a.socketsRequest(opts, clusterSocketsLeave, classicRemoteLeave, kv{"rooms", roomSlice(rooms)})
	a.Adapter.DelSockets(opts, rooms)
}

// DisconnectSockets disconnects the matching sockets of every node.
func (a *NamespaceAdapter) DisconnectSockets(opts *socket.BroadcastOptions, close bool) {
	a.socketsRequest(opts, clusterDisconnectSockets, classicRemoteDisconnect, kv{"close", close})
	a.Adapter.DisconnectSockets(opts, close)
}

// socketsRequest asks the other nodes to act on their sockets that opts
// matches (unless opts is local or the adapter closed): a request of type
// sharded or classic, by mode, whose last member is arg.
func (a *NamespaceAdapter) socketsRequest(opts *socket.BroadcastOptions, sharded, classic int, arg kv) {
	if isLocal(opts) || a.closed.Load() {
		return
	}
	if a.sharded {
		a.shardedRequest(sharded, obj{{"opts", optsObj(opts, true)}, arg})
	} else {
		a.classicRequest(obj{{"uid", a.uid}, {"type", classic}, {"opts", optsObj(opts, false)}, arg})
	}
}

// FetchSockets returns the matching sockets of every node. The returned
// function blocks until every other node answered, or RequestsTimeout (or
// the flags' timeout, in sharded mode, as in Node) passed: then it returns
// what it has with ErrTimeout.
func (a *NamespaceAdapter) FetchSockets(opts *socket.BroadcastOptions) func(func([]socket.SocketDetails, error)) {
	return func(callback func([]socket.SocketDetails, error)) {
		var local []socket.SocketDetails
		a.Adapter.FetchSockets(opts)(func(s []socket.SocketDetails, _ error) { local = s })
		if isLocal(opts) || a.closed.Load() {
			callback(local, nil)
			return
		}
		timeout := a.b.cfg.RequestsTimeout
		if a.sharded && opts != nil && opts.Flags != nil && opts.Flags.Timeout != nil && *opts.Flags.Timeout > 0 {
			timeout = *opts.Flags.Timeout
		}
		ctx, cancel := context.WithTimeout(a.ctx, timeout)
		defer cancel()
		n, err := a.ServerCountContext(ctx)
		if err != nil || n <= 1 {
			callback(local, err)
			return
		}
		r := &request{kind: reqFetch, expected: int(n - 1), sockets: local}
		requestID := a.newRequestID()
		var msg obj
		if a.sharded {
			msg = obj{{"opts", optsObj(opts, true)}, {"requestId", requestID}}
		} else {
			msg = obj{{"uid", a.uid}, {"requestId", requestID}, {"type", classicRemoteFetch}, {"opts", optsObj(opts, false)}}
		}
		err = a.await(ctx, requestID, r, clusterFetchSockets, msg)
		callback(r.sockets, err)
	}
}

// AllRooms returns the rooms of every node of the namespace (socket ids
// included, as in Node). Classic mode asks the other nodes (ALL_ROOMS);
// the sharded protocol has no such request, so there the rooms of every
// socket in the cluster are fetched (FETCH_SOCKETS), which Node nodes answer
// too.
func (a *NamespaceAdapter) AllRooms(ctx context.Context) (*types.Set[socket.Room], error) {
	rooms := types.NewSet(a.local.RoomNames()...)
	if a.sharded {
		var sockets []socket.SocketDetails
		var err error
		a.FetchSockets(&socket.BroadcastOptions{})(func(s []socket.SocketDetails, e error) { sockets, err = s, e })
		for _, s := range sockets {
			rooms.Add(s.Rooms().Keys()...)
		}
		return rooms, err
	}
	if ctx.Err() != nil {
		return rooms, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, a.b.cfg.RequestsTimeout)
	defer cancel()
	n, err := a.ServerCountContext(ctx)
	if err != nil || n <= 1 {
		return rooms, err
	}
	r := &request{kind: reqAllRooms, expected: int(n - 1), rooms: rooms}
	requestID := a.newRequestID()
	err = a.await(ctx, requestID, r, 0, obj{{"uid", a.uid}, {"requestId", requestID}, {"type", classicAllRooms}})
	return r.rooms, err
}

// ServerSideEmit sends packet ([event, args...]) to the other servers. When
// its last element is a socket.Ack, every other server is expected to answer
// within RequestsTimeout; the ack then gets one response per server (each
// server's first ack argument), or what arrived and an error.
func (a *NamespaceAdapter) ServerSideEmit(packet []any) error {
	if a.closed.Load() {
		return ErrClosed
	}
	var ack socket.Ack
	if n := len(packet); n > 0 {
		if f, ok := packet[n-1].(socket.Ack); ok && f != nil {
			ack, packet = f, packet[:n-1]
		}
	}
	if ack == nil {
		return a.serverSideEmit("", packet, nil)
	}
	a.mu.Lock() // against Close: no wg.Add once it waits
	if a.closed.Load() {
		a.mu.Unlock()
		return ErrClosed
	}
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(a.ctx, a.b.cfg.RequestsTimeout)
		defer cancel()
		n, err := a.ServerCountContext(ctx)
		if err != nil {
			ack(nil, err)
			return
		}
		n, unsubscribed := a.answering(ctx, packet, n)
		var r *request
		if n > 1 {
			r = &request{kind: reqServerSideEmit, expected: int(n - 1), responses: []any{}}
			requestID := a.newRequestID()
			err = a.awaitFn(ctx, requestID, r, func(done func(error)) error {
				return a.serverSideEmit(requestID, packet, done)
			})
			if errors.Is(err, ErrTimeout) {
				err = fmt.Errorf("%w: only %d responses received out of %d", ErrTimeout, len(r.responses), r.expected)
			}
		} else {
			r = &request{responses: []any{}}
		}
		if err == nil && unsubscribed > 0 {
			err = fmt.Errorf("%w: %d of them not subscribed", ErrPeersUnreachable, unsubscribed)
		}
		ack(r.responses, err)
	}()
	return nil
}

// answering is how many of the n servers answer the server-side event
// packet, this one included: n, or for an event of Config.OwnEvents at
// most what Config.Peers counts; and how many of the peers that Peers
// counts are not among the n subscribers (their subscription is lost:
// the event will not reach them).
func (a *NamespaceAdapter) answering(ctx context.Context, packet []any, n int64) (answer, unsubscribed int64) {
	cfg := a.b.cfg
	if cfg.OwnEvents == "" || cfg.Peers == nil || len(packet) == 0 {
		return n, 0
	}
	if ev, _ := packet[0].(string); !strings.HasPrefix(ev, cfg.OwnEvents) {
		return n, 0
	}
	peers, err := cfg.Peers(ctx)
	if err != nil || peers < 1 {
		return n, 0
	}
	return min(n, peers), max(peers-n, 0)
}

func (a *NamespaceAdapter) serverSideEmit(requestID string, packet []any, done func(error)) error {
	data := normalizeBinary(append([]any{}, packet...)).([]any)
	if a.sharded {
		d := obj{}
		if requestID != "" {
			d = append(d, kv{"requestId", requestID})
		}
		d = append(d, kv{"packet", data})
		return a.shardedPublish(a.channel, clusterServerSideEmit, d, true, done)
	}
	msg := obj{{"uid", a.uid}}
	if requestID != "" {
		msg = append(msg, kv{"requestId", requestID})
	}
	msg = append(msg, kv{"type", classicServerSideEmit}, kv{"data", data})
	payload, err := appendJSON(nil, msg)
	if err != nil {
		a.encodeFailed("server-side emit", err)
		return err
	}
	a.publish(a.requestChannel, payload, false, done)
	return nil
}

// onServerSideEmit hands a server-side emit to the namespace's listeners,
// on a goroutine of its own (in order), so that a listener that waits (on
// another cluster request, say) does not stall the subscription. With
// requestID, the listeners get a socket.Ack as last argument; its first
// argument is the answer.
func (a *NamespaceAdapter) onServerSideEmit(data []any, requestID string, respond func(arg any, ok bool)) {
	args := append([]any{}, data...)
	if requestID != "" {
		var once sync.Once
		args = append(args, socket.Ack(func(reply []any, _ error) {
			once.Do(func() { respond(ackArg(reply)) })
		}))
	}
	a.sse.push(func() { a.nsp.OnServerSideEmit(args) })
}

func (a *NamespaceAdapter) newRequestID() string {
	if a.sharded {
		return randomID()
	}
	return uid2(6)
}

type reqKind int

const (
	reqFetch reqKind = iota
	reqAllRooms
	reqServerSideEmit
	reqSockets
)

// request is a cluster request awaiting the other nodes' answers.
type request struct {
	kind      reqKind
	expected  int
	got       int
	sockets   []socket.SocketDetails
	rooms     *types.Set[socket.Room]
	responses []any

	once sync.Once
	done chan error
}

func (r *request) finish(err error) {
	r.once.Do(func() { r.done <- err })
}

// await publishes a request (msg; in sharded mode the data of a message of
// type typ) and waits for its answers.
func (a *NamespaceAdapter) await(ctx context.Context, requestID string, r *request, typ int, msg obj) error {
	return a.awaitFn(ctx, requestID, r, func(done func(error)) error {
		if a.sharded {
			return a.shardedPublish(a.channel, typ, msg, false, done)
		}
		payload, err := appendJSON(nil, msg)
		if err != nil {
			return err
		}
		a.publish(a.requestChannel, payload, false, done)
		return nil
	})
}

func (a *NamespaceAdapter) awaitFn(ctx context.Context, requestID string, r *request, send func(done func(error)) error) error {
	r.done = make(chan error, 1)
	a.mu.Lock()
	if a.closed.Load() {
		a.mu.Unlock()
		return ErrClosed
	}
	a.requests[requestID] = r
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.requests, requestID)
		a.mu.Unlock()
	}()
	err := send(func(err error) {
		if err != nil {
			r.finish(fmt.Errorf("adapter: publish request: %w", err))
		}
	})
	if err != nil {
		return err
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ErrTimeout
		}
		return ctx.Err()
	}
}

// withRequest runs fn on the pending request requestID, under the lock, and
// finishes it when fn says it is complete.
func (a *NamespaceAdapter) withRequest(requestID string, fn func(r *request) bool) {
	a.mu.Lock()
	r := a.requests[requestID]
	complete := r != nil && fn(r)
	a.mu.Unlock()
	if complete {
		r.finish(nil)
	}
}

func (a *NamespaceAdapter) onFetchResponse(requestID string, sockets any) {
	list, ok := sockets.([]any)
	if !ok {
		return
	}
	a.withRequest(requestID, func(r *request) bool {
		if r.kind != reqFetch && r.kind != reqSockets {
			return false
		}
		for _, s := range list {
			if rs, ok := decodeSocket(s); ok {
				r.sockets = append(r.sockets, rs)
			}
		}
		r.got++
		return r.got >= r.expected
	})
}

func (a *NamespaceAdapter) onAllRoomsResponse(requestID string, rooms any) {
	list, ok := decodeRooms(rooms)
	if !ok {
		return
	}
	a.withRequest(requestID, func(r *request) bool {
		if r.kind != reqAllRooms {
			return false
		}
		r.rooms.Add(list...)
		r.got++
		return r.got >= r.expected
	})
}

func (a *NamespaceAdapter) onServerSideEmitResponse(requestID string, data any) {
	a.withRequest(requestID, func(r *request) bool {
		if r.kind != reqServerSideEmit {
			return false
		}
		r.responses = append(r.responses, data)
		r.got++
		return r.got >= r.expected
	})
}

// localSockets answers a fetchSockets request of another node.
// fetchLocal answers a fetchSockets request of another node with this
// node's sockets that match its options (none if they are malformed).
func (a *NamespaceAdapter) fetchLocal(opts any) []any {
	o, ok := decodeOpts(opts)
	if !ok {
		return []any{}
	}
	return a.localSockets(o)
}

func (a *NamespaceAdapter) localSockets(opts *socket.BroadcastOptions) []any {
	opts.Flags = &socket.BroadcastFlags{Local: true}
	var local []socket.SocketDetails
	a.Adapter.FetchSockets(opts)(func(s []socket.SocketDetails, _ error) { local = s })
	out := make([]any, len(local))
	for i, s := range local {
		out[i] = socketObj(s)
	}
	return out
}

// onRedisMessage dispatches a message read from Redis.
func (a *NamespaceAdapter) onRedisMessage(m *redis.Message) {
	if a.closed.Load() {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("panic handling redis message", "channel", m.Channel, "panic", p)
		}
	}()
	if a.sharded {
		switch {
		case m.Pattern != "":
			a.onClassicBroadcast(m.Channel, m.Payload, true)
		case m.Channel == a.requestChannel:
			a.onClassicRequest(m.Payload, true)
		default:
			a.onShardedMessage(m.Channel, m.Payload)
		}
		return
	}
	switch {
	case m.Pattern != "":
		a.onClassicBroadcast(m.Channel, m.Payload, false)
	case m.Channel == a.requestChannel:
		a.onClassicRequest(m.Payload, false)
	case m.Channel == a.responseChannel || m.Channel == a.specificChannel:
		a.onClassicResponse(m.Payload)
	}
}

// serialQueue runs functions one after another on one goroutine.
type serialQueue struct {
	mu     sync.Mutex
	q      []func()
	signal chan struct{}
}

func newSerialQueue(ctx context.Context, wg *sync.WaitGroup) *serialQueue {
	s := &serialQueue{signal: make(chan struct{}, 1)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.signal:
			}
			for {
				s.mu.Lock()
				if len(s.q) == 0 {
					s.mu.Unlock()
					break
				}
				fn := s.q[0]
				s.q[0] = nil
				s.q = s.q[1:]
				s.mu.Unlock()
				if ctx.Err() != nil {
					return
				}
				fn()
			}
		}
	}()
	return s
}

func (s *serialQueue) push(fn func()) {
	s.mu.Lock()
	s.q = append(s.q, fn)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// ignore logs a malformed message of another node or of a backend (what)
// that is dropped: a warning at the first, then one per 10 s with their
// count, so that a backend sending what no node can read is seen, and a
// stream of them does not flood the log.
func (a *NamespaceAdapter) ignore(what string, err error) {
	a.ignoredMu.Lock()
	if a.ignored.Every == 0 {
		a.ignored.Every = 10 * time.Second
	}
	n, log := a.ignored.Fail(time.Now())
	a.ignoredMu.Unlock()
	if log {
		a.log.Warn("ignoring malformed adapter messages (from a backend or another node)", "last", what, "err", err, "count", n)
	}
}
