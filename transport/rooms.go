package transport

import (
	"slices"
	"sync"

	"github.com/zishang520/socket.io/servers/socket/v3"
)

// roomIndex is a namespace's room membership on this node: which sockets
// are in which rooms. It takes the place of the library adapter's maps,
// which keep a concurrent map of concurrent sets per room and per socket
// (about 1.6 KB for a socket in no room but its own): here one lock
// guards plain maps, a socket's rooms are a short list, and a socket's own
// room (its id, which every socket joins at connect) is kept only in that
// list.
//
// A room's members are a list, with an index beside it once the room is
// large; a broadcast takes a copy of the list made at the first broadcast
// after a change and shared until the next change.
type roomIndex struct {
	mu    sync.RWMutex
	rooms map[socket.Room]*roomEntry        // the rooms but the sockets' own
	sids  map[socket.SocketId][]socket.Room // each socket's rooms, its own included
}

// indexedRoom is the size from which a room's members are indexed: below
// it a scan of the list costs a join or a leave well under a microsecond,
// and an index would double the room's memory.
const indexedRoom = 128

type roomEntry struct {
	ids  []socket.SocketId
	at   map[socket.SocketId]int32 // the position of each of ids; nil below indexedRoom
	list []socket.SocketId         // a copy of ids for broadcasts, never changed; nil after a change
}

func (r *roomEntry) pos(id socket.SocketId) int {
	if r.at != nil {
		if i, ok := r.at[id]; ok {
			return int(i)
		}
		return -1
	}
	return slices.Index(r.ids, id)
}

func (r *roomEntry) add(id socket.SocketId) bool {
	if r.pos(id) >= 0 {
		return false
	}
	r.ids = append(r.ids, id)
	if r.at != nil {
		r.at[id] = int32(len(r.ids) - 1)
	} else if len(r.ids) > indexedRoom {
		r.at = make(map[socket.SocketId]int32, len(r.ids))
		for i, id := range r.ids {
			r.at[id] = int32(i)
		}
	}
	r.list = nil
	return true
}

func (r *roomEntry) remove(id socket.SocketId) bool {
	i := r.pos(id)
	if i < 0 {
		return false
	}
	last := len(r.ids) - 1
	moved := r.ids[last]
	r.ids[i] = moved
	r.ids[last] = ""
	r.ids = r.ids[:last]
	if r.at != nil {
		delete(r.at, id)
		if i < last {
			r.at[moved] = int32(i)
		}
		if len(r.ids) < indexedRoom/2 {
			r.at = nil
		}
	}
	r.list = nil
	return true
}

// roomEvent is a change the library's adapters announce on their emitter
// ("create-room", "join-room", "leave-room", "delete-room"), announced
// once the index is unlocked.
type roomEvent struct {
	name string
	room socket.Room
	id   socket.SocketId // join-room and leave-room
}

func (x *roomIndex) init() {
	x.rooms = map[socket.Room]*roomEntry{}
	x.sids = map[socket.SocketId][]socket.Room{}
}

// add puts id in rooms; events (nil: none wanted) receives the changes.
func (x *roomIndex) add(id socket.SocketId, rooms []socket.Room, events *[]roomEvent) {
	x.mu.Lock()
	defer x.mu.Unlock()
	mine, known := x.sids[id]
	if !known {
		mine = make([]socket.Room, 0, 1)
	}
	for _, room := range rooms {
		if slices.Contains(mine, room) {
			continue
		}
		mine = append(mine, room)
		if room == socket.Room(id) {
			// its own room: members nowhere else (see members)
			if _, shared := x.rooms[room]; !shared {
				note(events, roomEvent{"create-room", room, ""})
			}
			note(events, roomEvent{"join-room", room, id})
			continue
		}
		r := x.rooms[room]
		if r == nil {
			r = &roomEntry{}
			x.rooms[room] = r
			if !x.ownRoom(room) {
				note(events, roomEvent{"create-room", room, ""})
			}
		}
		if r.add(id) {
			note(events, roomEvent{"join-room", room, id})
		}
	}
	x.sids[id] = mine
}

// remove takes id out of room, or out of all its rooms when all is set.
func (x *roomIndex) remove(id socket.SocketId, room socket.Room, all bool, events *[]roomEvent) {
	x.mu.Lock()
	defer x.mu.Unlock()
	mine, known := x.sids[id]
	if !known {
		return
	}
	leave := func(room socket.Room) {
		if room == socket.Room(id) {
			note(events, roomEvent{"leave-room", room, id})
			if _, shared := x.rooms[room]; !shared {
				note(events, roomEvent{"delete-room", room, ""})
			}
			return
		}
		r := x.rooms[room]
		if r == nil || !r.remove(id) {
			return
		}
		note(events, roomEvent{"leave-room", room, id})
		if len(r.ids) == 0 {
			delete(x.rooms, room)
			if !x.ownRoom(room) {
				note(events, roomEvent{"delete-room", room, ""})
			}
		}
	}
	if all {
		delete(x.sids, id) // first: its own room is then no one's
		for _, r := range mine {
			leave(r)
		}
		return
	}
	i := slices.Index(mine, room)
	if i < 0 {
		return
	}
	mine = slices.Delete(mine, i, i+1)
	x.sids[id] = mine // before leave: its own room is then no longer joined
	leave(room)
}

