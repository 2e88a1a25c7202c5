package transport

import (
	"sync"

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
	members roomMembers
}

// NewLocalAdapter returns an unconstructed LocalAdapter: the caller sets
// its prototype (the outermost adapter) and calls Construct.
func NewLocalAdapter() *LocalAdapter {
	a := &LocalAdapter{Adapter: socket.MakeAdapter()}
	a.members.init()
	// The library announces each change of a room after making it.
	changed := func(args ...any) {
		if room, ok := roomOf(args); ok {
			a.members.changed(room)
		}
	}
	_ = a.On("join-room", changed)
	_ = a.On("leave-room", changed)
	_ = a.On("delete-room", func(args ...any) {
		if room, ok := roomOf(args); ok {
			a.members.gone(room)
		}
	})
	return a
}

func roomOf(args []any) (socket.Room, bool) {
	if len(args) == 0 {
		return "", false
	}
	r, ok := args[0].(socket.Room)
	return r, ok
}

// roomMembers keeps, for each room broadcast to since its last change, the
// list of its sockets: the library's rooms hand out a fresh copy of their
// members per call (types.Set.Keys), which was a quarter of what typing
// fan-out allocated. A list is dropped when its room changes; versions,
// from one counter that never repeats, keep a list read before a change
// from being kept after it.
type roomMembers struct {
	mu       sync.Mutex
	seq      uint64
	versions map[socket.Room]uint64 // rooms that exist: the version of their last change
	lists    map[socket.Room][]socket.SocketId
}

func (m *roomMembers) init() {
	m.versions = map[socket.Room]uint64{}
	m.lists = map[socket.Room][]socket.SocketId{}
}

func (m *roomMembers) changed(room socket.Room) {
	m.mu.Lock()
	m.seq++
	m.versions[room] = m.seq
	delete(m.lists, room)
	m.mu.Unlock()
}

func (m *roomMembers) gone(room socket.Room) {
	m.mu.Lock()
	delete(m.versions, room)
	delete(m.lists, room)
	m.mu.Unlock()
}

// of returns room's sockets (a list shared with other callers: read only),
// from load, which returns the library's set of them (nil: no such room).
// The set is loaded after the version is read: a room deleted and made
// again meanwhile has a later version, so a list of its old set is not
// kept.
func (m *roomMembers) of(room socket.Room, load func() *types.Set[socket.SocketId]) []socket.SocketId {
	m.mu.Lock()
	list, ok := m.lists[room]
	v := m.versions[room]
	m.mu.Unlock()
	if ok {
		return list
	}
	set := load()
	if set == nil {
		return nil
	}
	list = set.Keys()
	if v == 0 {
		return list // a room not announced (yet): not kept
	}
	m.mu.Lock()
	if m.versions[room] == v {
		m.lists[room] = list
	}
	m.mu.Unlock()
	return list
}

// sockets returns the sockets in room on this node (read only).
func (a *LocalAdapter) sockets(room socket.Room) []socket.SocketId {
	return a.members.of(room, func() *types.Set[socket.SocketId] {
		set, _ := a.Rooms().Load(room)
		return set
	})
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
			for _, id := range a.sockets(r) {
				skip[id] = struct{}{}
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
		for _, id := range a.sockets(keys[0]) {
			visit(id)
		}
		return
	}
	seen := map[socket.SocketId]struct{}{}
	for _, r := range keys {
		for _, id := range a.sockets(r) {
			if _, dup := seen[id]; !dup {
				seen[id] = struct{}{}
				visit(id)
			}
		}
	}
}
