package transport

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

// recordEvents collects an adapter's room events as text.
func recordEvents(a socket.Adapter) *[]string {
	var got []string
	for _, ev := range []types.EventName{"create-room", "join-room", "leave-room", "delete-room"} {
		_ = a.On(ev, func(args ...any) {
			parts := []string{string(ev)}
			for _, x := range args {
				parts = append(parts, fmt.Sprint(x))
			}
			got = append(got, strings.Join(parts, " "))
		})
	}
	return &got
}

// snapshot renders rooms and sids as sorted text.
func snapshot(rooms *types.Map[socket.Room, *types.Set[socket.SocketId]], sids *types.Map[socket.SocketId, *types.Set[socket.Room]]) string {
	var lines []string
	rooms.Range(func(r socket.Room, ids *types.Set[socket.SocketId]) bool {
		keys := ids.Keys()
		slices.Sort(keys)
		lines = append(lines, fmt.Sprintf("room %s %v", r, keys))
		return true
	})
	sids.Range(func(id socket.SocketId, rs *types.Set[socket.Room]) bool {
		keys := rs.Keys()
		slices.Sort(keys)
		lines = append(lines, fmt.Sprintf("sid %s %v", id, keys))
		return true
	})
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// The index keeps the same rooms and announces the same changes, in the
// same order, as the library's adapter, over random joins and leaves:
// sockets' own rooms, rooms named as another socket, rooms large enough
// to be indexed and emptied again.
func TestRoomIndexMatchesLibrary(t *testing.T) {
	lib := socket.MakeAdapter()
	ours := NewLocalAdapter()
	libEvents, ourEvents := recordEvents(lib), recordEvents(ours)
	r := rand.New(rand.NewPCG(1, 2))
	const nSockets = 300
	sid := func() socket.SocketId { return socket.SocketId(fmt.Sprintf("s%d", r.IntN(nSockets))) }
	room := func() socket.Room {
		switch r.IntN(4) {
		case 0:
			return socket.Room(sid()) // some socket's own room
		case 1:
			return "big"
		default:
			return socket.Room(fmt.Sprintf("r%d", r.IntN(5)))
		}
	}
	biggest := 0
	for step := range 40000 {
		biggest = max(biggest, len(ours.RoomSockets("big")))
		id := sid()
		var op string
		switch k := r.IntN(10); {
		case k < 5:
			rooms := []socket.Room{room()}
			if r.IntN(3) == 0 {
				rooms = append(rooms, socket.Room(id), room())
			}
			op = fmt.Sprintf("AddAll %s %v", id, rooms)
			lib.AddAll(id, types.NewSet(rooms...))
			ours.AddAll(id, types.NewSet(rooms...))
		case k < 9:
			rm := room()
			op = fmt.Sprintf("Del %s %s", id, rm)
			members, _ := lib.Rooms().Load(rm)
			was := members != nil && members.Has(id)
			lib.Del(id, rm)
			ours.Del(id, rm)
			if !was {
				// The library announces a leave of a room the socket
				// was not in (its set's Delete reports true either
				// way); Node's adapter does not, nor do we.
				*libEvents = slices.DeleteFunc(*libEvents, func(e string) bool { return strings.HasPrefix(e, "leave-room ") })
			}
		default:
			op = "DelAll " + string(id)
			lib.DelAll(id)
			ours.DelAll(id)
		}
		if step%397 == 0 || step > 39950 {
			if want, got := snapshot(lib.Rooms(), lib.Sids()), snapshot(ours.Rooms(), ours.Sids()); got != want {
				t.Fatalf("after step %d (%s):\n got %s\nwant %s", step, op, got, want)
			}
			for _, rm := range []socket.Room{"big", "r0", "s1", socket.Room(id)} {
				want, _ := lib.Rooms().Load(rm)
				got := slices.Clone(ours.RoomSockets(rm))
				slices.Sort(got)
				var wantKeys []socket.SocketId
				if want != nil {
					wantKeys = want.Keys()
					slices.Sort(wantKeys)
				}
				if !slices.Equal(got, wantKeys) || ours.HasRoom(rm) != (want != nil) {
					t.Fatalf("after step %d (%s): room %s has %v, want %v", step, op, rm, got, wantKeys)
				}
			}
		}
		// A set's rooms come in no set order: the events of each room,
		// in order.
		byRoom := func(a, b string) int { return strings.Compare(strings.Fields(a)[1], strings.Fields(b)[1]) }
		slices.SortStableFunc(*libEvents, byRoom)
		slices.SortStableFunc(*ourEvents, byRoom)
		if !slices.Equal(*libEvents, *ourEvents) {
			t.Fatalf("after step %d (%s): events\n got %v\nwant %v", step, op, *ourEvents, *libEvents)
		}
		*libEvents, *ourEvents = nil, nil
	}
	if biggest <= indexedRoom {
		t.Fatalf("the big room had at most %d members: never indexed", biggest)
	}
}

// A broadcast's list of a room is shared until the room changes, and a
// change does not touch a list handed out before it; the room is indexed
// past indexedRoom members and no longer once it shrinks.
func TestRoomIndexSharedList(t *testing.T) {
	a := NewLocalAdapter()
	const n = 2*indexedRoom + 8
	for i := range n {
		a.AddAll(socket.SocketId(fmt.Sprint("s", i)), types.NewSet[socket.Room]("conv"))
	}
	first := a.RoomSockets("conv")
	if len(first) != n || &a.RoomSockets("conv")[0] != &first[0] {
		t.Fatalf("list of %d, or not shared", len(first))
	}
	before := slices.Clone(first)
	last := socket.SocketId(fmt.Sprint("s", n-1))
	a.Del("s0", "conv")
	a.Del(last, "conv")
	if !slices.Equal(first, before) {
		t.Fatal("a change rewrote a list handed out before it")
	}
	after := a.RoomSockets("conv")
	if len(after) != n-2 || slices.Contains(after, "s0") || slices.Contains(after, last) {
		t.Fatalf("after two leaves: %v", after)
	}
	if !a.SocketInRoom("s5", "conv") || a.SocketInRoom("s0", "conv") {
		t.Fatal("SocketInRoom disagrees with the leaves")
	}
	if a.idx.rooms["conv"].at == nil {
		t.Fatal("a room past indexedRoom members is not indexed")
	}
	for i := 1; i < n-1; i++ {
		id := socket.SocketId(fmt.Sprint("s", i))
		if !a.SocketInRoom(id, "conv") || len(a.RoomSockets("conv")) != n-1-i {
			t.Fatalf("before the leave of %s: %d members", id, len(a.RoomSockets("conv")))
		}
		a.Del(id, "conv")
		if r := a.idx.rooms["conv"]; r != nil && len(r.ids) < indexedRoom/2 && r.at != nil {
			t.Fatalf("indexed at %d members", len(r.ids))
		}
	}
	if a.HasRoom("conv") || a.RoomSockets("conv") != nil {
		t.Fatal("an emptied room is still there")
	}
}

// With nothing listening, a join announces nothing and allocates only the
// socket's place in the index.
func TestRoomIndexQuietWithoutListeners(t *testing.T) {
	a := NewLocalAdapter()
	rooms := types.NewSet[socket.Room]("conv")
	a.AddAll("warm", rooms)
	allocs := testing.AllocsPerRun(100, func() {
		a.AddAll("s1", rooms)
		a.Del("s1", "conv")
	})
	// the socket's list of rooms (kept after its last leave) is made once;
	// rooms.Keys() copies the set
	if allocs > 2 {
		t.Fatalf("%.1f allocations per join and leave", allocs)
	}
}

// inParts visits every id once, whatever the split, and a broadcast is
// split only past fanOutChunk recipients a part.
func TestInParts(t *testing.T) {
	for _, n := range []int{1, 2, 31, 64, 65, 100, 257} {
		ids := make([]socket.SocketId, n)
		for i := range ids {
			ids[i] = socket.SocketId(fmt.Sprint("s", i))
		}
		for parts := 1; parts <= 5; parts++ {
			var mu sync.Mutex
			seen := map[socket.SocketId]int{}
			inParts(ids, parts, func(id socket.SocketId) {
				mu.Lock()
				seen[id]++
				mu.Unlock()
			})
			for _, id := range ids {
				if seen[id] != 1 {
					t.Fatalf("%d ids in %d parts: %s visited %d times", n, parts, id, seen[id])
				}
			}
		}
	}
	if p := fanOutParts(fanOutChunk*2 - 1); p > 1 {
		t.Fatalf("%d recipients in %d parts", fanOutChunk*2-1, p)
	}
}
