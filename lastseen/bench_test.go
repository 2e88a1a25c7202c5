package lastseen_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/presenced/presenced/lastseen"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/store"
)

// BenchmarkRecord measures the common case: activity within the coarse
// interval, one map lookup under a mutex.
func BenchmarkRecord(b *testing.B) {
	p := lastseen.NewPipeline(lastseen.NewMemory(), newFakeStore(), lastseen.Config{})
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("user%05d", i)
		must(b, p.Record(b.Context(), ids[i], t0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		_ = p.Record(b.Context(), ids[i%len(ids)], t0.Add(time.Duration(i)*time.Microsecond))
		i++
	}
}

// BenchmarkPresences1000 is presence:query's read of 1,000 ids (half
// online, half never seen) on Redis with the PostgreSQL store, as a node
// runs it: the settings read from the store every time, or held under
// their buckets' versions (Versions).
func BenchmarkPresences1000(b *testing.B) {
	ctx := context.Background()
	buf, c := redisBuffer(b)
	prefix := "lsbench:" + randHex(6)
	b.Cleanup(func() {
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	st := pgStore(b)
	eng := presence.NewRedisEngine(c, presence.Config{NodeID: "n1"}, presence.RedisConfig{Prefix: prefix})
	// more online users than a Redis listpack holds (hash-max-listpack-
	// entries, 128 to 512): the users hash is a hash table, as on a node
	// in use, where a lookup does not scan the hash
	for i := range 600 {
		must(b, eng.Connect(ctx, presence.Socket{ID: fmt.Sprintf("s-bg%d", i), UserID: fmt.Sprintf("bg%d", i)}))
	}
	ids := make([]string, 1000)
	for i := range ids {
		if i%2 == 0 {
			ids[i] = fmt.Sprintf("on%d", i)
			must(b, eng.Connect(ctx, presence.Socket{ID: "s-" + ids[i], UserID: ids[i]}))
		} else {
			ids[i] = fmt.Sprintf("ghost%d", i)
		}
	}
	for _, kind := range []string{"store", "versions"} {
		b.Run(kind, func(b *testing.B) {
			d := lastseen.ReaderDeps{Status: eng, Buffer: buf, Store: store.Coalesced(st), StoredMaxAge: 30 * time.Second}
			if kind == "versions" {
				d.Versions = lastseen.NewRedisVersions(c, prefix)
			}
			r := lastseen.NewReader(d)
			for range 3 {
				_, err := r.Presences(ctx, "viewer", ids)
				must(b, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Presences(ctx, "viewer", ids); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
