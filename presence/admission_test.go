package presence_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/fakeclock"
	"github.com/presenced/presenced/presence"
)

func nopSink(context.Context, []presence.Event) {}

// admissionSuite checks one backend's cap on a user's sockets; n1 and n2
// are two nodes' engines on the same backend, adm its Admission.
func admissionSuite(t *testing.T, n1, n2 presence.Engine, adm presence.Admission, clk *fakeclock.Clock) {
	ctx := context.Background()
	const max = 3
	admit := func(user, sid string) bool {
		t.Helper()
		ok, err := adm.Admit(ctx, user, sid, max)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	connect := func(e presence.Engine, user, sid string) {
		t.Helper()
		if !admit(user, sid) {
			t.Fatalf("%s refused", sid)
		}
		// Connect ends the reservation (a disconnect below finds whether
		// it did: a place still reserved is not freed).
		if err := e.Connect(ctx, presence.Socket{ID: sid, UserID: user, Reserved: true}); err != nil {
			t.Fatal(err)
		}
	}

	// Connected sockets on both nodes count, cluster-wide.
	connect(n1, "u", "a1")
	connect(n2, "u", "a2")
	if !admit("u", "a3") {
		t.Fatal("third socket refused")
	}
	if admit("u", "a4") {
		t.Fatal("a fourth socket admitted with two connected and one reserved (max 3)")
	}
	if !admit("u", "a3") || !admit("u", "a1") {
		t.Error("admitting a reserved or connected socket again is idempotent")
	}
	if !admit("v", "b1") {
		t.Error("another user is not limited by u")
	}
	// A socket connected without ending its reservation (Reserved unset)
	// is both connected and reserved until Release: counted once.
	if err := n1.Connect(ctx, presence.Socket{ID: "a3", UserID: "u"}); err != nil {
		t.Fatal(err)
	}
	if admit("u", "a4") {
		t.Error("a4 admitted with 3 sockets")
	}
	if err := adm.Release(ctx, "u", "a3"); err != nil {
		t.Fatal(err)
	}
	// A disconnect frees a place at once (a flap grace or not).
	if err := n2.Disconnect(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if !admit("u", "a4") {
		t.Fatal("a4 refused after a2 disconnected")
	}
	if admit("u", "a5") {
		t.Fatal("a5 admitted: a4's reservation not counted")
	}
	// A reservation whose socket never connects lapses.
	clk.Advance(presence.ReservationTTL + time.Second)
	if !admit("u", "a5") {
		t.Fatal("a5 refused after a4's reservation lapsed")
	}
	// Released reservations free their place.
	if err := adm.Release(ctx, "u", "a5"); err != nil {
		t.Fatal(err)
	}
	if err := adm.Release(ctx, "u", "a5"); err != nil {
		t.Fatal("Release is idempotent:", err)
	}

	// A Connect with Reserved of a socket already counted (connected
	// before without it) still ends the reservation: after the socket
	// disconnects, all max places are free.
	if !admit("x", "x1") {
		t.Fatal("x1 refused")
	}
	for _, reserved := range []bool{false, true} {
		if err := n1.Connect(ctx, presence.Socket{ID: "x1", UserID: "x", Reserved: reserved}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.Disconnect(ctx, "x1"); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= max+1; i++ {
		if !admit("x", fmt.Sprint("x", i)) {
			t.Fatalf("x%d refused: x1's reservation outlived its second Connect", i)
		}
	}

	// Concurrent handshakes of one user: exactly max admitted.
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := adm.Admit(ctx, "w", fmt.Sprint("w", i), max)
			if err != nil {
				t.Error(err)
			}
			if ok {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != max {
		t.Errorf("%d of 40 concurrent handshakes admitted, want %d", got, max)
	}
}

func TestMemoryAdmission(t *testing.T) {
	clk := fakeclock.New(time.Now())
	m := presence.NewMemory()
	cfg := func(node string) presence.Config {
		return presence.Config{NodeID: node, Now: clk.Now, Sink: nopSink}
	}
	admissionSuite(t, presence.NewMemoryEngine(m, cfg("n1")), presence.NewMemoryEngine(m, cfg("n2")), presence.NewMemoryAdmission(m, clk.Now), clk)
}

func TestRedisAdmission(t *testing.T) {
	rdb := testRedis(t)
	prefix := uniquePrefix(t, rdb)
	clk := fakeclock.New(time.Now())
	cfg := func(node string) presence.Config {
		return presence.Config{NodeID: node, Now: clk.Now, Sink: nopSink}
	}
	n1 := presence.NewRedisEngine(rdb, cfg("n1"), presence.RedisConfig{Prefix: prefix})
	n2 := presence.NewRedisEngine(rdb, cfg("n2"), presence.RedisConfig{Prefix: prefix})
	admissionSuite(t, n1, n2, n2, clk)
}
