package adapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/transport"
)

// EmitterConfig configures an Emitter. Zero values mean the defaults.
type EmitterConfig struct {
	// Prefix of the channels, as Config.Prefix (default "socket.io").
	Prefix string
	// Sharded publishes with SPUBLISH in the sharded protocol's format, for
	// clusters running in sharded mode; otherwise PUBLISH in the format of
	// @socket.io/redis-emitter.
	Sharded bool
	// Namespace to emit to (default "/").
	Namespace string
	// Timeout bounds the publishes of the methods without a context
	// (default 5s).
	Timeout time.Duration
}

// Emitter sends events to the clients of a Socket.IO cluster through Redis,
// without being a Socket.IO server, like @socket.io/redis-emitter: a backend
// emits to rooms such as "conversation:<id>" and "user:<id>".
//
//	e := adapter.NewEmitter(client, adapter.EmitterConfig{Prefix: "presence"})
//	err := e.To("conversation:42").Except("user:7").Emit("typing", payload)
//
// An Emitter and its operators are immutable and safe for concurrent use.
type Emitter struct {
	op Operator
}

// NewEmitter returns an emitter publishing through client.
func NewEmitter(client redis.UniversalClient, cfg EmitterConfig) *Emitter {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "/"
	} else if cfg.Namespace[0] != '/' {
		cfg.Namespace = "/" + cfg.Namespace
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Emitter{op: Operator{client: client, cfg: cfg, flags: obj{}}}
}

// Of returns an emitter for namespace nsp.
func (e *Emitter) Of(nsp string) *Emitter {
	cfg := e.op.cfg
	cfg.Namespace = nsp
	if nsp == "" || nsp[0] != '/' {
		cfg.Namespace = "/" + nsp
	}
	return &Emitter{op: Operator{client: e.op.client, cfg: cfg, flags: obj{}}}
}

// To targets rooms (a client in several of them gets the event once).
func (e *Emitter) To(rooms ...string) Operator { return e.op.To(rooms...) }

// In is To.
func (e *Emitter) In(rooms ...string) Operator { return e.op.To(rooms...) }

// Except excludes the clients of rooms.
func (e *Emitter) Except(rooms ...string) Operator { return e.op.Except(rooms...) }

// Volatile marks the event as droppable by clients not ready to receive it.
func (e *Emitter) Volatile() Operator { return e.op.Volatile() }

// Compress sets the compress flag.
func (e *Emitter) Compress(compress bool) Operator { return e.op.Compress(compress) }

// Emit sends an event to every client of the namespace.
func (e *Emitter) Emit(ev string, args ...any) error { return e.op.Emit(ev, args...) }

// EmitContext is Emit bounded by ctx.
func (e *Emitter) EmitContext(ctx context.Context, ev string, args ...any) error {
	return e.op.EmitContext(ctx, ev, args...)
}

// SocketsJoin makes every socket of the namespace join rooms.
func (e *Emitter) SocketsJoin(rooms ...string) error { return e.op.SocketsJoin(rooms...) }

// SocketsLeave makes every socket of the namespace leave rooms.
func (e *Emitter) SocketsLeave(rooms ...string) error { return e.op.SocketsLeave(rooms...) }

// DisconnectSockets disconnects every socket of the namespace; close also
// closes their connections.
func (e *Emitter) DisconnectSockets(close bool) error { return e.op.DisconnectSockets(close) }

// ServerSideEmit sends an event to the Socket.IO servers of the cluster
// (acknowledgements are not supported, as in Node's emitter).
func (e *Emitter) ServerSideEmit(ev string, args ...any) error {
	return e.ServerSideEmitContext(context.Background(), ev, args...)
}