// ownRoom reports whether room is the own room of a socket that has
// joined it. Called with mu held.
func (x *roomIndex) ownRoom(room socket.Room) bool {
	mine, ok := x.sids[socket.SocketId(room)]
	return ok && slices.Contains(mine, room)
}

func note(events *[]roomEvent, e roomEvent) {
	if events != nil {
		*events = append(*events, e)
	}
}

// members returns room's sockets: a list shared with other callers, to be
// read only.
func (x *roomIndex) members(room socket.Room) []socket.SocketId {
	x.mu.RLock()
	r := x.rooms[room]
	own := x.ownRoom(room)
	var list []socket.SocketId
	if r != nil {
		list = r.list
	}
	x.mu.RUnlock()
	switch {
	case r == nil && own:
		return []socket.SocketId{socket.SocketId(room)}
	case r == nil:
		return nil
	case list != nil && !own:
		return list
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	r = x.rooms[room]
	if r == nil { // emptied meanwhile
		if x.ownRoom(room) {
			return []socket.SocketId{socket.SocketId(room)}
		}
		return nil
	}
	if r.list == nil {
		r.list = slices.Clip(slices.Clone(r.ids))
	}
	if id := socket.SocketId(room); x.ownRoom(room) && r.pos(id) < 0 {
		// a room named as a socket, joined by others too: not kept
		return append(slices.Clone(r.list), id)
	}
	return r.list
}

// has reports whether id is in room.
func (x *roomIndex) has(id socket.SocketId, room socket.Room) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Contains(x.sids[id], room)
}

// socketRooms returns a copy of id's rooms (nil: no such socket).
func (x *roomIndex) socketRooms(id socket.SocketId) []socket.Room {
	x.mu.RLock()
	defer x.mu.RUnlock()
	mine, ok := x.sids[id]
	if !ok {
		return nil
	}
	return slices.Clone(mine)
}

// hasSocket reports whether id is in any room (its own included).
func (x *roomIndex) hasSocket(id socket.SocketId) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.sids[id]
	return ok
}

// hasRoom reports whether room has a member.
func (x *roomIndex) hasRoom(room socket.Room) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.rooms[room]
	return ok || x.ownRoom(room)
}

// roomNames returns every room with a member, the sockets' own included.
func (x *roomIndex) roomNames() []socket.Room {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]socket.Room, 0, len(x.rooms)+len(x.sids))
	for room := range x.rooms {
		out = append(out, room)
	}
	for id, mine := range x.sids {
		if _, shared := x.rooms[socket.Room(id)]; !shared && slices.Contains(mine, socket.Room(id)) {
			out = append(out, socket.Room(id))
		}
	}
	return out
}

// socketIDs returns every socket in a room (its own included).
func (x *roomIndex) socketIDs() []socket.SocketId {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]socket.SocketId, 0, len(x.sids))
	for id := range x.sids {
		out = append(out, id)
	}
	return out
}

// roomReader is what LocalAdapter, and the adapters embedding it, answer
// without copying the library's sets.
type roomReader interface {
	RoomSockets(socket.Room) []socket.SocketId
	SocketInRoom(socket.SocketId, socket.Room) bool
}

// RoomSockets returns the sockets in room on this node (read only), from
// any adapter: a LocalAdapter's list as it is, another's set copied.
func RoomSockets(a socket.Adapter, room socket.Room) []socket.SocketId {
	if r, ok := a.(roomReader); ok {
		return r.RoomSockets(room)
	}
	if set, ok := a.Rooms().Load(room); ok {
		return set.Keys()
	}
	return nil
}

// RoomNames returns the names of this node's rooms, from any adapter.
func RoomNames(a socket.Adapter) []socket.Room {
	if r, ok := a.(interface{ RoomNames() []socket.Room }); ok {
		return r.RoomNames()
	}
	return a.Rooms().Keys()
}

// InRoom reports whether s is in room, without the copy of its rooms that
// s.Rooms() makes with a LocalAdapter.
func InRoom(s *socket.Socket, room socket.Room) bool {
	if r, ok := s.Nsp().Adapter().(roomReader); ok {
		return r.SocketInRoom(s.Id(), room)
	}
	return s.Rooms().Has(room)
}
