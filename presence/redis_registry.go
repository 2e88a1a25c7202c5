package presence

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A node instance's registry (what its sockets are: user and conversations,
// for the reaper after a crash and for the node's own reconciliation) is
// split into small hashes, its buckets: "<base>:<i>", socket id → line.
// Redis keeps a hash of at most 128 short fields and values as one packed
// listpack, about 45-55 bytes a line here against about 95 in one big hash
// (a dictionary entry and two strings for each). A socket's bucket is the
// low bits of a hash of its id, taken with the number of buckets when it
// connected; the node doubles that number as its sockets grow (at most
// regPerBucket a bucket on average) and never lowers it, and every socket
// keeps its bucket. The number, when above regMinBuckets, is in
// "<base>:n", written before any socket uses it, so that a reaper reads
// every bucket. A release before 2026-12-05 kept one hash, "<base>",
// still read by the reaper and the admin view.
const (
	regMinBuckets = 8
	regPerBucket  = 48
	regReadGroup  = 64 // buckets read in one pipelined round trip
)

// regHash places a socket id in a registry of n buckets (a power of two).
func regHash(sid string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sid))
	return int(h.Sum32() & uint32(n-1))
}

func regBucketKey(base string, i int) string { return base + ":" + strconv.Itoa(i) }

func regCountKey(base string) string { return base + ":n" }

// regKey is the bucket key of one of this node's sockets.
func (e *RedisEngine) regKey(s *rSocket) string { return regBucketKey(e.kNode, s.bucket) }

// registry is a socket's line in this node's registry.
func registry(s *rSocket) string {
	var b strings.Builder
	b.WriteString(s.user)
	for _, c := range sortedKeys(s.convs) {
		b.WriteByte('\t')
		b.WriteString(c)
	}
	return b.String()
}

// registryRoom doubles the registry's buckets, and records their number
// in Redis first, when one more socket would pass regPerBucket a bucket
// on average. Called before a socket is placed.
func (e *RedisEngine) registryRoom(ctx context.Context) error {
	e.mu.Lock()
	n, have := len(e.local)+1, e.regBuckets
	e.mu.Unlock()
	if n <= regPerBucket*have {
		return nil
	}
	e.regMu.Lock()
	defer e.regMu.Unlock()
	e.mu.Lock()
	have = e.regBuckets
	e.mu.Unlock()
	want := have
	for n > regPerBucket*want {
		want *= 2
	}
	if want == have {
		return nil // another connect grew it meanwhile
	}
	if err := e.rdb.Set(ctx, regCountKey(e.kNode), want, 0).Err(); err != nil {
		return err
	}
	e.mu.Lock()
	e.regBuckets = want
	e.mu.Unlock()
	return nil
}

// regBucketCount reads how many buckets a node instance's registry has.
func (e *RedisEngine) regBucketCount(ctx context.Context, base string) (int, error) {
	n, err := e.rdb.Get(ctx, regCountKey(base)).Int()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return bucketsOf(n), err
}

// bucketsOf is a registry's bucket count as "<base>:n" gives it (0: absent).
func bucketsOf(n int) int { return max(n, regMinBuckets) }

// regLine is one socket's line in a registry, with the key it is under.
type regLine struct {
	key, sid, line string
}

// scanRegistry reads the registry keys given (buckets, or an earlier
// release's single hash) regReadGroup keys a round trip (HSCAN returns a
// small hash whole; a big one is scanned on alone) and gives fn each
// group's lines. Lines removed by fn meanwhile are not read again.
func (e *RedisEngine) scanRegistry(ctx context.Context, keys []string, fn func([]regLine) error) error {
	for len(keys) > 0 {
		group := keys[:min(regReadGroup, len(keys))]
		keys = keys[len(group):]
		pipe := e.rdb.Pipeline()
		scans := make([]*redis.ScanCmd, len(group))
		for i, k := range group {
			scans[i] = pipe.HScan(ctx, k, 0, "", 1000)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		var lines []regLine
		type rest struct {
			key    string
			cursor uint64
		}
		var more []rest
		for i, sc := range scans {
			kv, cursor, err := sc.Result()
			if err != nil {
				return err
			}
			lines = appendLines(lines, group[i], kv)
			if cursor != 0 {
				more = append(more, rest{group[i], cursor})
			}
		}
		if len(lines) > 0 {
			if err := fn(lines); err != nil {
				return err
			}
		}
		for _, r := range more { // a big hash: the rest of it, a chunk at a time
			k, cursor := r.key, r.cursor
			for {
				kv, next, err := e.rdb.HScan(ctx, k, cursor, "", 1000).Result()
				if err != nil {
					return err
				}
				lines = appendLines(lines[:0], k, kv)
				if len(lines) > 0 {
					if err := fn(lines); err != nil {
						return err
					}
				}
				if next == 0 {
					break
				}
				cursor = next
			}
		}
	}
	return nil
}

// appendLines appends the lines of an HSCAN reply (field, value, …) of key.
func appendLines(lines []regLine, key string, kv []string) []regLine {
	for j := 0; j+1 < len(kv); j += 2 {
		lines = append(lines, regLine{key, kv[j], kv[j+1]})
	}
	return lines
}

// registryKeys are every key a node instance's registry may be under:
// the earlier release's hash, then n buckets.
func registryKeys(base string, n int) []string {
	keys := make([]string, 0, n+1)
	keys = append(keys, base)
	for i := range n {
		keys = append(keys, regBucketKey(base, i))
	}
	return keys
}