// ServerSideEmitContext is ServerSideEmit bounded by ctx.
func (e *Emitter) ServerSideEmitContext(ctx context.Context, ev string, args ...any) error {
	op := e.op
	data := normalizeBinary(append([]any{ev}, args...)).([]any)
	if op.cfg.Sharded {
		return op.publishCluster(ctx, op.mainChannel(), clusterServerSideEmit, obj{{"packet", data}}, true)
	}
	payload, err := appendJSON(nil, obj{{"uid", emitterUID}, {"type", classicServerSideEmit}, {"data", data}})
	if err != nil {
		return err
	}
	return op.publish(ctx, op.requestChannel(), payload)
}

// Operator is an emission being set up: rooms, excluded rooms and flags.
type Operator struct {
	client redis.UniversalClient
	cfg    EmitterConfig
	rooms  []string
	except []string
	flags  obj
}

func addRooms(list []string, rooms []string) []string {
	out := append([]string{}, list...)
	for _, r := range rooms {
		found := false
		for _, have := range out {
			if have == r {
				found = true
				break
			}
		}
		if !found {
			out = append(out, r)
		}
	}
	return out
}

// To targets rooms.
func (o Operator) To(rooms ...string) Operator {
	o.rooms = addRooms(o.rooms, rooms)
	return o
}

// In is To.
func (o Operator) In(rooms ...string) Operator { return o.To(rooms...) }

// Except excludes the clients of rooms.
func (o Operator) Except(rooms ...string) Operator {
	o.except = addRooms(o.except, rooms)
	return o
}

func (o Operator) withFlag(k string, v any) Operator {
	flags := make(obj, 0, len(o.flags)+1)
	for _, e := range o.flags {
		if e.k != k {
			flags = append(flags, e)
		}
	}
	o.flags = append(flags, kv{k, v})
	return o
}

// Volatile marks the event as droppable by clients not ready to receive it.
func (o Operator) Volatile() Operator { return o.withFlag("volatile", true) }

// Compress sets the compress flag.
func (o Operator) Compress(compress bool) Operator { return o.withFlag("compress", compress) }

// Emit sends the event, bounded by EmitterConfig.Timeout.
func (o Operator) Emit(ev string, args ...any) error {
	return o.EmitContext(context.Background(), ev, args...)
}

// EmitContext sends the event.
func (o Operator) EmitContext(ctx context.Context, ev string, args ...any) error {
	if transport.ReservedEvent(ev) { // (as in Socket.IO; a packet of one from elsewhere is dropped: clientValid)
		return fmt.Errorf("adapter: %q is a reserved event name", ev)
	}
	for _, a := range args {
		if isFunc(a) {
			return errors.New("adapter: the emitter does not support acknowledgements")
		}
	}
	data := normalizeBinary(append([]any{ev}, args...)).([]any)
	if o.cfg.Sharded {
		// The packet as Node's ClusterAdapter publishes it: without nsp.
		packet := obj{{"type", 2}, {"data", data}}
		channel := o.mainChannel()
		if len(o.rooms) == 1 && !looksLikeASocketID(o.rooms[0]) {
			channel += o.rooms[0] + "#"
		}
		opts := obj{{"rooms", strList(o.rooms)}, {"except", strList(o.except)}, {"flags", o.flags}}
		return o.publishCluster(ctx, channel, clusterBroadcast, obj{{"packet", packet}, {"opts", opts}}, true)
	}
	// @socket.io/redis-emitter: [uid, {type, data, nsp}, {rooms, flags, except}].
	packet := obj{{"type", 2}, {"data", data}, {"nsp", o.cfg.Namespace}}
	opts := obj{{"rooms", strList(o.rooms)}, {"flags", o.flags}, {"except", strList(o.except)}}
	payload, err := encodeMsgpack([]any{emitterUID, packet, opts})
	if err != nil {
		return err
	}
	channel := o.cfg.Prefix + "#" + o.cfg.Namespace + "#"
	if len(o.rooms) == 1 {
		channel += o.rooms[0] + "#"
	}
	return o.publish(ctx, channel, payload)
}

// SocketsJoin makes the matching sockets join rooms.
func (o Operator) SocketsJoin(rooms ...string) error {
	return o.SocketsJoinContext(context.Background(), rooms...)
}

