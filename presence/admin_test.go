package presence_test

import (
	"context"
	"slices"
	"testing"

	"github.com/presenced/presenced/presence"
)

// adminEngines returns two nodes' engines over one backend, which are
// also AdminViews.
type adminEngines func(t *testing.T) (n1, n2 presence.Engine)

func TestAdminViewMemory(t *testing.T) {
	testAdminView(t, func(t *testing.T) (presence.Engine, presence.Engine) {
		m := presence.NewMemory()
		return presence.NewMemoryEngine(m, presence.Config{NodeID: "n1"}), presence.NewMemoryEngine(m, presence.Config{NodeID: "n2"})
	})
}

func TestAdminViewRedis(t *testing.T) {
	testAdminView(t, func(t *testing.T) (presence.Engine, presence.Engine) {
		rdb := testRedis(t)
		p := uniquePrefix(t, rdb)
		return presence.NewRedisEngine(rdb, presence.Config{NodeID: "n1"}, presence.RedisConfig{Prefix: p}),
			presence.NewRedisEngine(rdb, presence.Config{NodeID: "n2"}, presence.RedisConfig{Prefix: p})
	})
}

func testAdminView(t *testing.T, engines adminEngines) {
	ctx := context.Background()
	e1, e2 := engines(t)
	for _, e := range []presence.Engine{e1, e2} {
		if err := e.Tick(ctx); err != nil { // leases
			t.Fatal(err)
		}
	}
	connect := func(e presence.Engine, sid, user string, convs ...string) {
		t.Helper()
		if err := e.Connect(ctx, presence.Socket{ID: sid, UserID: user}); err != nil {
			t.Fatal(err)
		}
		for _, c := range convs {
			if _, err := e.Join(ctx, sid, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	connect(e1, "s1", "alice", "big", "a*b", "mid")
	connect(e2, "s2", "alice", "big")
	connect(e2, "s3", "bob", "big", "mid")
	connect(e1, "s4", "carol", "big", "ab")
	v := e1.(presence.AdminView)

	total, page, err := v.ConversationCounts(ctx, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []presence.ConversationCount{{ID: "big", Online: 3}, {ID: "mid", Online: 2}, {ID: "a*b", Online: 1}, {ID: "ab", Online: 1}}
	if total != 4 || !slices.Equal(page, want) {
		t.Fatalf("all: %d %v, want 4 %v", total, page, want)
	}
	total, page, err = v.ConversationCounts(ctx, "", 1, 2)
	if err != nil || total != 4 || !slices.Equal(page, want[1:3]) {
		t.Fatalf("page 2 of 2: %d %v %v", total, page, err)
	}
	// a prefix with a glob character matches itself only
	total, page, err = v.ConversationCounts(ctx, "a*", 0, 10)
	if err != nil || total != 1 || len(page) != 1 || page[0].ID != "a*b" {
		t.Fatalf("prefix a*: %d %v %v", total, page, err)
	}
	if total, page, _ = v.ConversationCounts(ctx, "zz", 0, 10); total != 0 || len(page) != 0 {
		t.Fatalf("prefix zz: %d %v", total, page)
	}
	if total, page, _ = v.ConversationCounts(ctx, "", 10, 10); total != 4 || len(page) != 0 {
		t.Fatalf("past the end: %d %v", total, page)
	}

	socks, err := v.UserSockets(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) != 2 || socks[0].ID != "s1" || socks[0].Node != "n1" || !slices.Equal(socks[0].Conversations, []string{"a*b", "big", "mid"}) ||
		socks[1].ID != "s2" || socks[1].Node != "n2" || !slices.Equal(socks[1].Conversations, []string{"big"}) {
		t.Fatalf("alice's sockets %+v", socks)
	}
	if socks, err := v.UserSockets(ctx, "nobody"); err != nil || len(socks) != 0 {
		t.Fatalf("nobody's sockets %v %v", socks, err)
	}

	leases, err := v.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := leases["n1"]; !ok {
		t.Fatalf("leases %v", leases)
	}
	if _, ok := leases["n2"]; !ok {
		t.Fatalf("leases %v", leases)
	}

	if err := e2.TypingStart(ctx, "s3", "mid"); err != nil {
		t.Fatal(err)
	}
	pv, err := v.Previews(ctx, []string{"big", "mid", "none"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(pv) != 3 || len(pv[0].Members) != 2 || len(pv[0].Typing) != 0 ||
		!slices.Equal(pv[1].Members, []string{"alice", "bob"}) || !slices.Equal(pv[1].Typing, []string{"bob"}) ||
		len(pv[2].Members) != 0 || pv[2].Typing == nil {
		t.Fatalf("previews %+v", pv)
	}

	// a left conversation is no longer listed
	if err := e1.Leave(ctx, "s4", "ab"); err != nil {
		t.Fatal(err)
	}
	if total, _, _ = v.ConversationCounts(ctx, "ab", 0, 10); total != 0 {
		t.Fatalf("after leaving: %d", total)
	}
}
