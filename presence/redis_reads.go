package presence

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/presenced/presenced/timestamp"
	"github.com/redis/go-redis/v9"
)

// rosterOf completes a roster with each member's status (one HMGET).
func (e *RedisEngine) rosterOf(ctx context.Context, users, since, typing []string) (JoinResult, error) {
	var recs []any
	if len(users) > 0 {
		pipe := e.rdb.Pipeline()
		get := pipe.HMGet(ctx, e.kUsers, users...)
		if err := e.exec(ctx, pipe); err == nil {
			recs = get.Val()
		} else {
			// The roster itself is known; only the online/away split is
			// not. Everyone listed has a live socket: say online.
			e.log.Warn("roster statuses unavailable; listing members as online", "err", err)
			recs = nil
		}
	}
	return rosterWith(users, since, typing, recs), nil
}

// queueStatuses queues, on a single Redis server, the read of the user
// records of conversation k's online members on the pipeline that reads
// its roster: the roster then costs one round trip, not two (measured with
// two: the join burst's ack median 1.5x). On a cluster it returns nil
// (rosterOf reads them after).
func (e *RedisEngine) queueStatuses(ctx context.Context, pipe redis.Pipeliner, k convKeys) *redis.Cmd {
	if !e.crossSlot {
		return nil
	}
	return rosterStatus.Run(ctx, pipe, []string{e.kUsers}, k.m)
}

// rosterFrom builds a roster from its member records (HGETALL m; now is
// Redis's clock when they were read) with the statuses queueStatuses read,
// or with a read of its own (rosterOf) if there are none, or if the members
// changed between the two reads.
func (e *RedisEngine) rosterFrom(ctx context.Context, st *redis.Cmd, members map[string]string, now int64, typing []string) (JoinResult, error) {
	if names, recs, ok := queuedStatuses(st, members); ok {
		since := make([]string, len(names))
		for i, u := range names {
			since[i] = sinceOf(members[u], now)
		}
		return rosterWith(names, since, typing, recs), nil
	}
	users, since := membersOf(members, now)
	return e.rosterOf(ctx, users, since, typing)
}

// queuedStatuses is what queueStatuses read: the members' names, in the
// order of their records; ok when they are those of members (the records
// HGETALL read in the same round trip).
func queuedStatuses(st *redis.Cmd, members map[string]string) (names []string, recs []any, ok bool) {
	if st == nil {
		return nil, nil, false
	}
	raw, err := st.Slice()
	if err != nil || len(raw) != 2 {
		return nil, nil, false
	}
	names = strs(raw[0])
	recs, _ = raw[1].([]any)
	if len(names) != len(members) || len(recs) != len(names) {
		return nil, nil, false
	}
	for _, u := range names { // names are distinct (HKEYS)
		if _, in := members[u]; !in {
			return nil, nil, false
		}
	}
	return names, recs, true
}

// membersOf reads a conversation's members, and since when each is one,
// from its member records (HGETALL m; see memberLib).
func membersOf(records map[string]string, now int64) (users, since []string) {
	users, since = make([]string, 0, len(records)), make([]string, 0, len(records))
	for u, v := range records {
		users, since = append(users, u), append(since, sinceOf(v, now))
	}
	return users, since
}

// sinceOf is since when a member record's user is a member, in ms. A
// record it cannot read counts as a member since now (Redis's clock, ms),
// as the roster script of earlier releases had it.
func sinceOf(record string, now int64) string {
	since, _, _, ok := parseMember(record)
	if !ok {
		since = now
	}
	return strconv.FormatInt(since, 10)
}

// memberB64 is the alphabet of a short member record's join time.
const memberB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// parseMember reads a member record (memberLib): since when its user is a
// member (ms), and its socket list (tags or ids joined by ","); legacy: a
// record of a release before 2026-12-02, without a list (its sockets are
// in su). ok is false for a record it cannot read.
func parseMember(rec string) (since int64, socks string, legacy, ok bool) {
	if !strings.Contains(rec, "|") { // the short form: since, then sockets
		if len(rec) < 8 {
			return 0, "", false, false
		}
		for i := range 7 {
			d := strings.IndexByte(memberB64, rec[i])
			if d < 0 {
				return 0, "", false, false
			}
			since = since*64 + int64(d)
		}
		return since, rec[7:], false, true
	}
	f := strings.SplitN(rec, "|", 5)
	if len(f) < 4 || f[1] == "" || strings.Trim(f[1], "0123456789") != "" {
		return 0, "", false, false
	}
	since, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, "", false, false
	}
	if len(f) == 4 {
		return since, "", true, true
	}
	return since, f[4], false, true
}

