// Package redistest is test support for tests that need a Redis server.
// Import it only from _test files.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// DefaultURL is the Redis server used when REDIS_TEST_URL is not set.
const DefaultURL = "redis://127.0.0.1:6379"

// URL is REDIS_TEST_URL, or else DefaultURL.
func URL() string {
	if u := os.Getenv("REDIS_TEST_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Client connects to the test Redis (see URL) and closes the client when
// tb ends. An unreachable server skips the test, or fails it under CI=true.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	url := URL()
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

// Prefix returns name followed by a random suffix, a key prefix no other
// test uses; the keys under it ("<prefix>:*") are deleted when tb ends.
// Register it after Client, so that the deletion runs before the close.
func Prefix(tb testing.TB, rdb redis.UniversalClient, name string) string {
	tb.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p := name + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx := context.Background()
		it := rdb.Scan(ctx, 0, p+":*", 1000).Iterator()
		pipe := rdb.Pipeline()
		for it.Next(ctx) {
			pipe.Unlink(ctx, it.Val())
			if pipe.Len() >= 1000 {
				_, _ = pipe.Exec(ctx)
			}
		}
		_, _ = pipe.Exec(ctx)
	})
	return p
}
