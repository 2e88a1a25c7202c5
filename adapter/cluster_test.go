package adapter_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/presenced/presenced/adapter"
	"github.com/presenced/presenced/internal/redistest"
)

// TestRedisCluster runs the Go-to-Go suite over a Redis Cluster: sharded
// mode (shard channels routed to the node owning their slot) and classic.
func TestRedisCluster(t *testing.T) {
	cc := redistest.Cluster(t)
	// The rooms of the suite live on different nodes.
	masters := map[string]bool{}
	for _, room := range []string{"r1", "r2", "user:a", "user:b", "user:c", "user:d"} {
		node, err := cc.MasterForKey(context.Background(), "x#/#"+room+"#")
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	t.Logf("room channels spread over %d masters", len(masters))
	inModes(t, func(t *testing.T, sharded bool) { testGoGo(t, cc, sharded) })
}

// A Redis Cluster master that dies takes only its own subscriptions with
// it (sharded mode: shard channels live on their slot's master): a room
// whose channel is on a master still up keeps crossing nodes while the
// replica takes over. Until 2026-12-07 the death closed every connection,
// and those rooms lost their events until the failover was done (a second
// failover audit).
func TestClusterMasterLostKeepsOtherShards(t *testing.T) {
	procs := redistest.ClusterWithReplicas(t)
	cc1, cc2 := clusterClient(t, procs), clusterClient(t, procs)
	prefix := uniquePrefix(t)
	master := masterOf(t, cc1)
	// the nodes' main channel on one master, the room's on another
	victim := master(prefix + "#/#")
	room := ""
	for i := 0; room == ""; i++ {
		if r := fmt.Sprintf("r%d", i); master(prefix+"#/#"+r+"#") != victim {
			room = r
		}
	}
	// a room whose channel is on the victim, published to as well: its
	// failures open that master's breaker, not the other rooms' (until
	// 2026-12-07 one breaker served every master, and the room on a master
	// still up lost its events in each pause)
	onVictim := ""
	for i := 0; onVictim == ""; i++ {
		if r := fmt.Sprintf("v%d", i); master(prefix+"#/#"+r+"#") == victim {
			onVictim = r
		}
	}
	cfg := adapter.Config{Prefix: prefix, Sharded: true, PublishTimeout: 300 * time.Millisecond, RequestsTimeout: time.Second}
	n1 := startGoNode(t, "n1", cc1, cfg)
	n2 := startGoNode(t, "n2", cc2, cfg)
	waitCluster(t, n1, n2)
	c1 := dialClient(t, n1.url, "c1", clientOpts{auth: auth("a", room, onVictim)})
	c2 := dialClient(t, n2.url, "c2", clientOpts{auth: auth("b", room, onVictim)})
	waitMembers(t, n1, map[string][]*wsClient{room: {c1}, onVictim: {c1}})
	waitMembers(t, n2, map[string][]*wsClient{room: {c2}, onVictim: {c2}})
	waitRooms(t, n1, n2)
	a1 := n1.adapter()
	eventually(t, 5*time.Second, "n1 subscribed to both rooms", func() bool {
		return a1.Subscribed(socket.Room(room)) && a1.Subscribed(socket.Room(onVictim))
	})
	n1.io.To(socket.Room(room)).Emit("before")
	c2.expect("before")

	procs[victim].Kill()
	// while the replica takes over (cluster-node-timeout 1 s and an
	// election), the room's events still cross nodes
	// (and a broadcast to the room is not refused as unreachable: until
	// 2026-12-07 one open breaker anywhere refused every room's
	// `state:set`, ReachableRoom's caller; the victim's room is)
	lost, refused, victimRefused := 0, 0, false
	for i := range 20 {
		ev := fmt.Sprintf("during%d", i)
		n1.io.To(socket.Room(onVictim)).Emit("victim-" + ev)
		n1.io.To(socket.Room(room)).Emit(ev)
		if _, ok := c2.wait(ev, 100*time.Millisecond); !ok {
			lost++
		}
		if err := a1.ReachableRoom(socket.Room(room)); err != nil {
			refused++
		}
		if errors.Is(a1.ReachableRoom(socket.Room(onVictim)), adapter.ErrRedisUnavailable) {
			victimRefused = true
		}
	}
	if lost > 0 {
		t.Errorf("%d of 20 events lost in the 2 s after the death of a master that holds none of the room's keys", lost)
	}
	if refused > 0 {
		t.Errorf("ReachableRoom of a room on a master still up failed %d of 20 times while another master was down", refused)
	}
	if !victimRefused {
		t.Error("ReachableRoom of the room on the dead master never failed")
	}

	// The dead master's room crosses nodes again soon after its replica
	// took over: the nodes subscribe there again within a retry pause once
	// the cluster's slot map shows the new master (the pause was up to 2 s
	// until 2026-12-07: 1.2-1.7 s after the takeover here, and a failover
	// audit lost an event sent 0.8 s before a node's subscription came
	// back; 500 ms now: 0.5-1.0 s, 1.2 s once under the load of the other
	// packages' tests). The bound only catches a node that never comes back.
	promoted := waitPromotion(t, procs, victim)
	for i := 0; ; i++ {
		ev := fmt.Sprintf("after%d", i)
		n1.io.To(socket.Room(onVictim)).Emit(ev)
		if _, ok := c2.wait(ev, 50*time.Millisecond); ok {
			back := time.Since(promoted)
			t.Logf("the dead master's room crossed nodes again %v after its replica took over", back)
			if back > 2500*time.Millisecond {
				t.Errorf("the dead master's room crossed nodes again %v after its replica took over, want within 2.5 s", back)
			}
			return
		}
		if time.Since(promoted) > 10*time.Second {
			t.Fatal("the dead master's room did not cross nodes again within 10 s of its replica's takeover")
		}
	}
}

// waitPromotion waits until three of procs other than dead are masters
// (dead's replica took over) and returns when it saw it.
func waitPromotion(t *testing.T, procs map[string]*redistest.Proc, dead string) time.Time {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		masters := 0
		for addr, p := range procs {
			if addr == dead {
				continue
			}
			c := p.Client()
			info, err := c.Info(context.Background(), "replication").Result()
			c.Close()
			if err == nil && strings.Contains(info, "role:master") {
				masters++
			}
		}
		if masters == 3 {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no replica took over from the dead master within 15 s")
	return time.Time{}
}

// On a Redis Cluster in sharded mode, a room whose channel's master is
// dead (no replica) is refused by ReachableRoom even when this node's
// subscription there was never confirmed (its first member here joined
// after the death): before, it was neither subscribed nor lost, and
// Reachable's answer (the main channels, on live masters here) accepted
// it, so that a `state:set` was acked and never reached the other nodes (a
// review, 2026-12-07). A room joined at the same time on a live master is
// accepted.
func TestReachableRoomOfRoomsJoinedAfterAMastersDeath(t *testing.T) {
	procs := redistest.ClusterPartial(t)
	cc := clusterClient(t, procs)
	prefix := uniquePrefix(t)
	n := startGoNode(t, "n1", cc, adapter.Config{Prefix: prefix, Sharded: true, PublishTimeout: 300 * time.Millisecond, RequestsTimeout: time.Second})
	a := n.adapter()
	eventually(t, 5*time.Second, "main channels subscribed", func() bool { return a.Subscribed("") })
	master := masterOf(t, cc)
	// a master that holds neither of the node's own channels
	used := map[string]bool{master(prefix + "#/#"): true, master(prefix + "#/#" + a.UID() + "#"): true}
	victim := ""
	for addr := range procs {
		if !used[addr] {
			victim = addr
		}
	}
	onVictim, healthy := "", ""
	for i := 0; onVictim == "" || healthy == ""; i++ {
		r := fmt.Sprintf("room%d", i)
		if master(prefix+"#/#"+r+"#") == victim {
			onVictim = cmp.Or(onVictim, r)
		} else {
			healthy = cmp.Or(healthy, r)
		}
	}
	procs[victim].Kill()
	time.Sleep(1500 * time.Millisecond) // gone for good
	sid := socket.SocketId("s1")
	a.AddAll(sid, types.NewSet(socket.Room(onVictim), socket.Room(healthy)))
	accepted := 0
	check := func(n int) { // n checks of the room on the dead master, 10 ms apart
		for range n {
			if a.ReachableRoom(socket.Room(onVictim)) == nil {
				accepted++
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// (the first attempt to subscribe there finds the master dead: until
	// then nothing here tells, a window of a round trip, or of the retry
	// pause, 500 ms at most)
	eventually(t, 5*time.Second, "the room on the dead master refused", func() bool { return a.ReachableRoom(socket.Room(onVictim)) != nil })
	check(20)
	eventually(t, 5*time.Second, "subscribed to the room on a live master", func() bool { return a.Subscribed(socket.Room(healthy)) })
	refused := 0
	for range 20 {
		check(1)
		if a.ReachableRoom(socket.Room(healthy)) != nil {
			refused++
		}
	}
	// left and joined again: the subscription is made anew (a second
	// review found 60 of 100 such checks accepted)
	for range 5 {
		a.Del(sid, socket.Room(onVictim))
		a.AddAll(sid, types.NewSet(socket.Room(onVictim)))
		check(20)
	}
	if accepted > 0 {
		t.Errorf("ReachableRoom accepted %d of 160 checks of a room whose channel's master is dead", accepted)
	}
	if refused > 0 {
		t.Errorf("ReachableRoom refused %d of 20 checks of a room on a live master", refused)
	}
}

// clusterClient returns a client of the cluster of procs that reloads its
// slot map every second.
func clusterClient(t *testing.T, procs map[string]*redistest.Proc) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for a := range procs {
		addrs = append(addrs, a)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, ClusterStateReloadInterval: time.Second})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// masterOf returns the address of the master of a key's slot, by cc.
func masterOf(t *testing.T, cc *redis.ClusterClient) func(key string) string {
	return func(key string) string {
		node, err := cc.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return node.Options().Addr
	}
}
