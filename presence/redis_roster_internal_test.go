package presence

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
)

// A roster takes its members' statuses from the records read in its own
// round trip (queueStatuses) when they cover every member, and reads them
// again when a member is missing (a join between the two scripts).
func TestRosterFromQueuedStatuses(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb, "roster")
	ctx := context.Background()
	e := NewRedisEngine(rdb, Config{NodeID: "n1"}, RedisConfig{Prefix: prefix})
	// In Redis: a and b online.
	if err := rdb.HSet(ctx, e.kUsers, "a", "1|0|on|0|0", "b", "1|0|on|0|0").Err(); err != nil {
		t.Fatal(err)
	}
	queued := func(pairs ...string) *redis.Cmd {
		var users, recs []any
		for i := 0; i < len(pairs); i += 2 {
			users = append(users, pairs[i])
			recs = append(recs, pairs[i+1])
		}
		c := redis.NewCmd(ctx)
		c.SetVal([]any{users, recs})
		return c
	}
	statuses := func(res JoinResult) map[string]Status {
		out := map[string]Status{}
		for _, m := range res.Online {
			out[m.UserID] = m.Status
		}
		return out
	}
	members := map[string]string{"a": "1|1|0|0|s1", "b": "1|2|0|0|s2"}
	const now = 9

	// Both members covered: the queued records are used (b away there).
	res, err := e.rosterFrom(ctx, queued("a", "1|0|on|0|0", "b", "1|0|away|0|0"), members, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(res); got["a"] != Online || got["b"] != Away {
		t.Errorf("statuses %v, want a online and b away (the queued records)", got)
	}
	if res.Online[0].UserID != "a" || res.Online[1].Since.UnixMilli() != 2 {
		t.Errorf("roster %+v, want a then b, b since 2 ms", res.Online)
	}
	// b missing from the queued read: both are read again (online in Redis).
	res, err = e.rosterFrom(ctx, queued("a", "1|0|away|0|0"), members, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(res); got["a"] != Online || got["b"] != Online {
		t.Errorf("statuses %v, want both online (read again)", got)
	}
	// As many members, but not the same (b left and c joined between the
	// two reads): read again.
	res, err = e.rosterFrom(ctx, queued("a", "1|0|away|0|0", "c", "1|0|away|0|0"), members, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(res); len(got) != 2 || got["a"] != Online || got["b"] != Online {
		t.Errorf("statuses %v, want a and b online (read again)", got)
	}
	// A failed queued read: read again too.
	failed := redis.NewCmd(ctx)
	failed.SetErr(redis.ErrClosed)
	res, err = e.rosterFrom(ctx, failed, members, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(res); got["a"] != Online || got["b"] != Online {
		t.Errorf("statuses %v, want both online (read again)", got)
	}
}

// A roster's members and their join times come from the member records
// (HGETALL m): those of this release, those of releases before 2026-12-02
// (no socket list), and a record that cannot be read, which counts as a
// member since now.
func TestMembersOf(t *testing.T) {
	users, since := membersOf(map[string]string{
		"a": "1|1000|0|0|s1",
		"b": "2|2000|0|0|s2,s3",
		"c": "1|3000|0|0", // legacy
		"d": "garbled",
		"e": "1|x|0|0|s4",
		"f": "1||0|0|s5",
		"g": ShortMember(4000, "s6"),
		"h": ShortMember(1796160547136, "s7,s8"),
		"i": "AAA!AAAs9", // not of the alphabet
		"j": "AAAAAAA",   // no socket
	}, 9000)
	got := map[string]string{}
	for i, u := range users {
		got[u] = since[i]
	}
	want := map[string]string{"a": "1000", "b": "2000", "c": "3000", "d": "9000", "e": "9000", "f": "9000",
		"g": "4000", "h": "1796160547136", "i": "9000", "j": "9000"}
	if len(users) != len(since) || len(got) != len(want) {
		t.Fatalf("members %v since %v", users, since)
	}
	for u, w := range want {
		if got[u] != w {
			t.Errorf("%s: since %q, want %q", u, got[u], w)
		}
	}
	if users, since := membersOf(nil, 1); len(users) != 0 || len(since) != 0 {
		t.Errorf("no records: %v %v", users, since)
	}
	res := rosterWith([]string{"b", "a"}, []string{"2000", "1000"}, nil, nil)
	if !slices.EqualFunc(res.Online, []string{"a", "b"}, func(m Member, u string) bool { return m.UserID == u && m.Status == Online }) {
		t.Errorf("roster without statuses: %+v, want a then b, both online", res.Online)
	}
}

// parseMember reads what the scripts and ShortMember write, and anything
// else without a panic: a short record gives back its time and sockets,
// and a full one its time and its fifth field.
func FuzzParseMember(f *testing.F) {
	for _, s := range []string{"1|1000|0|0|s1", "0|1000|2000|1500|", "1|3000|0|0", ShortMember(4000, "s6"),
		ShortMember(1796160547136, "s7,s8"), "AAA!AAAs9", "AAAAAAA", "", "|", "1|99999999999999999999|0|0|x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rec string) {
		since, socks, legacy, ok := parseMember(rec)
		if !ok {
			if since != 0 || socks != "" || legacy {
				t.Fatalf("parseMember(%q) unreadable but gave %d %q %v", rec, since, socks, legacy)
			}
			return
		}
		if since < 0 {
			t.Fatalf("parseMember(%q): since %d", rec, since)
		}
		if !strings.Contains(rec, "|") {
			if back := ShortMember(since, socks); back != rec {
				t.Fatalf("parseMember(%q) = %d %q; written back %q", rec, since, socks, back)
			}
			return
		}
		f := strings.SplitN(rec, "|", 5)
		if n, err := strconv.ParseInt(f[1], 10, 64); err != nil || n != since || strings.Trim(f[1], "0123456789") != "" {
			t.Fatalf("parseMember(%q): since %d", rec, since)
		}
		if legacy != (len(f) == 4) || (!legacy && socks != f[4]) {
			t.Fatalf("parseMember(%q) = %q legacy %v", rec, socks, legacy)
		}
	})
}
