package presence

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/presenced/presenced/timestamp"
	"github.com/redis/go-redis/v9"
)

// globEscape quotes the glob characters of s for a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ConversationCounts implements AdminView. Redis keeps no index of
// conversations (none is needed on the hot path), so the panel SCANs for
// the conversations' member records ("P:{c:C}:m", every master of a Redis
// Cluster) and counts each with one pipelined HLEN. With 10,000
// conversations this is tens of milliseconds; the panel asks every 2 s.
func (e *RedisEngine) ConversationCounts(ctx context.Context, prefix string, offset, limit int) (int, []ConversationCount, error) {
	head := e.rcfg.Prefix + ":{c:"
	match := globEscape(head) + globEscape(prefix) + "*}:m"
	var (
		keys []string
		mu   sync.Mutex // ForEachMaster scans the masters concurrently
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, match, 5000).Iterator()
		var mine []string
		for it.Next(ctx) {
			mine = append(mine, it.Val())
		}
		if err := it.Err(); err != nil {
			return err
		}
		mu.Lock()
		keys = append(keys, mine...)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		var mine []string
		it := e.rdb.Scan(ctx, 0, match, 5000).Iterator()
		for it.Next(ctx) {
			mine = append(mine, it.Val())
		}
		keys, err = mine, it.Err()
	}
	if err != nil {
		return 0, nil, unavailable("scan conversations", err)
	}
	cmds := make([]*redis.IntCmd, len(keys))
	if len(keys) > 0 {
		pipe := e.rdb.Pipeline()
		for i, k := range keys {
			cmds[i] = pipe.HLen(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return 0, nil, unavailable("count conversations", err)
		}
	}
	all := make([]ConversationCount, 0, len(keys))
	for i, k := range keys {
		id, ok := strings.CutPrefix(k, head)
		if !ok {
			continue
		}
		id, ok = strings.CutSuffix(id, "}:m")
		if !ok || !strings.HasPrefix(id, prefix) {
			continue
		}
		if n := int(cmds[i].Val()); n > 0 {
			all = append(all, ConversationCount{ID: id, Online: n})
		}
	}
	return len(all), pageOf(all, offset, limit), nil
}

// holders reads the live node instances: node → instance token and last
// lease renewal (Redis's clock), from the lease set and the holders.
func (e *RedisEngine) holders(ctx context.Context) (map[string]holder, error) {
	pipe := e.rdb.Pipeline()
	leaseCmd := pipe.ZRangeWithScores(ctx, e.kLease, 0, -1)
	holderCmd := pipe.HGetAll(ctx, e.kHolder)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, unavailable("leases", err)
	}
	hs := holderCmd.Val()
	out := map[string]holder{}
	for _, z := range leaseCmd.Val() {
		node, ok := z.Member.(string)
		if !ok {
			continue
		}
		h := holder{last: timestamp.FromMillis(int64(z.Score) - e.cfg.LeaseTTL.Milliseconds())}
		// "token|since|last"
		if f := strings.Split(hs[node], "|"); len(f) == 3 {
			h.token = f[0]
			if last, err := strconv.ParseInt(f[2], 10, 64); err == nil && last > 0 {
				h.last = timestamp.FromMillis(last)
			}
		}
		out[node] = h
	}
	return out, nil
}

type holder struct {
	token string
	last  time.Time
}

