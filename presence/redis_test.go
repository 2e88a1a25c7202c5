package presence_test

import (
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

func TestRedisEngine(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) func(presence.Config) presence.Engine {
		rdb := testRedis(t)
		prefix := uniquePrefix(t, rdb)
		return func(cfg presence.Config) presence.Engine {
			eng := presence.NewRedisEngine(rdb, cfg, presence.RedisConfig{Prefix: prefix})
			presence.SetRedisClock(eng, cfg.Now) // the suite moves time
			return eng
		}
	})
}