// rosterWith builds a roster from its members, their join times, who is
// typing and the members' user records (recs nil: unknown, all online).
func rosterWith(users, since, typing []string, recs []any) JoinResult {
	res := JoinResult{Online: make([]Member, 0, len(users)), Typing: typing}
	if res.Typing == nil {
		res.Typing = []string{}
	}
	for i, u := range users {
		st := Away
		if recs == nil {
			st = Online
		} else if r, ok := parseUser(recs[i]); ok {
			st = r.status()
			if st == Offline {
				st = Away
			}
		}
		var sinceMs int64
		if i < len(since) {
			sinceMs, _ = strconv.ParseInt(since[i], 10, 64)
		}
		res.Online = append(res.Online, Member{UserID: u, Status: st, Since: timestamp.FromMillis(sinceMs)})
	}
	slices.SortFunc(res.Online, func(a, b Member) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.UserID, b.UserID))
	})
	slices.Sort(res.Typing)
	return res
}

type userRec struct {
	n           int64
	act         int64
	st          string
	grace, disc int64
	socks       string // the socket ids joined by ","; legacy: in the usk set
	legacy      bool   // a record without its sockets (see userLib)
}

// parseUser parses a user record (see userLib).
func parseUser(v any) (userRec, bool) {
	s, ok := v.(string)
	if !ok {
		return userRec{}, false
	}
	// five or six fields split by "|", without allocating (a query of
	// 1,000 users parses 1,000 records)
	var f [5]string
	for i := range 4 {
		var found bool
		if f[i], s, found = strings.Cut(s, "|"); !found {
			return userRec{}, false
		}
	}
	var r userRec
	var six bool
	f[4], r.socks, six = strings.Cut(s, "|")
	if six && strings.Contains(r.socks, "|") {
		return userRec{}, false
	}
	r.legacy = !six
	r.n, _ = strconv.ParseInt(f[0], 10, 64)
	r.act, _ = strconv.ParseInt(f[1], 10, 64)
	r.st = f[2]
	r.grace, _ = strconv.ParseInt(f[3], 10, 64)
	r.disc, _ = strconv.ParseInt(f[4], 10, 64)
	return r, true
}

// status is the record's: its away timer (on Redis's clock, like the
// activity it follows) turns it away, activity back online. The node's
// clock is not compared with the activity's time.
func (r userRec) status() Status {
	if r.n == 0 && r.grace == 0 {
		return Offline
	}
	if r.st == "away" {
		return Away
	}
	return Online
}

func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

func strs(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Roster implements Engine.
func (e *RedisEngine) Roster(ctx context.Context, conv string) (JoinResult, error) {
	k := e.conv(conv)
	pipe := e.rdb.Pipeline()
	ty := convTyping.Run(ctx, pipe, []string{k.ty}, e.clk())
	members := pipe.HGetAll(ctx, k.m)
	st := e.queueStatuses(ctx, pipe, k)
	// (a failure of the statuses' read alone is not the roster's: rosterFrom
	// reads them again)
	if err := e.exec(ctx, pipe); err != nil && (ty.Err() != nil || members.Err() != nil) {
		return JoinResult{}, unavailable("roster", err)
	}
	raw, _ := ty.Slice()
	if len(raw) != 2 {
		return JoinResult{}, unavailable("roster", errors.New("unexpected script reply"))
	}
	return e.rosterFrom(ctx, st, members.Val(), toInt(raw[0]), strs(raw[1]))
}

// Users implements Engine: one HMGET whatever the number of ids.
func (e *RedisEngine) Users(ctx context.Context, ids []string) ([]UserPresence, error) {
	if len(ids) == 0 {
		return []UserPresence{}, nil
	}
	recs, err := e.rdb.HMGet(ctx, e.kUsers, ids...).Result()
	if err != nil {
		return nil, unavailable("users", err)
	}
	return e.usersFrom(ids, recs), nil
}

// QueueUsers queues the read of Users on a pipeline of the same Redis, so
// that a caller can join it with reads of its own in one round trip. The
// returned function, once the pipeline ran, calls each with every id's
// presence (the i-th of ids): no slice of them is built (a query of 1,000
// ids copied each into its own target).
func (e *RedisEngine) QueueUsers(ctx context.Context, pipe redis.Pipeliner, ids []string) func(each func(i int, up UserPresence)) error {
	if len(ids) == 0 {
		return func(func(int, UserPresence)) error { return nil }
	}
	cmd := pipe.HMGet(ctx, e.kUsers, ids...)
	return func(each func(int, UserPresence)) error {
		recs, err := cmd.Result()
		if err != nil {
			return unavailable("users", err)
		}
		eachUser(ids, recs, each)
		return nil
	}
}

func (e *RedisEngine) usersFrom(ids []string, recs []any) []UserPresence {
	out := make([]UserPresence, len(ids))
	eachUser(ids, recs, func(i int, up UserPresence) { out[i] = up })
	return out
}

// eachUser calls each with the presence of every id, read from its record
// (recs[i], an HMGET's answer).
func eachUser(ids []string, recs []any, each func(i int, up UserPresence)) {
	for i, id := range ids {
		up := UserPresence{UserID: id, Status: Offline}
		if i < len(recs) {
			if r, ok := parseUser(recs[i]); ok {
				if up.Status = r.status(); up.Status != Offline {
					up.Since = timestamp.FromMillis(r.act)
				}
			}
		}
		each(i, up)
	}
}