// SocketsJoinContext is SocketsJoin bounded by ctx.
func (o Operator) SocketsJoinContext(ctx context.Context, rooms ...string) error {
	return o.roomsRequest(ctx, classicRemoteJoin, clusterSocketsJoin, rooms)
}

// SocketsLeave makes the matching sockets leave rooms.
func (o Operator) SocketsLeave(rooms ...string) error {
	return o.SocketsLeaveContext(context.Background(), rooms...)
}

// SocketsLeaveContext is SocketsLeave bounded by ctx.
func (o Operator) SocketsLeaveContext(ctx context.Context, rooms ...string) error {
	return o.roomsRequest(ctx, classicRemoteLeave, clusterSocketsLeave, rooms)
}

func (o Operator) roomsRequest(ctx context.Context, classicType, clusterType int, rooms []string) error {
	if o.cfg.Sharded {
		return o.publishCluster(ctx, o.mainChannel(), clusterType, obj{{"opts", o.requestOpts(true)}, {"rooms", strList(rooms)}}, false)
	}
	payload, err := appendJSON(nil, obj{{"type", classicType}, {"opts", o.requestOpts(false)}, {"rooms", strList(rooms)}})
	if err != nil {
		return err
	}
	return o.publish(ctx, o.requestChannel(), payload)
}

// DisconnectSockets disconnects the matching sockets; close also closes
// their connections.
func (o Operator) DisconnectSockets(close bool) error {
	return o.DisconnectSocketsContext(context.Background(), close)
}

// DisconnectSocketsContext is DisconnectSockets bounded by ctx.
func (o Operator) DisconnectSocketsContext(ctx context.Context, close bool) error {
	if o.cfg.Sharded {
		return o.publishCluster(ctx, o.mainChannel(), clusterDisconnectSockets, obj{{"opts", o.requestOpts(true)}, {"close", close}}, false)
	}
	payload, err := appendJSON(nil, obj{{"type", classicRemoteDisconnect}, {"opts", o.requestOpts(false)}, {"close", close}})
	if err != nil {
		return err
	}
	return o.publish(ctx, o.requestChannel(), payload)
}

func (o Operator) requestOpts(withFlags bool) obj {
	opts := obj{{"rooms", strList(o.rooms)}, {"except", strList(o.except)}}
	if withFlags {
		opts = append(opts, kv{"flags", o.flags})
	}
	return opts
}

func (o Operator) mainChannel() string    { return o.cfg.Prefix + "#" + o.cfg.Namespace + "#" }
func (o Operator) requestChannel() string { return o.cfg.Prefix + "-request#" + o.cfg.Namespace + "#" }

// publishCluster publishes a sharded-protocol message from the emitter.
func (o Operator) publishCluster(ctx context.Context, channel string, typ int, data obj, mayContainBinary bool) error {
	payload, err := encodeMessage(obj{{"type", typ}, {"data", data}, {"uid", emitterUID}, {"nsp", o.cfg.Namespace}}, mayContainBinary)
	if err != nil {
		return err
	}
	return o.publish(ctx, channel, payload)
}

func (o Operator) publish(ctx context.Context, channel string, payload []byte) error {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	var err error
	switch cc, isCluster := o.client.(*redis.ClusterClient); {
	case o.cfg.Sharded:
		err = o.client.SPublish(ctx, channel, payload).Err()
	case isCluster:
		// Through one master, so that this emitter's messages keep their
		// order across the cluster (see publisher.pipeline).
		var node *redis.Client
		if node, err = cc.MasterForKey(ctx, o.cfg.Prefix); err == nil {
			err = node.Publish(ctx, channel, payload).Err()
		}
	default:
		err = o.client.Publish(ctx, channel, payload).Err()
	}
	if err != nil {
		return fmt.Errorf("adapter: emit to %s: %w", channel, err)
	}
	return nil
}

func strList(list []string) []any {
	out := make([]any, len(list))
	for i, s := range list {
		out[i] = s
	}
	return out
}