// UserSockets implements AdminView: the user's sockets (from its record),
// then each live node instance's registry line of those sockets (node and
// conversations): a round trip for the instances' bucket counts, one for
// the lines (in each bucket a socket may be in, and in an earlier
// release's single hash).
func (e *RedisEngine) UserSockets(ctx context.Context, userID string) ([]SocketInfo, error) {
	sids, err := e.userSocketIDs(ctx, userID)
	if err != nil {
		return nil, unavailable("user sockets", err)
	}
	out := make([]SocketInfo, 0, len(sids))
	if len(sids) == 0 {
		return out, nil
	}
	hs, err := e.holders(ctx)
	if err != nil {
		return nil, err
	}
	nodes := sortedKeys(hs)
	pipe := e.rdb.Pipeline()
	counts := make([]*redis.StringCmd, len(nodes))
	for i, n := range nodes {
		counts[i] = pipe.Get(ctx, regCountKey(e.registryKey(n, hs[n].token)))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, unavailable("user sockets", err)
	}
	type probe struct {
		node, sid string
		cmd       *redis.StringCmd
	}
	var probes []probe
	legacy := make([]*redis.SliceCmd, len(nodes))
	pipe = e.rdb.Pipeline()
	for i, n := range nodes {
		base := e.registryKey(n, hs[n].token)
		legacy[i] = pipe.HMGet(ctx, base, sids...)
		c, _ := counts[i].Int()
		buckets := bucketsOf(c)
		for _, sid := range sids {
			// the buckets it may be in: one for each count the registry had
			seen := map[int]bool{}
			for b := regMinBuckets; b <= buckets; b *= 2 {
				if k := regHash(sid, b); !seen[k] {
					seen[k] = true
					probes = append(probes, probe{n, sid, pipe.HGet(ctx, regBucketKey(base, k), sid)})
				}
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, unavailable("user sockets", err)
	}
	found := map[string]SocketInfo{}
	add := func(node, sid, line string) {
		f := strings.Split(line, "\t")
		found[sid] = SocketInfo{ID: sid, Node: node, Conversations: f[1:]}
	}
	for i, n := range nodes {
		for j, v := range legacy[i].Val() {
			if line, ok := v.(string); ok {
				add(n, sids[j], line)
			}
		}
	}
	for _, p := range probes {
		if line, err := p.cmd.Result(); err == nil {
			add(p.node, p.sid, line)
		}
	}
	for _, sid := range sortedKeys(found) {
		out = append(out, found[sid])
	}
	return out, nil
}

// userSocketIDs reads the socket list of a user's record, or the set of a
// record of an earlier release (see userLib).
func (e *RedisEngine) userSocketIDs(ctx context.Context, userID string) ([]string, error) {
	v, err := e.rdb.HGet(ctx, e.kUsers, userID).Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, ok := parseUser(v)
	if !ok {
		return nil, nil
	}
	if r.legacy {
		sids, err := e.rdb.SMembers(ctx, e.userSockets(userID)).Result()
		if err == redis.Nil {
			err = nil
		}
		return sids, err
	}
	if r.socks == "" {
		return nil, nil
	}
	return strings.Split(r.socks, ","), nil
}

// Leases implements AdminView: every live node's last renewal, on Redis's
// clock.
func (e *RedisEngine) Leases(ctx context.Context) (map[string]time.Time, error) {
	hs, err := e.holders(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(hs))
	for n, h := range hs {
		out[n] = h.last
	}
	return out, nil
}

// Previews implements AdminView: one pipelined round trip for all ids.
func (e *RedisEngine) Previews(ctx context.Context, ids []string, n int) ([]Preview, error) {
	out := make([]Preview, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	now := strconv.FormatInt(timestamp.Millis(e.cfg.Now()), 10)
	pipe := e.rdb.Pipeline()
	members := make([]*redis.ScanCmd, len(ids))
	typing := make([]*redis.StringSliceCmd, len(ids))
	for i, id := range ids {
		k := e.conv(id)
		// the first fields of one HSCAN step: the same ones each time
		// (a small hash comes whole)
		members[i] = pipe.HScan(ctx, k.m, 0, "", int64(n))
		typing[i] = pipe.ZRangeByScore(ctx, k.ty, &redis.ZRangeBy{Min: "(" + now, Max: "+inf"})
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, unavailable("previews", err)
	}
	for i := range ids {
		kv, _ := members[i].Val()
		out[i] = Preview{Members: make([]string, 0, min(n, len(kv)/2)), Typing: typing[i].Val()}
		for j := 0; j+1 < len(kv) && len(out[i].Members) < n; j += 2 {
			out[i].Members = append(out[i].Members, kv[j])
		}
		if out[i].Typing == nil {
			out[i].Typing = []string{}
		}
		slices.Sort(out[i].Members)
		slices.Sort(out[i].Typing)
	}
	return out, nil
}
