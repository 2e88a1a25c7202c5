package presence

import (
	"context"
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
	members := []string{"a", "b"}
	since := []string{"1", "2"}

	// Both members covered: the queued records are used (b away there).
	res, err := e.rosterFrom(ctx, queued("a", "1|0|on|0|0", "b", "1|0|away|0|0"), members, since, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(res); got["a"] != Online || got["b"] != Away {
		t.Errorf("statuses %v, want a online and b away (the queued records)", got)
	}
	// b missing from the queued read: both are read again (online in Redis).
	res, err = e.rosterFrom(ctx, queued("a", "1|0|away|0|0"), members, since, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(res); got["a"] != Online || got["b"] != Online {
		t.Errorf("statuses %v, want both online (read again)", got)
	}
	// A failed queued read: read again too.
	failed := redis.NewCmd(ctx)
	failed.SetErr(redis.ErrClosed)
	res, err = e.rosterFrom(ctx, failed, members, since, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := statuses(res); got["a"] != Online || got["b"] != Online {
		t.Errorf("statuses %v, want both online (read again)", got)
	}
}
