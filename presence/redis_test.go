package presence_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/redistest"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

// testRedis connects to REDIS_TEST_URL (default the local server). Under
// CI=true an unreachable Redis fails the test instead of skipping it.
func testRedis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	return redistest.Client(tb)
}

// uniquePrefix isolates one test's keys and deletes them afterwards.
func uniquePrefix(tb testing.TB, rdb redis.UniversalClient) string {
	tb.Helper()
	return redistest.Prefix(tb, rdb, "test-")
}

// fakeClockRedis is a test key prefix whose engines read one fake clock,
// in Go and in their scripts, and report to one recorder.
type fakeClockRedis struct {
	rdb    redis.UniversalClient
	prefix string
	clock  *enginetest.Clock
	rec    *enginetest.Recorder
}

func newFakeClockRedis(tb testing.TB) *fakeClockRedis {
	tb.Helper()
	rdb := testRedis(tb)
	return &fakeClockRedis{rdb: rdb, prefix: uniquePrefix(tb, rdb), clock: enginetest.NewClock(), rec: &enginetest.Recorder{}}
}

// node is an engine of cfg (its Now and Sink set to the fixture's).
func (f *fakeClockRedis) node(cfg presence.Config) *presence.RedisEngine {
	cfg.Now, cfg.Sink = f.clock.Now, f.rec.Sink()
	eng := presence.NewRedisEngine(f.rdb, cfg, presence.RedisConfig{Prefix: f.prefix})
	presence.SetRedisClock(eng, f.clock.Now)
	return eng
}

// connectJoin connects socket sid of user to eng and joins it to convs.
func connectJoin(tb testing.TB, eng presence.Engine, sid, user string, convs ...string) {
	tb.Helper()
	ctx := context.Background()
	if err := eng.Connect(ctx, presence.Socket{ID: sid, UserID: user}); err != nil {
		tb.Fatal(err)
	}
	for _, c := range convs {
		if _, err := eng.Join(ctx, sid, c); err != nil {
			tb.Fatal(err)
		}
	}
}

func TestRedisEngine(t *testing.T) {
	enginetest.Run(t, redisEngines(func(*presence.RedisEngine) {}))
}

// The same suite with the engine confined to one slot per script, as on a
// Redis Cluster: a roster's statuses are read in a round trip of their own.
func TestRedisEngineOneSlotPerScript(t *testing.T) {
	enginetest.Run(t, redisEngines(presence.OneSlotPerScript))
}

// redisEngines makes the suite's engines: Redis engines sharing a test
// prefix, on the suite's clock, each set up by with.
func redisEngines(with func(*presence.RedisEngine)) func(t *testing.T) func(presence.Config) presence.Engine {
	return func(t *testing.T) func(presence.Config) presence.Engine {
		rdb := testRedis(t)
		prefix := uniquePrefix(t, rdb)
		return func(cfg presence.Config) presence.Engine {
			eng := presence.NewRedisEngine(rdb, cfg, presence.RedisConfig{Prefix: prefix})
			presence.SetRedisClock(eng, cfg.Now) // the suite moves time
			with(eng)
			return eng
		}
	}
}

// The same suite on a Redis Cluster of three masters: the keys of a
// conversation, of the shared state ({g}) and of each node live on the
// masters their slots give.
func TestRedisEngineCluster(t *testing.T) {
	cc := redistest.Cluster(t)
	enginetest.Run(t, func(t *testing.T) func(presence.Config) presence.Engine {
		prefix := uniquePrefix(t, cc)
		return func(cfg presence.Config) presence.Engine {
			eng := presence.NewRedisEngine(cc, cfg, presence.RedisConfig{Prefix: prefix})
			presence.SetRedisClock(eng, cfg.Now)
			return eng
		}
	})
}
