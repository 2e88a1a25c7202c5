// Package redistest is test support for tests that need a Redis server.
// Import it only from _test files.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

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

var (
	once     sync.Once
	opts     *redis.Options
	reachErr error
)

// Options returns client options for the test Redis (see URL), with
// ContextTimeoutEnabled as the server sets it; each call returns a copy of
// its own. The server is asked for a PING once per test binary: an
// unreachable server skips the test, or fails it under CI=true or when
// REDIS_TEST_URL is set.
func Options(tb testing.TB) *redis.Options {
	tb.Helper()
	url := URL()
	once.Do(func() {
		opts, reachErr = redis.ParseURL(url)
		if reachErr != nil {
			reachErr = fmt.Errorf("REDIS_TEST_URL: %w", reachErr)
			return
		}
		opts.ContextTimeoutEnabled = true
		c := redis.NewClient(opts)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		reachErr = c.Ping(ctx).Err()
	})
	if reachErr != nil {
		if os.Getenv("CI") == "true" || os.Getenv("REDIS_TEST_URL") != "" {
			tb.Fatalf("redis at %s unreachable (required under CI=true or with REDIS_TEST_URL set): %v", url, reachErr)
		}
		tb.Skipf("redis at %s unreachable (set REDIS_TEST_URL): %v", url, reachErr)
	}
	o := *opts
	return &o
}

// Client connects to the test Redis (see Options) and closes the client
// when tb ends.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewClient(Options(tb))
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
