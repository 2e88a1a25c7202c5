package presence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/presence/enginetest"
)

// testRedis connects to REDIS_TEST_URL (default the local server). Under
// CI=true an unreachable Redis fails the test instead of skipping it.
func testRedis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	url := os.Getenv("REDIS_TEST_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("REDIS_TEST_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		_ = rdb.Close()
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redis at %s unreachable: %v", url, err)
		}
		tb.Skipf("redis at %s unreachable: %v", url, err)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// uniquePrefix isolates one test's keys and deletes them afterwards.
func uniquePrefix(tb testing.TB, rdb redis.UniversalClient) string {
	tb.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p := "test-" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, p+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return p
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
