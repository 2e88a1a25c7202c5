package transport

import (
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

// Frame is one Socket.IO packet encoded once for any number of recipients.
// To a socket on our websocket transport it is one whole websocket frame,
// shared by every recipient and queued as it is (wsout.go); to any other
// socket (long-polling, an upgrade in progress, Engine.IO v3 binary) it is
// the parser's encoding, handed to the library's pipeline as its own
// broadcasts do.
type Frame struct {
	packet  *parser.Packet
	encoded []types.BufferInterface // the parser's encoding
	opts    socket.WriteOptions
	ws      []byte // the websocket frame; nil when the packet takes several messages
	binary  bool   // ws is a binary message (the msgpack parser)
}

// EncodeFrame encodes p with enc once. flags (nil: none) carries the
// emit's volatile and compress flags.
func EncodeFrame(enc parser.Encoder, p *parser.Packet, flags *socket.BroadcastFlags) *Frame {
	f := &Frame{packet: p, encoded: enc.Encode(p)}
	f.opts.PreEncoded = true
	if flags != nil {
		f.opts.Volatile = flags.Volatile
		f.opts.Compress = flags.Compress
	}
	if len(f.encoded) == 1 {
		switch b := f.encoded[0].(type) {
		case *types.StringBuffer:
			// an Engine.IO MESSAGE: "4" and the Socket.IO packet
			f.ws = buildFrame(opText, []byte{'4'}, b.Bytes())
		default:
			// Engine.IO v4 sends a binary message as it is
			f.ws = buildFrame(opBinary, nil, b.Bytes())
			f.binary = true
		}
	}
	return f
}

// EventFrame encodes the event (name and arguments) for the namespace's
// sockets, with the namespace's parser.
func EventFrame(nsp socket.Namespace, event string, args ...any) *Frame {
	p := &parser.Packet{Type: parser.EVENT, Nsp: nsp.Name(), Data: append([]any{event}, args...)}
	return EncodeFrame(nsp.Server().Encoder(), p, nil)
}

// WriteTo sends the frame to one socket, after whatever the socket was
// sent before. A socket that is closing gets nothing.
func (f *Frame) WriteTo(s *socket.Socket) {
	if notify := s.NotifyOutgoingListeners(); notify != nil {
		notify(f.packet)
	}
	conn := s.Conn()
	if f.ws != nil && conn.ReadyState() == "open" {
		if w, ok := conn.Transport().(*wsTransport); ok && w.settled.Load() && (!f.binary || conn.Protocol() >= 4) {
			if f.opts.Volatile && w.busy() {
				return // as the library discards a volatile packet it cannot write now
			}
			w.queue(f.ws)
			return
		}
	}
	s.Client().WriteToEngine(f.encoded, &f.opts)
}

// LocalAdapter is the Socket.IO library's in-memory adapter with its local
// delivery replaced: a broadcast is encoded once (Frame) and queued on
// each recipient's websocket, instead of passing through the library's
// per-socket packet pipeline (a copy of the packet, events, a flush, an
// encode and a write per recipient). BroadcastWithAck and everything else
// are the library's.
//
// As its own adapter (LocalAdapterBuilder) it serves a single node; a
// cluster adapter embeds one for its local delivery (package adapter).
type LocalAdapter struct {
	socket.Adapter
}

// NewLocalAdapter returns an unconstructed LocalAdapter: the caller sets
// its prototype (the outermost adapter) and calls Construct.
func NewLocalAdapter() *LocalAdapter {
	return &LocalAdapter{Adapter: socket.MakeAdapter()}
}

// LocalAdapterBuilder makes a LocalAdapter per namespace
// (ServerOptions.SetAdapter).
type LocalAdapterBuilder struct{}

// New implements socket.AdapterBuilder.
func (LocalAdapterBuilder) New(nsp socket.Namespace) socket.Adapter {
	a := NewLocalAdapter()
	a.Prototype(a)
	a.Construct(nsp)
	return a
}

// Broadcast delivers packet to this node's sockets that opts selects.
func (a *LocalAdapter) Broadcast(packet *parser.Packet, opts *socket.BroadcastOptions) {
	nsp := a.Nsp()
	packet.Nsp = nsp.Name()
	var flags *socket.BroadcastFlags
	if opts != nil {
		flags = opts.Flags
	}
	f := EncodeFrame(nsp.Server().Encoder(), packet, flags)
	a.each(opts, f.WriteTo)
}

// each calls fn for each connected socket of the namespace that opts
// selects, once: those in any of opts.Rooms (every socket when there are
// none), less those in any of opts.Except.
func (a *LocalAdapter) each(opts *socket.BroadcastOptions, fn func(*socket.Socket)) {
	var rooms, except *types.Set[socket.Room]
	if opts != nil {
		rooms, except = opts.Rooms, opts.Except
	}
	var skip map[socket.SocketId]struct{}
	if except != nil && except.Len() > 0 {
		skip = map[socket.SocketId]struct{}{}
		for _, r := range except.Keys() {
			if ids, ok := a.Rooms().Load(r); ok {
				for _, id := range ids.Keys() {
					skip[id] = struct{}{}
				}
			}
		}
	}
	sockets := a.Nsp().Sockets()
	visit := func(id socket.SocketId) {
		if _, ok := skip[id]; ok {
			return
		}
		if s, ok := sockets.Load(id); ok && s.Connected() {
			fn(s)
		}
	}
	if rooms == nil || rooms.Len() == 0 {
		a.Sids().Range(func(id socket.SocketId, _ *types.Set[socket.Room]) bool {
			visit(id)
			return true
		})
		return
	}
	keys := rooms.Keys()
	if len(keys) == 1 { // a set's members are distinct
		if ids, ok := a.Rooms().Load(keys[0]); ok {
			for _, id := range ids.Keys() {
				visit(id)
			}
		}
		return
	}
	seen := map[socket.SocketId]struct{}{}
	for _, r := range keys {
		if ids, ok := a.Rooms().Load(r); ok {
			for _, id := range ids.Keys() {
				if _, dup := seen[id]; !dup {
					seen[id] = struct{}{}
					visit(id)
				}
			}
		}
	}
}
