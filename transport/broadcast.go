package transport

import (
	"runtime"
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
// sent before (or, while the socket is held, after its hold: Hold). A
// socket that is closing gets nothing.
func (f *Frame) WriteTo(s *socket.Socket) {
	if held(s, f) {
		return
	}
	f.write(s)
}

func (f *Frame) write(s *socket.Socket) {
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

// LocalAdapter is the Socket.IO library's in-memory adapter with its room
// membership and its local delivery replaced. Rooms are kept in a
// roomIndex (rooms.go) instead of the library's maps of concurrent sets. A
// broadcast is encoded once (Frame) and queued on each recipient's
// websocket, instead of passing through the library's per-socket packet
// pipeline (a copy of the packet, events, a flush, an encode and a write
// per recipient). The library's adapter still serves as the event emitter
// and for the namespace, the prototype and the cluster hooks.
//
// As its own adapter (LocalAdapterBuilder) it serves a single node; a
// cluster adapter embeds one for its local delivery (package adapter).
type LocalAdapter struct {
	socket.Adapter
	idx roomIndex
}

// NewLocalAdapter returns an unconstructed LocalAdapter: the caller sets
// its prototype (the outermost adapter) and calls Construct.
func NewLocalAdapter() *LocalAdapter {
	a := &LocalAdapter{Adapter: socket.MakeAdapter()}
	a.idx.init()
	return a
}

// wantsEvents returns where to collect room changes: nil when nothing
// listens to them.
func (a *LocalAdapter) wantsEvents(buf *[]roomEvent) *[]roomEvent {
	for _, ev := range [...]types.EventName{"create-room", "join-room", "leave-room", "delete-room"} {
		if a.ListenerCount(ev) > 0 {
			return buf
		}
	}
	return nil
}

// announce emits the room changes, in order, as the library's adapter does.
func (a *LocalAdapter) announce(events []roomEvent) {
	for _, e := range events {
		if e.id != "" {
			a.Emit(types.EventName(e.name), e.room, e.id)
		} else {
			a.Emit(types.EventName(e.name), e.room)
		}
	}
}

// AddAll puts the socket in rooms.
func (a *LocalAdapter) AddAll(id socket.SocketId, rooms *types.Set[socket.Room]) {
	if rooms == nil {
		return
	}
	var buf []roomEvent
	events := a.wantsEvents(&buf)
	a.idx.add(id, rooms.Keys(), events)
	a.announce(buf)
}

// Del takes the socket out of room.
func (a *LocalAdapter) Del(id socket.SocketId, room socket.Room) {
	var buf []roomEvent
	a.idx.remove(id, room, false, a.wantsEvents(&buf))
	a.announce(buf)
}

// DelAll takes the socket out of all its rooms.
func (a *LocalAdapter) DelAll(id socket.SocketId) {
	var buf []roomEvent
	a.idx.remove(id, "", true, a.wantsEvents(&buf))
	a.announce(buf)
}

// SocketRooms returns a copy of the socket's rooms (nil: not in any).
func (a *LocalAdapter) SocketRooms(id socket.SocketId) *types.Set[socket.Room] {
	rooms := a.idx.socketRooms(id)
	if rooms == nil {
		return nil
	}
	return types.NewSet(rooms...)
}

// Rooms returns a copy of the rooms and their sockets, in the library's
// form; it is not kept up to date. RoomSockets and HasRoom read the rooms
// without the copy.
func (a *LocalAdapter) Rooms() *types.Map[socket.Room, *types.Set[socket.SocketId]] {
	out := &types.Map[socket.Room, *types.Set[socket.SocketId]]{}
	for _, room := range a.idx.roomNames() {
		out.Store(room, types.NewSet(a.idx.members(room)...))
	}
	return out
}

// Sids returns a copy of the sockets and their rooms, in the library's
// form; it is not kept up to date.
func (a *LocalAdapter) Sids() *types.Map[socket.SocketId, *types.Set[socket.Room]] {
	out := &types.Map[socket.SocketId, *types.Set[socket.Room]]{}
	for _, id := range a.idx.socketIDs() {
		if rooms := a.idx.socketRooms(id); rooms != nil {
			out.Store(id, types.NewSet(rooms...))
		}
	}
	return out
}

// RoomSockets returns the sockets in room on this node (read only).
func (a *LocalAdapter) RoomSockets(room socket.Room) []socket.SocketId {
	return a.idx.members(room)
}

// HasRoom reports whether room has a socket on this node.
func (a *LocalAdapter) HasRoom(room socket.Room) bool { return a.idx.hasRoom(room) }

// HasSocket reports whether the socket is in a room on this node (every
// connected socket is, in its own).
func (a *LocalAdapter) HasSocket(id socket.SocketId) bool { return a.idx.hasSocket(id) }

// RoomNames returns this node's rooms, the sockets' own included.
func (a *LocalAdapter) RoomNames() []socket.Room { return a.idx.roomNames() }

// SocketInRoom reports whether the socket is in room.
func (a *LocalAdapter) SocketInRoom(id socket.SocketId, room socket.Room) bool {
	return a.idx.has(id, room)
}

// Sockets returns the connected sockets in any of rooms (all: none given).
func (a *LocalAdapter) Sockets(rooms *types.Set[socket.Room]) *types.Set[socket.SocketId] {
	out := types.NewSet[socket.SocketId]()
	a.each(&socket.BroadcastOptions{Rooms: rooms}, func(s *socket.Socket) { out.Add(s.Id()) })
	return out
}

// FetchSockets returns the sockets opts selects.
func (a *LocalAdapter) FetchSockets(opts *socket.BroadcastOptions) func(func([]socket.SocketDetails, error)) {
	return func(callback func([]socket.SocketDetails, error)) {
		sockets := []socket.SocketDetails{}
		a.each(opts, func(s *socket.Socket) { sockets = append(sockets, s) })
		callback(sockets, nil)
	}
}

// AddSockets puts the sockets opts selects in rooms.
func (a *LocalAdapter) AddSockets(opts *socket.BroadcastOptions, rooms []socket.Room) {
	a.each(opts, func(s *socket.Socket) { s.Join(rooms...) })
}

// DelSockets takes the sockets opts selects out of rooms.
func (a *LocalAdapter) DelSockets(opts *socket.BroadcastOptions, rooms []socket.Room) {
	a.each(opts, func(s *socket.Socket) {
		for _, room := range rooms {
			s.Leave(room)
		}
	})
}

// DisconnectSockets disconnects the sockets opts selects.
func (a *LocalAdapter) DisconnectSockets(opts *socket.BroadcastOptions, status bool) {
	a.each(opts, func(s *socket.Socket) { s.Disconnect(status) })
}

// BroadcastWithAck sends packet, with an ack id, to the sockets opts
// selects; ack gets each answer, clientCount their number.
func (a *LocalAdapter) BroadcastWithAck(packet *parser.Packet, opts *socket.BroadcastOptions, clientCount func(uint64), ack socket.Ack) {
	nsp := a.Nsp()
	packet.Nsp = nsp.Name()
	// one id for every recipient: the namespace's counter never repeats
	packet.Id = new(nsp.Ids())
	var flags *socket.BroadcastFlags
	if opts != nil {
		flags = opts.Flags
	}
	f := EncodeFrame(nsp.Server().Encoder(), packet, flags)
	var n uint64
	a.each(opts, func(s *socket.Socket) {
		n++
		s.Acks().Store(*packet.Id, ack)
		f.WriteTo(s)
	})
	clientCount(n)
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
	a.eachOf(opts, f.WriteTo, true) // a room's members written in parts, side by side
}

// each calls fn for each connected socket of the namespace that opts
// selects, once: those in any of opts.Rooms (every socket when there are
// none), less those in any of opts.Except.
func (a *LocalAdapter) each(opts *socket.BroadcastOptions, fn func(*socket.Socket)) {
	a.eachOf(opts, fn, false)
}

// eachOf is each; with split, fn may run for several sockets at once (a
// single room's fan-out in parts: inParts), for fn that is safe for that.
func (a *LocalAdapter) eachOf(opts *socket.BroadcastOptions, fn func(*socket.Socket), split bool) {
	var rooms, except *types.Set[socket.Room]
	if opts != nil {
		rooms, except = opts.Rooms, opts.Except
	}
	var skip map[socket.SocketId]struct{}
	if except != nil && except.Len() > 0 {
		skip = map[socket.SocketId]struct{}{}
		for _, r := range except.Keys() {
			for _, id := range a.idx.members(r) {
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
		for _, id := range a.idx.socketIDs() {
			visit(id)
		}
		return
	}
	keys := rooms.Keys()
	if len(keys) == 1 { // a set's members are distinct
		ids := a.idx.members(keys[0])
		if parts := fanOutParts(len(ids)); split && parts > 1 {
			inParts(ids, parts, visit)
			return
		}
		for _, id := range ids {
			visit(id)
		}
		return
	}
	seen := map[socket.SocketId]struct{}{}
	for _, r := range keys {
		for _, id := range a.idx.members(r) {
			if _, dup := seen[id]; !dup {
				seen[id] = struct{}{}
				visit(id)
			}
		}
	}
}

// fanOutChunk is the fewest recipients a part of a broadcast's fan-out
// gets: a write to a socket costs a system call (about 10 µs on loopback
// on the test machines), so a room of 100 is 1 ms of writes one after the
// other, and the last member hears of a change that much after the first.
const fanOutChunk = 16

// fanOutParts is how many parts a broadcast to n sockets is written in:
// one per processor the runtime uses, each of at least fanOutChunk.
func fanOutParts(n int) int {
	if n < 2*fanOutChunk {
		return 1 // (without asking the runtime, which takes a global lock)
	}
	return max(1, min(runtime.GOMAXPROCS(0), n/fanOutChunk))
}

// inParts calls visit for each of ids, split into parts that run side by
// side (the first on the caller's goroutine), and returns once all are
// done. Each id is in one part: the order of what one socket is sent is
// kept.
func inParts(ids []socket.SocketId, parts int, visit func(socket.SocketId)) {
	var wg sync.WaitGroup
	size := (len(ids) + parts - 1) / parts
	for start := size; start < len(ids); start += size {
		part := ids[start:min(start+size, len(ids))]
		wg.Go(func() {
			for _, id := range part {
				visit(id)
			}
		})
	}
	for _, id := range ids[:size] {
		visit(id)
	}
	wg.Wait()
}
